"""Accel: the headless engine of Accel Studio."""

__version__ = "0.1.0"

# The built-in runtimes, one line each: a runtime package registers itself when imported
# (accel/models/runtime.py); its library (torch, onnxruntime, openvino, tensorrt) is
# imported only when a model of its kind runs, so a missing one makes only it unavailable.
# The order is the suffix table's order of preference (bisect picks a step's ONNX file
# before its torch files).
import accel.runtimes.onnxruntime  # noqa: E402, F401, I001
import accel.runtimes.torch  # noqa: E402, F401
import accel.runtimes.openvino  # noqa: E402, F401
import accel.runtimes.tensorrt  # noqa: E402, F401
import accel.runtimes.ort_genai  # noqa: E402, F401
