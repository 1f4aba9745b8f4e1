"""The torch runtime: nn.Module, TorchScript and torch.export programs run eagerly.

Its modules: ``runtime`` (the registered ``TorchRuntime``), ``loading`` (stats, device and
the load-time test run), ``timing`` (what the timing harness calls), ``profile`` and
``hooks`` (per-module times), ``graph`` (the graph from torch.export / FX), ``layers``
(per-layer taps for parity) and ``serving`` (TorchScript in Triton's libtorch backend).
"""

from accel.runtimes.torch.runtime import TorchRuntime

__all__ = ["TorchRuntime"]
