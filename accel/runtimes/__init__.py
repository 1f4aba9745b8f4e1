"""The runtimes: one package per model kind (torch, onnxruntime, openvino, tensorrt), each
registering its runtime (``accel.models.runtime.register_runtime``) when imported.

``accel/__init__.py`` imports the built-in ones; ``base`` holds what they share.
"""
