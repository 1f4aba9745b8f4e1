"""Per-layer generation profile of a torch decoder.

Forward hooks time every module during the prefill and during each decode step, with the
same call trees as the forward profile (``accel.runtimes.torch.hooks``: the measured cost of
the hooks is removed from each parent on CPU, CUDA events on a GPU). Hooked generations
alternate with plain ones (no hooks), which give the TTFT and TPOT the rows are compared
with; a round's decode rows are the means over its steps, and the rounds' rows are means
over the middle half of the rounds (by their total), as the forward profile keeps them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import nn

from accel.errors import Cancelled
from accel.models.runtime import GenerationWork
from accel.profile.generation import GenerationLayers, LayerSplit, layer_group, plain_round
from accel.profile.results import median, middle_half
from accel.runtimes.torch.hooks import (
    Agg,
    CallTree,
    CudaEventPool,
    aggregate,
    estimate_hook_cost_ns,
    install_hooks,
    module_paths,
    perf_ns,
)

ClockNs = Callable[[], int]


@dataclass
class _Phase:
    """Mean per-module inclusive / self ms of one phase (a prefill, or one decode step)."""

    inclusive: dict[str, float] = field(default_factory=dict)
    self: dict[str, float] = field(default_factory=dict)
    calls: dict[str, float] = field(default_factory=dict)
    top: float = 0.0

    def add(self, agg: Agg | _Phase, weight: float = 1.0) -> None:
        for src, dst in ((agg.inclusive, self.inclusive), (agg.self, self.self)):
            for k, v in src.items():
                dst[k] = dst.get(k, 0.0) + weight * v
        for k, v in agg.calls.items():
            self.calls[k] = self.calls.get(k, 0.0) + weight * v
        self.top += weight * agg.top


def _mean(phases: list[_Phase]) -> _Phase:
    """The mean of the middle half of ``phases`` (by total): parts still add up."""
    keep = [phases[i] for i in middle_half([p.top for p in phases])]
    out = _Phase()
    for p in keep:
        out.add(p)
    scale = 1.0 / len(keep) if keep else 0.0
    for d in (out.inclusive, out.self, out.calls):
        for k in d:
            d[k] *= scale
    out.top *= scale
    return out


class _Timer:
    """Hooked call trees read by the CPU clock (cost-compensated) or CUDA events."""

    def __init__(self, cuda: bool, clock_ns: ClockNs, hook_cost_ns: float) -> None:
        self.pool = CudaEventPool() if cuda else None
        self.tree = CallTree(self.pool.record if self.pool else clock_ns)
        self.cost_ms = hook_cost_ns / 1e6

    def reset(self) -> None:
        self.tree.reset()
        if self.pool:
            self.pool.reset()

    def read(self) -> Agg:
        calls = self.tree.calls
        if self.pool:  # the work synchronised after its token: the events are done
            return aggregate(calls, [c[1].elapsed_time(c[2]) for c in calls])
        return aggregate(calls, [(c[2] - c[1]) / 1e6 for c in calls], self.cost_ms)


def _hooked_round(work: GenerationWork, timer: _Timer) -> tuple[_Phase, _Phase]:
    """One generation with the hooks installed: the prefill's rows and the decode's rows
    (the mean over its steps)."""
    timer.reset()
    token = work.prefill()
    prefill = _Phase()
    prefill.add(timer.read())
    decode = _Phase()
    steps = work.new_tokens - 1
    for _ in range(steps):
        timer.reset()
        token = work.step(token)
        decode.add(timer.read(), 1.0 / steps)
    return prefill, decode


def _type_name(mod: nn.Module) -> str:
    return getattr(mod, "original_name", None) or type(mod).__name__


def _rows(module: nn.Module, prefill: _Phase, decode: _Phase) -> list[LayerSplit]:
    paths = module_paths(module)
    types = {p: _type_name(m) for m, p in paths.items()}
    return [
        LayerSplit(
            name=path,
            type=types[path],
            group=layer_group(path, types),
            prefill_ms=prefill.self.get(path, 0.0),
            decode_ms=decode.self.get(path, 0.0),
            prefill_inclusive_ms=prefill.inclusive.get(path, 0.0),
            decode_inclusive_ms=decode.inclusive.get(path, 0.0),
            calls=round(decode.calls.get(path, 0.0)),
        )
        for path in paths.values()
    ]


def profile_generation_torch(
    module: nn.Module,
    work: GenerationWork,
    *,
    device: str = "cpu",
    rounds: int = 3,
    warmup: int = 1,
    clock_ns: ClockNs = perf_ns,
    hook_cost_ns: float | None = None,
    progress: Callable[[float, str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> GenerationLayers:
    """Rows per module of ``module`` while ``work`` generates, and the plain TTFT / TPOT
    (``prompt_tokens`` and the KV fields are the caller's to fill)."""
    cuda = device.startswith("cuda")
    if hook_cost_ns is None:
        hook_cost_ns = 0.0 if cuda else estimate_hook_cost_ns()
    timer = _Timer(cuda, clock_ns, hook_cost_ns)
    rounds, warmup = max(1, rounds), max(1, warmup)  # the first hooked round pays one-offs
    plain: list[tuple[float, float | None]] = []
    hooked: list[tuple[_Phase, _Phase]] = []
    notes: list[str] = []
    for i in range(warmup + rounds):
        if cancel is not None and cancel():
            raise Cancelled("profiling cancelled")
        p = plain_round(work, clock_ns)
        with install_hooks(module, timer.tree.pre, timer.tree.post, notes if i == 0 else None):
            h = _hooked_round(work, timer)
        if i >= warmup:
            plain.append(p)
            hooked.append(h)
        if progress is not None:
            progress((i + 1) / (warmup + rounds), "per-layer generation profile")
    prefill, decode = _mean([h[0] for h in hooked]), _mean([h[1] for h in hooked])
    tpots = [t for _, t in plain if t is not None]
    if not cuda:
        notes.append(f"hook cost of {hook_cost_ns / 1e3:.2f} us per module call removed")
    return GenerationLayers(
        prompt_tokens=0,
        new_tokens=work.new_tokens,
        ttft_ms=median([t for t, _ in plain]),
        tpot_ms=median(tpots) if tpots else None,
        hooked_ttft_ms=prefill.top,
        hooked_tpot_ms=decode.top if tpots else None,
        rounds=rounds,
        rows=_rows(module, prefill, decode),
        notes=notes,
    )
