"""What the timing harness calls for a torch model: the module on inputs moved and cast
once, outside the timed calls."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from accel.errors import AccelError
from accel.models.calls import bind_inputs
from accel.models.feed import as_positional, move_inputs
from accel.models.runtime import TimingTarget


def module_size_bytes(module: Any) -> int:
    seen: set[int] = set()
    total = 0
    tensors = list(module.parameters()) + list(module.buffers())
    for t in tensors:
        try:
            key = t.untyped_storage().data_ptr()
        except Exception:  # tensor subclasses (quantized weights) may not expose storage
            key = id(t)
        if key in seen and key != 0:
            continue  # tied weights are stored once
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def model_target(model: Any, inputs: Any, device: str) -> TimingTarget:
    """The target of a torch-kind LoadedModel (or anything with kind/module/input_casts)."""
    module = model.module
    if module is None:
        raise AccelError(f"{model.source}: a torch-kind model without a module")
    casts = getattr(model, "input_casts", None)
    prepare = getattr(model, "prepare_inputs", None)
    if callable(prepare) and isinstance(inputs, Mapping):
        inputs, casts = prepare(inputs), None
    moved = move_inputs(inputs, device, casts)
    # Bound to the forward's signature: *args nested, keyword-only inputs by name.
    args, kwargs = (
        bind_inputs(module, moved) if isinstance(moved, Mapping) else (as_positional(moved), {})
    )
    size = getattr(model, "size_bytes", None) or module_size_bytes(module)
    return TimingTarget(
        lambda: module(*args, **kwargs),
        lambda: module(*args, **kwargs),
        "torch",
        size,
        uses_torch=True,
    )


def module_target(obj: Any, inputs: Any, device: str) -> TimingTarget | None:
    """The target of a bare ``nn.Module`` (None for anything else; torch is not imported
    for the question)."""
    import logging

    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.nn.Module):
        return None
    if obj.training:
        logging.getLogger("accel.timing").warning(
            "benchmarking a module in training mode; call .eval() first for inference numbers"
        )
    args = as_positional(move_inputs(inputs, device))
    return TimingTarget(
        lambda: obj(*args), lambda: obj(*args), "torch", module_size_bytes(obj), uses_torch=True
    )
