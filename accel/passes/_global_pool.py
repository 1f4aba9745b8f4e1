"""Global average pooling written as an oversized ``AvgPool2d``, made exact for converters.

Hugging Face's EfficientNet pools with ``nn.AvgPool2d(hidden_dim, ceil_mode=True)``: a
1280x1280 window over a 7x7 (or 2x2) feature map. PyTorch clips the window to the input and
divides by the clipped area, so this is a global mean. The converters do not agree:
OpenVINO's AvgPool shape inference rejects a kernel larger than the padded input ("Kernel
after dilation has size (dim: 1280) larger than the data shape"), which NNCF's statistics
model hits on every calibration batch; ONNX Runtime's static int8 graph
(QLinearAveragePool) gives outputs with cosine 0 to the original's. During a conversion
``exact_global_pools`` swaps every such pool for a plain mean over the spatial axes, the
same numbers in PyTorch; the module is restored afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


def _pair(v: Any) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, list | tuple) else (int(v), int(v))


def covers_input(pool: Any, height: int, width: int) -> bool:
    """Whether ``pool`` (an AvgPool2d) on an input of this size is the global mean: one
    window, no padding, clipped to the input by ceil mode (or exactly its size)."""
    kh, kw = _pair(pool.kernel_size)
    sh, sw = _pair(pool.stride if pool.stride is not None else pool.kernel_size)
    ph, pw = _pair(pool.padding)
    if ph or pw or getattr(pool, "divisor_override", None) is not None:
        return False
    if sh < kh or sw < kw or kh < height or kw < width:
        return False
    return bool(pool.ceil_mode) or (kh == height and kw == width)


class SpatialMean:
    """Stand-in factory for the swapped pools (an nn.Module made on first use)."""

    @staticmethod
    def make() -> Any:
        import torch

        class GlobalMean(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x.mean(dim=(-2, -1), keepdim=True)

        return GlobalMean()


@contextlib.contextmanager
def exact_global_pools(module: Any, run: Callable[[], Any]) -> Iterator[list[str]]:
    """Within the block, every AvgPool2d of ``module`` that is a global mean on the inputs
    ``run()`` feeds it (one call, to see the sizes) is a plain mean; yields their names."""
    import torch

    pools = {n: m for n, m in module.named_modules() if n and isinstance(m, torch.nn.AvgPool2d)}
    if not pools:
        yield []
        return
    seen: dict[str, tuple[int, int]] = {}
    hooks = [
        m.register_forward_pre_hook(
            lambda _m, args, n=n: seen.__setitem__(n, tuple(args[0].shape[-2:]))
        )
        for n, m in pools.items()
    ]
    try:
        with torch.no_grad():
            run()
    finally:
        for h in hooks:
            h.remove()
    swap = [n for n, m in pools.items() if n in seen and covers_input(m, *seen[n])]
    swapped: list[tuple[Any, str, Any]] = []
    try:
        for name in swap:
            parent_name, _, attr = name.rpartition(".")
            parent = module.get_submodule(parent_name) if parent_name else module
            swapped.append((parent, attr, getattr(parent, attr)))
            setattr(parent, attr, SpatialMean.make())
        yield swap
    finally:
        for parent, attr, original in reversed(swapped):
            setattr(parent, attr, original)
