"""The TensorRT runtime: ONNX models run by ONNX Runtime's TensorRT execution provider,
and TensorRT plans served by Triton's ``tensorrt_plan`` backend. NVIDIA GPUs only."""

from accel.runtimes.tensorrt.runtime import TensorRtRuntime

__all__ = ["TensorRtRuntime"]
