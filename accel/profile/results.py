"""Profile results: plain dataclasses that round-trip through JSON.

They cross process boundaries (worker -> parent) and are stored in the
database, so every field is a str, int, float, bool, None, list or dict.
Rows are keyed by module path (torch, ``""`` for the root module) or node name
(ONNX), which is what the graph view uses to paint them on graph nodes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from accel.jsonable import jsonable
from accel.profile.generation import GenerationLayers


def _json_safe(obj: Any) -> Any:
    """NaN / infinity -> None: strict JSON (and the database) cannot hold them."""
    return jsonable(obj, nonfinite="null")


def _from_dict(cls, d: dict[str, Any]):
    """Build ``cls`` from ``d``, ignoring keys it does not know (newer writers)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


UNATTRIBUTED = "(unattributed)"  # the row that makes the layer table add up to the headline


@dataclass
class LayerProfile:
    """One module (torch) or one graph node (ONNX), per forward pass.

    Times are medians over the measured iterations, in milliseconds, for all
    calls of the layer in one forward pass. ``flops`` and ``bytes_moved`` are
    per forward pass too (summed over calls) and inclusive of children.
    """

    name: str  # module path ("" = root) or ONNX node name
    type: str  # module class name or ONNX op type
    depth: int = 0
    parent: str | None = None  # module path of the parent; None for the root
    inclusive_ms: float = 0.0
    self_ms: float = 0.0
    share: float = 0.0  # self_ms / the headline (total_ms): shares add up to 1
    inclusive_share: float = 0.0  # inclusive_ms / the headline
    calls: int = 0  # calls per forward pass
    flops: int | None = None  # inclusive FLOPs per forward pass (None: unknown)
    self_flops: int | None = None
    params: int = 0  # parameters of the module, children included
    param_bytes: int = 0
    input_bytes: int = 0  # bytes of tensor inputs, per forward pass
    output_bytes: int = 0  # bytes of tensor outputs (activations), per forward pass
    peak_mem_bytes: int | None = None  # CUDA only: peak allocated inside the layer over entry
    flops_per_s: float | None = None  # achieved: flops / inclusive time
    intensity: float | None = None  # flops / (param + input + output bytes)

    @property
    def bytes_moved(self) -> int:
        return self.param_bytes + self.input_bytes + self.output_bytes

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LayerProfile:
        return _from_dict(cls, d)


@dataclass
class OpRow:
    """One operator (aggregated by name, input shapes and enclosing module).

    Times are per forward pass (totals over the profiled iterations divided by
    their number), in milliseconds. ``module`` is the innermost module scope the
    op ran in (``""`` = the root module's own code, None = outside any module).
    For ONNX, rows aggregate by op type and ``module`` is None. For torch, a module's op
    times are fitted to add up to its self time in the layer table (the profiler's own
    bookkeeping inflates each op; ``raw_self_ms`` keeps its number), and the module's own
    Python between ops is the row ``(module code)``.
    """

    name: str
    module: str | None = None
    calls: int = 0
    cpu_ms: float = 0.0  # inclusive CPU time
    self_cpu_ms: float = 0.0
    device_ms: float = 0.0  # inclusive CUDA time (0 on CPU)
    self_device_ms: float = 0.0
    input_shapes: str = ""
    share: float = 0.0  # self time (device on CUDA, CPU otherwise) / total
    # torch: the profiler's own self time before it was fitted to the module's self time
    # (None: not fitted; see torch_profile._fit_ops_to_layers).
    raw_self_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpRow:
        return _from_dict(cls, d)


