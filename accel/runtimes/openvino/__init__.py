"""The OpenVINO runtime: IR files (.xml + .bin) compiled by the OpenVINO runtime.

Its modules: ``runtime`` (the registered ``OpenVinoRuntime``), ``ir`` (reading an IR with
its .bin checked to lie in the model's folder, its spec and statistics, feeding, compiling
and saving it), ``timing``, ``profile`` (performance counters), ``graph``, ``layers``
(per-layer taps) and ``serving`` (Triton's OpenVINO backend).
"""

from accel.runtimes.openvino.runtime import OpenVinoRuntime

__all__ = ["OpenVinoRuntime"]
