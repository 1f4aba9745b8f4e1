"""Per-module measurement with forward hooks.

Every pass below records one *call tree* per forward: a list of calls, each
with a start and an end value and the index of the enclosing call (the module
that was running when this one started, found from a call stack, so shared or
re-entered modules attribute correctly). ``aggregate`` turns a call tree into
per-module inclusive / self sums and call counts; the timing pass, the FLOPs
pass and the memory pass all use it, only the start/end values differ.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

log = logging.getLogger(__name__)

perf_ns = time.perf_counter_ns

# One call: [module path, start value, end value, parent call index or -1].
Call = list


def module_paths(root: nn.Module) -> dict[nn.Module, str]:
    """Module -> dotted path ("" for ``root``); a module reachable twice keeps its first path."""
    return {m: name for name, m in root.named_modules()}


@contextlib.contextmanager
def install_hooks(
    root: nn.Module,
    pre: Callable[[str], Callable],
    post: Callable[[str], Callable],
    notes: list[str] | None = None,
) -> Iterator[list[str]]:
    """Install ``pre(path)`` / ``post(path)`` hooks on every module of ``root``.

    Yields the paths that were hooked. Modules that refuse hooks (TorchScript)
    are skipped and reported in ``notes``.
    """
    handles = []
    hooked: list[str] = []
    refused: list[str] = []
    try:
        for mod, path in module_paths(root).items():
            try:
                h1 = mod.register_forward_pre_hook(pre(path))
            except (RuntimeError, AttributeError, TypeError):
                refused.append(path)
                continue
            try:
                # always_call: the call stack stays balanced if a forward raises.
                h2 = mod.register_forward_hook(post(path), always_call=True)
            except (RuntimeError, AttributeError, TypeError):
                h1.remove()
                refused.append(path)
                continue
            handles += [h1, h2]
            hooked.append(path)
        if refused and notes is not None:
            notes.append(
                f"{len(refused)} module(s) do not accept forward hooks (TorchScript?) and are "
                f"timed as part of their parent (or as a whole): {', '.join(p or '<root>' for p in refused[:5])}"
            )
        yield hooked
    finally:
        for h in handles:
            h.remove()


@dataclass
class Agg:
    """Per-module sums over one forward."""

    inclusive: dict[str, float] = field(default_factory=dict)
    self: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    top: float = 0.0  # sum of inclusive values of top-level calls


def aggregate(calls: list[Call], values: list[float], per_child_cost: float = 0.0) -> Agg:
    """Sum ``values`` (inclusive value of each call) per module path.

    ``per_child_cost`` is subtracted from a call for every hooked call nested
    inside it (the measured cost of the hooks themselves), so the corrected
    self values add up to the un-hooked total.
    """
    n = len(calls)
    nested = [0] * n  # hooked calls nested (at any depth) inside each call
    for i in range(n - 1, -1, -1):  # children always come after their parent
        p = calls[i][3]
        if p >= 0:
            nested[p] += 1 + nested[i]
    incl = [values[i] - nested[i] * per_child_cost for i in range(n)]
    child_sum = [0.0] * n
    for i in range(n):
        p = calls[i][3]
        if p >= 0:
            child_sum[p] += incl[i]
    agg = Agg()
    for i, c in enumerate(calls):
        name = c[0]
        agg.inclusive[name] = agg.inclusive.get(name, 0.0) + incl[i]
        agg.self[name] = agg.self.get(name, 0.0) + (incl[i] - child_sum[i])
        agg.calls[name] = agg.calls.get(name, 0) + 1
        if c[3] < 0:
            agg.top += incl[i]
    return agg


class CallTree:
    """A call stack fed by pre/post hooks; ``start()``/``end()`` give the values stored."""

    def __init__(self, start: Callable[[], Any], end: Callable[[], Any] | None = None):
        self.calls: list[Call] = []
        self.stack: list[int] = []
        self._start = start
        self._end = end or start

    def reset(self) -> None:
        self.calls = []
        self.stack = []

    def pre(self, path: str) -> Callable:
        start = self._start

        def hook(mod, args):
            st, calls = self.stack, self.calls
            calls.append([path, None, None, st[-1] if st else -1])
            st.append(len(calls) - 1)
            calls[-1][1] = start()  # last: keeps the hook's own work out of the window

        return hook

    def post(self, path: str) -> Callable:
        end = self._end

        def hook(mod, args, out):
            v = end()  # first: keeps the hook's own work out of the window
            if self.stack:
                self.calls[self.stack.pop()][2] = v

        return hook


def tensor_bytes(obj: Any) -> int:
    """Bytes of all tensors in a (nested) structure."""
    total = 0
    for leaf in tree_leaves(obj):
        if isinstance(leaf, torch.Tensor):
            total += leaf.numel() * leaf.element_size()
    return total


class CudaEventPool:
    """Reused timing events, so recording one in a hook does not allocate."""

    def __init__(self) -> None:
        self._events: list[torch.cuda.Event] = []
        self._next = 0

    def reset(self) -> None:
        self._next = 0

    def record(self) -> torch.cuda.Event:
        if self._next == len(self._events):
            self._events.append(torch.cuda.Event(enable_timing=True))
        ev = self._events[self._next]
        self._next += 1
        ev.record()
        return ev


def estimate_hook_cost_ns(n_children: int = 64, iters: int = 30) -> float:
    """Cost (ns) that the timing hooks add to the parent of one hooked module call on CPU.

    Measured as (hooked - plain time of a Sequential of ``n_children`` Identity
    modules, as seen by the root's own timing) / ``n_children``, from the
    fastest of ``iters`` repetitions of each.
    """
    root = nn.Sequential(*[nn.Identity() for _ in range(n_children)])
    x = torch.zeros(1)
    plain: list[int] = []
    for _ in range(iters + 5):
        t0 = perf_ns()
        root(x)
        plain.append(perf_ns() - t0)
    tree = CallTree(perf_ns)
    hooked: list[int] = []
    with install_hooks(root, tree.pre, tree.post):
        for _ in range(iters + 5):
            tree.reset()
            root(x)
            top = tree.calls[0]
            hooked.append(top[2] - top[1])
    # Minima: the cost is fixed CPU work, and the fastest run is the one nothing preempted.
    return max(0.0, (min(hooked[5:]) - min(plain[5:])) / n_children)