@dataclass
class ModelProfile:
    """Per-layer and per-operator profile of one model on one device.

    ``total_ms`` is the headline: the median latency of the plain forward (no hook),
    the same as ``plain_forward_ms``. Rows' times are means over the profiled
    iterations whose total lies in the middle half (so parts add up to a whole,
    which medians of parts do not on a busy machine), and the explicit
    ``(unattributed)`` row (``UNATTRIBUTED``) holds the rest: the rows' self times
    add up to ``total_ms`` exactly, and shares are fractions of it. A negative
    unattributed time means the hooked rows came out slower than the plain forward. Plain and profiled forwards alternate, and
    the ratios are medians of per-pair ratios: ``overhead_ratio`` = hooked wall
    time / plain time (1.0 = no overhead); ``coverage`` = summed self times of
    the rows / plain time (1.0 = the rows explain exactly the plain forward).
    """

    kind: str  # "torch" | "onnx"
    device: str
    rows: list[LayerProfile] = field(default_factory=list)
    ops: list[OpRow] = field(default_factory=list)
    total_ms: float = 0.0
    plain_forward_ms: float = 0.0
    hooked_forward_ms: float = 0.0
    overhead_ratio: float = 1.0
    coverage: float = 1.0
    hook_cost_us: float = 0.0  # estimated cost of one hooked module call (CPU)
    total_flops: int | None = None
    iters: int = 0
    warmup: int = 0
    op_iters: int = 0
    timing: str = ""  # "perf_counter" | "cuda_events" | "onnxruntime"
    trace_path: str | None = None
    source: str | None = None
    threads: int | None = None
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    # Per-iteration samples (ms), in measurement order: plain forward, hooked forward wall
    # time, and the profiled total (sum of the rows' self times in that iteration).
    plain_samples_ms: list[float] = field(default_factory=list)
    hooked_samples_ms: list[float] = field(default_factory=list)
    total_samples_ms: list[float] = field(default_factory=list)
    # A decoder profiled generating: per-layer prefill / decode split and the KV cache's
    # growth (accel.profile.generation.GenerationLayers); None for a forward-only profile.
    generation: GenerationLayers | None = None

    @property
    def unattributed_ms(self) -> float:
        return next((r.self_ms for r in self.rows if r.name == UNATTRIBUTED), 0.0)

    def row(self, name: str) -> LayerProfile:
        """The row of module path / node ``name``."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def by_name(self) -> dict[str, LayerProfile]:
        return {r.name: r for r in self.rows}

    def top(self, n: int = 10, *, key: str = "self_ms") -> list[LayerProfile]:
        """The ``n`` rows with the largest ``key`` (default: self time)."""
        return sorted(self.rows, key=lambda r: getattr(r, key) or 0, reverse=True)[:n]

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelProfile:
        d = dict(d)
        d["rows"] = [LayerProfile.from_dict(r) for r in d.get("rows", [])]
        d["ops"] = [OpRow.from_dict(o) for o in d.get("ops", [])]
        gen = d.get("generation")
        d["generation"] = GenerationLayers.from_dict(gen) if gen else None
        return _from_dict(cls, d)


def add_unattributed(rows: list[LayerProfile], headline_ms: float) -> None:
    """Append the ``(unattributed)`` row (headline minus the rows' self times) and set every
    row's shares as fractions of the headline, so the table adds up to the headline."""
    rows[:] = [r for r in rows if r.name != UNATTRIBUTED]
    rest = headline_ms - sum(r.self_ms for r in rows)
    rows.append(
        LayerProfile(
            name=UNATTRIBUTED,
            type="outside the timed layers",
            depth=1,
            parent="",
            inclusive_ms=rest,
            self_ms=rest,
            calls=0,
        )
    )
    for r in rows:
        r.share = r.self_ms / headline_ms if headline_ms > 0 else 0.0
        r.inclusive_share = r.inclusive_ms / headline_ms if headline_ms > 0 else 0.0


# -- statistics the runtimes' profilers share ---------------------------------------------


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return 0.0
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def middle_half(totals: list[float]) -> list[int]:
    """Indices of the iterations whose total lies between its quartiles (all when < 4).

    Averaging the parts over these keeps them additive (a mean of sums is the sum of means)
    while outliers (a preempted iteration) stay out, as a median would keep them."""
    n = len(totals)
    if n < 4:
        return list(range(n))
    order = sorted(range(n), key=lambda i: totals[i])
    lo, hi = n // 4, n - n // 4
    return sorted(order[lo:hi])
