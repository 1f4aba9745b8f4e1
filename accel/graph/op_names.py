"""The torch module a compiled op came from, read from the op's name (no runtime needed)."""

from __future__ import annotations

from accel.graph.model import scope_to_module_path


def op_module_path(name: str) -> str:
    """Torch module path encoded in a compiled op's name ("" when none): OpenVINO's
    ``ov.convert_model`` on a torch module names ops ``__module.layer1.0.conv1/aten::...``;
    the TorchScript ONNX exporter ``/layer1/layer1.0/conv1/Conv``."""
    head = name.split("/", 1)[0]
    if head.startswith("__module."):
        return head[len("__module.") :]
    if name.startswith("/"):
        parts = [p for p in name.split("/") if p]
        return scope_to_module_path(parts[:-1])
    return ""
