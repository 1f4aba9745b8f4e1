"""The ONNX Runtime runtime: .onnx files run by ONNX Runtime (IOBinding on GPU providers).

Its modules: ``runtime`` (the registered ``OnnxRuntime``), ``onnx_io`` (reading, checking
and saving .onnx files, sessions), ``loading`` (a file to a LoadedModel), ``timing`` (what
the timing harness calls), ``profile`` (per-node times from ORT's profiler), ``graph``,
``layers`` (per-layer taps) and ``serving`` (Triton's onnxruntime backend).
"""

from accel.runtimes.onnxruntime.runtime import OnnxRuntime

__all__ = ["OnnxRuntime"]
