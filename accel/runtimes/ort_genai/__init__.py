"""The ONNX Runtime GenAI runtime: a model folder written by ONNX Runtime GenAI's model builder
(``genai_config.json``, ``model.onnx`` + ``.data``), made by the ``ort_genai`` pass.

Its modules: ``runtime`` (the registered ``OrtGenaiRuntime``) and ``decoder`` (generation
through ``og.Generator``, the folder's facts, and the plain forward through an ONNX Runtime
session fed an empty KV cache).
"""

from accel.runtimes.ort_genai.runtime import OrtGenaiRuntime

__all__ = ["OrtGenaiRuntime"]
