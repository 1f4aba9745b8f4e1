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

The functions are written without annotations and import torch inside: the exported script
carries their source (``script_helpers``), so it converts the same graph as the studio.
"""

from __future__ import annotations

import contextlib
import inspect


def covers_input(pool, height, width):
    """Whether ``pool`` (an AvgPool2d) on an input of this size is the global mean: one
    window, no padding, clipped to the input by ceil mode (or exactly its size)."""

    def pair(v):
        return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v))

    kh, kw = pair(pool.kernel_size)
    sh, sw = pair(pool.stride if pool.stride is not None else pool.kernel_size)
    ph, pw = pair(pool.padding)
    if ph or pw or getattr(pool, "divisor_override", None) is not None:
        return False
    if sh < kh or sw < kw or kh < height or kw < width:
        return False
    return bool(pool.ceil_mode) or (kh == height and kw == width)


def spatial_mean():
    """A module computing the mean over the last two axes (what the swapped pools compute)."""
    import torch

    class GlobalMean(torch.nn.Module):
        def forward(self, x):
            return x.mean(dim=(-2, -1), keepdim=True)

    return GlobalMean()


@contextlib.contextmanager
def exact_global_pools(module, run, fixed_maps=True):
    """Within the block, every AvgPool2d of ``module`` that is a global mean on the inputs
    ``run()`` feeds it (one call, to see the sizes) is a plain mean; yields their names.
    Where the inputs' spatial sizes are not fixed (``fixed_maps`` False) nothing is swapped:
    a window that covers this map may not cover a larger one."""
    import torch

    pools = {n: m for n, m in module.named_modules() if n and isinstance(m, torch.nn.AvgPool2d)}
    if not pools or not fixed_maps:
        yield []
        return
    seen = {}
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
    swapped = []
    try:
        for name in swap:
            parent_name, _, attr = name.rpartition(".")
            parent = module.get_submodule(parent_name) if parent_name else module
            swapped.append((parent, attr, getattr(parent, attr)))
            setattr(parent, attr, spatial_mean())
        yield swap
    finally:
        for parent, attr, original in reversed(swapped):
            setattr(parent, attr, original)


def script_helpers() -> list[str]:
    """The functions above as source, for the exported script's helpers (it imports
    contextlib and torch)."""
    return [inspect.getsource(f) for f in (covers_input, spatial_mean, exact_global_pools)]


# The exported script's test whether the spatial axes of every input are fixed (DYNAMIC_AXES
# names the dynamic ones; axes 0 and 1 are batch and channels).
SCRIPT_FIXED_MAPS = "not any(a >= 2 for axes in DYNAMIC_AXES.values() for a in axes)"
