"""Pooling layers that torch computes and OpenVINO refuses, swapped for exact equivalents while
a torch module is converted (nothing here imports OpenVINO)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def oversized_avg_pools(module: Any, inputs: dict[str, Any]) -> list[tuple[Any, str, Any]]:
    """(parent, attribute, pool) of each nn.AvgPool2d whose kernel covers the whole feature map
    it gets on ``inputs``, without padding, in ceil mode. Hugging Face EfficientNet pools so
    (kernel = hidden_dim, 1280, on a 7x7 map): torch averages the whole map, OpenVINO's
    shape check rejects it at the first inference ('Kernel after dilation has size (dim: 1280)
    larger than the data shape after padding')."""
    import torch

    from accel.models.calls import call_module

    seen: dict[int, tuple[int, int]] = {}
    pools = [
        m
        for m in module.modules()
        if type(m) is torch.nn.AvgPool2d and m.ceil_mode and m.divisor_override is None
    ]
    if not pools:
        return []

    def hook(m: Any, args: tuple[Any, ...], out: Any) -> None:
        seen[id(m)] = tuple(args[0].shape[-2:])

    handles = [p.register_forward_hook(hook) for p in pools]
    try:
        with torch.no_grad():
            call_module(module, inputs)
    finally:
        for h in handles:
            h.remove()
    found = []
    for parent in module.modules():
        for name, child in parent.named_children():
            if id(child) not in seen:
                continue
            kernel = torch.nn.modules.utils._pair(child.kernel_size)
            padding = torch.nn.modules.utils._pair(child.padding)
            h, w = seen[id(child)]
            if padding == (0, 0) and kernel[0] >= h and kernel[1] >= w:
                found.append((parent, name, child))
    return found


@contextmanager
def global_pools_for(module: Any, inputs: dict[str, Any]) -> Iterator[list[str]]:
    """While inside: ``oversized_avg_pools`` replaced by AdaptiveAvgPool2d(1) (the same mean
    over the whole map); the original layers are put back on exit. Yields the swapped
    layers' class and kernel, for the step's details. Only for inputs of fixed spatial size:
    on a larger map the kernel would no longer cover it."""
    import torch

    swapped = oversized_avg_pools(module, inputs)
    try:
        for parent, name, _ in swapped:
            setattr(parent, name, torch.nn.AdaptiveAvgPool2d(1))
        yield [f"{name} (AvgPool2d, kernel {pool.kernel_size})" for _, name, pool in swapped]
    finally:
        for parent, name, pool in swapped:
            setattr(parent, name, pool)
