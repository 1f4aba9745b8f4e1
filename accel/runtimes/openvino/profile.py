"""Per-op times of an OpenVINO model from its performance counters (PERF_COUNT),
alternating with plain runs of the same compiled model without counters."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from accel.runtimes.openvino.ir import to_numpy_feed


@dataclass
class _CounterRuns:
    """Timed runs of the plain and the counting request, and the counters of each run."""

    plain: list[float] = field(default_factory=list)  # ms per plain infer
    walls: list[float] = field(default_factory=list)  # ms per infer with counters
    per_run: list[dict[str, float]] = field(default_factory=list)  # op -> ms, per run
    meta: dict[str, tuple[str, str]] = field(default_factory=dict)  # op -> (type, kernel)
    order: dict[str, int] = field(default_factory=dict)  # op -> first-seen position


def _counter_runs(
    plain_c: Any,
    prof_c: Any,
    fed: Mapping[str, Any],
    warmup: int,
    n: int,
    progress: Callable[[float, str], None] | None,
    cancel: Callable[[], bool] | None,
    reset_state: bool = False,
) -> _CounterRuns:
    """Warm up both compiled models, then ``n`` alternating runs: plain, then with counters
    (the executed ops' real times). ``reset_state``: a stateful model starts every run from
    an empty state (untimed), as its forward does."""
    from accel.errors import Cancelled

    plain_r, prof_r = plain_c.create_infer_request(), prof_c.create_infer_request()
    plain_f, prof_f = to_numpy_feed(plain_c, fed), to_numpy_feed(prof_c, fed)

    def reset() -> None:
        if reset_state:
            plain_r.reset_state()
            prof_r.reset_state()

    for _ in range(max(1, warmup)):
        reset()
        plain_r.infer(plain_f)
        prof_r.infer(prof_f)
    out = _CounterRuns()
    for i in range(n):
        if cancel is not None and cancel():
            raise Cancelled("profile cancelled")
        reset()
        t0 = time.perf_counter()
        plain_r.infer(plain_f)
        out.plain.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        prof_r.infer(prof_f)
        out.walls.append((time.perf_counter() - t0) * 1e3)
        run: dict[str, float] = {}
        for info in prof_r.get_profiling_info():
            if info.status != info.Status.EXECUTED:
                continue
            ms = info.real_time.total_seconds() * 1e3
            run[info.node_name] = run.get(info.node_name, 0.0) + ms
            out.meta.setdefault(info.node_name, (info.node_type, info.exec_type))
            out.order.setdefault(info.node_name, len(out.order))
        out.per_run.append(run)
        if progress is not None:
            progress((i + 1) / n, f"profiled {i + 1}/{n}")
    return out


def _counter_rows(runs: _CounterRuns) -> tuple[list[Any], float]:
    """One row per executed op (median over the runs) under a root row whose self time is
    the infer call's overhead; shares of the whole. Returns the rows and the ops' sum."""
    from accel.profile.results import LayerProfile

    rows: list[LayerProfile] = []
    for name in sorted(runs.meta, key=runs.order.__getitem__):
        ms = median([r.get(name, 0.0) for r in runs.per_run])
        rows.append(
            LayerProfile(
                name=name,
                type=runs.meta[name][0],
                depth=1,
                parent="",
                inclusive_ms=ms,
                self_ms=ms,
                calls=1,
            )
        )
    node_sum = sum(r.self_ms for r in rows)
    root = LayerProfile(
        name="",
        type="Model",
        depth=0,
        parent=None,
        inclusive_ms=median(runs.walls),
        self_ms=max(0.0, median(runs.walls) - node_sum),  # infer call overhead
        calls=1,
    )
    rows.insert(0, root)
    sum_self = sum(r.self_ms for r in rows)
    for r in rows:
        r.share = r.self_ms / sum_self if sum_self > 0 else 0.0
        r.inclusive_share = r.inclusive_ms / sum_self if sum_self > 0 else 0.0
    return rows, node_sum


def _op_rows_by_type(rows: list[Any], node_sum: float) -> list[Any]:
    """The op rows summed per op type, largest first."""
    from accel.profile.results import OpRow

    by_op: dict[str, OpRow] = {}
    for r in rows[1:]:
        o = by_op.setdefault(r.type, OpRow(name=r.type))
        o.calls += 1
        o.cpu_ms += r.self_ms
        o.self_cpu_ms += r.self_ms
    op_rows = sorted(by_op.values(), key=lambda o: o.self_cpu_ms, reverse=True)
    for o in op_rows:
        o.share = o.self_cpu_ms / node_sum if node_sum > 0 else 0.0
    return op_rows


def profile_compiled(
    plain_c: Any,
    prof_c: Any,
    fed: Mapping[str, Any],
    kind: str,
    request: Any,
    reset_state: bool = False,
) -> Any:
    """The ModelProfile of a compiled model (``plain_c``) and its counting twin
    (``prof_c``, compiled with PERF_COUNT) on the prepared inputs ``fed`` (``reset_state``:
    a stateful model, run from an empty state each time)."""
    import openvino as ov

    from accel.profile.results import ModelProfile

    n = max(1, request.iters)
    runs = _counter_runs(
        plain_c, prof_c, fed, request.warmup, n, request.progress, request.cancel, reset_state
    )
    plain, walls, per_run = runs.plain, runs.walls, runs.per_run
    rows, node_sum = _counter_rows(runs)
    plain_ms = median(plain)
    hint = prof_c.get_property("INFERENCE_PRECISION_HINT")
    precision = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
    kernels = sorted({m[1] for m in runs.meta.values()})[:8]
    return ModelProfile(
        kind=kind,
        device=request.device,
        rows=rows,
        ops=_op_rows_by_type(rows, node_sum) if request.ops else [],
        total_ms=median([sum(r.values()) for r in per_run]) if per_run else 0.0,
        plain_forward_ms=plain_ms,
        hooked_forward_ms=median(walls),
        overhead_ratio=median([w / p for w, p in zip(walls, plain) if p > 0]),
        coverage=node_sum / plain_ms if plain_ms > 0 else 0.0,
        iters=n,
        warmup=request.warmup,
        op_iters=n,
        timing="openvino_perf_counters",
        threads=request.threads,
        notes=[
            f"OpenVINO performance counters; inference precision {precision}; "
            f"rows are the compiled (fused) ops; kernels: {', '.join(kernels)}"
        ],
        versions={"openvino": ov.__version__},
        plain_samples_ms=plain,
        hooked_samples_ms=walls,
        total_samples_ms=[sum(r.values()) for r in per_run],
    )
