"""Runtime backends: one handler per model kind (see ``accel.backends.base``).

``get_backend(kind)`` gives the handler of a kind, ``backend_of(model)`` the handler of a
``LoadedModel``, ``backend_for_file(path)`` the handler that loads a file by its suffix.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from accel.backends.base import Backend, BackendUnavailable, BenchTarget, ScriptRuntime
from accel.errors import AccelError

__all__ = [
    "KINDS",
    "Backend",
    "BackendUnavailable",
    "BenchTarget",
    "ScriptRuntime",
    "backend_for_file",
    "backend_of",
    "get_backend",
    "list_backends",
    "profile_rows_are_nodes",
    "reach_hint",
]

# kind -> "module:Class"; imported on first use.
_HANDLERS = {
    "torch": "accel.backends.torch_backend:TorchBackend",
    "onnx": "accel.backends.onnx_backend:OnnxBackend",
    "openvino": "accel.backends.openvino_backend:OpenVinoBackend",
    "tensorrt": "accel.backends.tensorrt_backend:TensorRtBackend",
}
KINDS = tuple(_HANDLERS)
_CACHE: dict[str, Backend] = {}


def get_backend(kind: str) -> Backend:
    """The handler of model kind ``kind``."""
    b = _CACHE.get(kind)
    if b is not None:
        return b
    target = _HANDLERS.get(kind)
    if target is None:
        raise AccelError(f"unknown model kind {kind!r}; known kinds: {', '.join(KINDS)}")
    mod, _, cls = target.partition(":")
    b = _CACHE[kind] = getattr(importlib.import_module(mod), cls)()
    return b


def backend_of(model: Any) -> Backend:
    """The handler of a ``LoadedModel`` (anything with a ``kind``)."""
    return get_backend(getattr(model, "kind", "torch"))


def list_backends() -> list[Backend]:
    return [get_backend(k) for k in KINDS]


def backend_for_file(path: str | Path) -> Backend | None:
    """The handler that loads files with ``path``'s suffix (None: not a runtime file)."""
    suffix = Path(path).suffix.lower()
    for k in KINDS:
        b = get_backend(k)
        if suffix in b.file_suffixes:
            return b
    return None


def profile_rows_are_nodes(prof: Any) -> bool:
    """True when a ModelProfile's rows are graph node names (ONNX, OpenVINO), False when
    they are torch module paths (or the profile's kind is unknown here)."""
    kind = getattr(prof, "kind", "torch")
    return kind in _HANDLERS and get_backend(kind).profile_rows == "nodes"


def reach_hint(needed: tuple[str, ...] | list[str], current: str) -> str:
    """What to change so a step that needs one of ``needed`` kinds gets one, the model
    being ``current`` at that point (a sentence starting with a space, or "")."""
    if current in needed:
        return ""
    if "torch" in needed:
        via = get_backend(current).reached_by if current in _HANDLERS else None
        where = f"the {via} step" if via else "the step that converts the model from torch"
        return f" Move this step before {where}."
    steps = [get_backend(k).reached_by for k in needed if k in _HANDLERS]
    steps = list(dict.fromkeys(s for s in steps if s))
    if steps:
        first = " or ".join(steps)
        article = "an" if first[0] in "aeiou" else "a"
        return f" Add {article} {first} step before it."
    return ""
