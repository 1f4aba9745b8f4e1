"""Inputs as a call takes them: tensors moved and cast once before a run or a timing, and
a mapping, a sequence or one tensor as positional arguments. Shared by the timing harness
and the runtimes (``accel.runtimes``), which feed models of every kind."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any


def as_positional(inputs: Any) -> tuple[Any, ...]:
    if isinstance(inputs, Mapping):
        return tuple(inputs.values())
    if isinstance(inputs, list | tuple):
        return tuple(inputs)
    return (inputs,)


def move_inputs(inputs: Any, device: str, casts: Mapping[str, str] | None = None) -> Any:
    """Move torch tensors to ``device`` (and apply per-name dtype casts) once, before timing."""
    torch = sys.modules.get("torch")
    if torch is None:
        return inputs

    def fix(name: str | None, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if casts and name in casts and v.is_floating_point():
                v = v.to(getattr(torch, casts[name]))
            if v.device != torch.device(device):
                v = v.to(device)
        return v

    if isinstance(inputs, Mapping):
        return {k: fix(k, v) for k, v in inputs.items()}
    if isinstance(inputs, list | tuple):
        return tuple(fix(None, v) for v in inputs)
    return fix(None, inputs)
