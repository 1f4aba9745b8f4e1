"""Shape helpers shared by the export passes and the runner: the values of an input spec's
symbolic dims in a batch of inputs, other values inside their ranges, and the dynamic-shape
description torch.export takes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel.models.inputs import InputSpec


def current_dims(spec: InputSpec, inputs: dict[str, Any]) -> dict[str, int]:
    """Values of the spec's symbolic dims in ``inputs`` (read from the tensors' shapes)."""
    dims: dict[str, int] = {}
    for t in spec.inputs:
        x = inputs.get(t.name)
        if x is None:
            continue
        for axis, d in enumerate(t.shape):
            if isinstance(d, str) and axis < x.dim():
                dims.setdefault(d, int(x.shape[axis]))
    return dims


def other_dims(spec: InputSpec, dims: dict[str, int]) -> dict[str, int]:
    """Each symbolic dim moved to another value inside its range (when it has one)."""
    out = {}
    for name, value in dims.items():
        d = spec.dims[name]
        out[name] = (
            value + 1 if value + 1 <= d.max else (value - 1 if value - 1 >= d.min else value)
        )
    return out


def ranged_dims(spec: InputSpec, static: Iterable[str] = ()) -> dict[str, tuple[int, int]]:
    """name -> (min, max) of the spec's dims that have a range, except those in ``static``."""
    fixed = set(static)
    return {n: (d.min, d.max) for n, d in spec.dims.items() if n not in fixed and d.max > d.min}


def dynamic_shapes_spec(spec: InputSpec, dims: dict[str, tuple[int, int]]) -> list[dict[int, str]]:
    """Per positional input: axis -> dim name, for the dims in ``dims``."""
    return [
        {axis: d for axis, d in enumerate(t.shape) if isinstance(d, str) and d in dims}
        for t in spec.inputs
    ]


def example_for_export(
    spec: InputSpec, inputs: dict[str, Any], dims: dict[str, tuple[int, int]], seed: int
) -> dict[str, Any]:
    """The run's inputs, unless a dynamic dim is 0 or 1 there: torch.export specializes those
    sizes, so export on a sample where they are 2 (the program still accepts 1)."""
    now = current_dims(spec, inputs)
    if all(now.get(n, 2) >= 2 for n in dims):
        return dict(inputs)
    wanted = {n: (max(2, v) if n in dims and dims[n][1] >= 2 else v) for n, v in now.items()}
    return spec.sample(seed=seed, dims=wanted)


def dim_identifier(name: str) -> str:
    """A dim name as a Python identifier (torch.export.Dim needs one)."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def export_dim_objects(spec: InputSpec, dims: dict[str, tuple[int, int]]) -> tuple[Any, ...]:
    """torch.export's ``dynamic_shapes`` for ``dims``: per input, axis -> torch.export.Dim."""
    import torch

    objs = {n: torch.export.Dim(dim_identifier(n), min=lo, max=hi) for n, (lo, hi) in dims.items()}
    return tuple({axis: objs[d] for axis, d in m.items()} for m in dynamic_shapes_spec(spec, dims))
