"""The store's boundary for timing: a StepTiming <-> the flat metric rows and JSON it keeps.

The only place where a timing travels as string keys. A step's StepTiming is stored twice:
its JSON form in the step's details (``details["timing"]``, read back exactly), and flat
numbers in its metric rows (what Compare puts side by side and what queries filter on).
Runs recorded before the typed result had only the flat keys (the step's latency, the
speedup and its interval, the reference's p50 from the same rounds) and an untyped details
dict; ``step_timing`` rebuilds a StepTiming from those, so old runs stay readable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel.timing.result import APART, BASELINE, INTERLEAVED, Latency, StepTiming

# Metric row names (unchanged since the first stored runs).
P50 = "latency_p50_ms"  # the row's own latency: the step's, or the original's on its row
P90, P99 = "latency_p90_ms", "latency_p99_ms"
MEAN, STD = "latency_mean_ms", "latency_std_ms"
LOW, HIGH = "latency_low_ms", "latency_high_ms"
FIRST_CALL = "first_call_ms"
SPEEDUP, SPEEDUP_LOW, SPEEDUP_HIGH = "speedup", "speedup_low", "speedup_high"
REF_P50 = "baseline_latency_p50_ms"  # the reference's p50 from the step's own rounds
REF_LOW, REF_HIGH = "baseline_latency_low_ms", "baseline_latency_high_ms"
ROUNDS, NOISY = "timing_rounds", "noisy"
TIMING_KEYS = frozenset(
    (P50, P90, P99, MEAN, STD, LOW, HIGH, FIRST_CALL, SPEEDUP, SPEEDUP_LOW, SPEEDUP_HIGH)
    + (REF_P50, REF_LOW, REF_HIGH, ROUNDS, NOISY)
)

# Labels for the metric rows where a panel lists them by name.
LABELS = {P50: "p50 ms", SPEEDUP: "speedup", REF_P50: "original p50 ms"}


def to_metrics(t: StepTiming | None) -> dict[str, float | None]:
    """The flat metric rows of a row's timing (nothing for None)."""
    if t is None:
        return {}
    own = t.reference if t.mode == BASELINE else t.step
    m: dict[str, float | None] = {}
    if own is not None:
        m.update(
            {
                P50: own.p50_ms,
                P90: own.p90_ms,
                P99: own.p99_ms,
                MEAN: own.mean_ms,
                STD: own.std_ms,
                LOW: own.low_ms,
                HIGH: own.high_ms,
                FIRST_CALL: own.first_call_ms,
            }
        )
    if t.step is not None and t.reference is not None:
        r = t.reference
        m.update({REF_P50: r.p50_ms, REF_LOW: r.low_ms, REF_HIGH: r.high_ms})
    if t.speedup is not None:
        m.update({SPEEDUP: t.speedup, SPEEDUP_LOW: t.speedup_low, SPEEDUP_HIGH: t.speedup_high})
    m[ROUNDS] = float(t.rounds)
    m[NOISY] = 1.0 if t.noisy else 0.0
    return m


def without_timing(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A step's metric rows other than its timing's (size, accuracy, the pass's own)."""
    return {k: v for k, v in metrics.items() if k not in TIMING_KEYS}


def step_timing(
    metrics: Mapping[str, Any], details: Mapping[str, Any] | None, *, baseline: bool = False
) -> StepTiming | None:
    """A stored row's StepTiming: the JSON in its details, else rebuilt from the flat keys
    of an older run (None when the row was never timed)."""
    stored = (details or {}).get("timing")
    if StepTiming.looks_like(stored):
        return StepTiming.from_json(stored)
    old = stored if isinstance(stored, Mapping) else {}
    own = _latency(metrics, P50, LOW, HIGH)
    if baseline:
        if own is None:
            return None
        return StepTiming(mode=BASELINE, reference=own, rounds=_int(metrics.get(ROUNDS)))
    if own is None and metrics.get(SPEEDUP) is None:
        return None  # never timed
    return StepTiming(
        mode=APART if old.get("mode") == "sequential" else INTERLEAVED,
        reference=_latency(metrics, REF_P50, REF_LOW, REF_HIGH),
        step=own,
        speedup=_float(metrics.get(SPEEDUP)),
        speedup_low=_float(metrics.get(SPEEDUP_LOW)),
        speedup_high=_float(metrics.get(SPEEDUP_HIGH)),
        rounds=_int(metrics.get(ROUNDS)),
        threads=_int(old.get("threads")) or None,
        placement=old.get("placement"),
        noisy=bool(metrics.get(NOISY)),
        noise_reason=old.get("noise_reason"),
        note=old.get("note"),
    )


def final_timing(summary: Mapping[str, Any] | None) -> StepTiming | None:
    """The last measured step's timing from a run's summary (accel.runner.run_summary).

    Older summaries had the speedup and the step's p50; their "baseline" p50 was the
    original's row, timed apart by another timer, so it is not shown as the reference of
    the step's comparison (that is the contradiction the typed result removed)."""
    s = summary or {}
    if StepTiming.looks_like(s.get("final_timing")):
        return StepTiming.from_json(s["final_timing"])
    if s.get("final_speedup") is None:
        return None
    step = _float(s.get("final_latency_p50_ms"))
    return StepTiming(
        mode=INTERLEAVED,
        reference=None,
        step=Latency(step) if step is not None else None,
        speedup=_float(s.get("final_speedup")),
        speedup_low=_float(s.get("final_speedup_low")),
        speedup_high=_float(s.get("final_speedup_high")),
        noisy=bool(s.get("noise")),
        noise_reason=s.get("noise"),
    )


def _latency(m: Mapping[str, Any], p50: str, low: str, high: str) -> Latency | None:
    value = _float(m.get(p50))
    if value is None:
        return None
    same = p50 == P50
    return Latency(
        value,
        _float(m.get(low)),
        _float(m.get(high)),
        p90_ms=_float(m.get(P90)) if same else None,
        p99_ms=_float(m.get(P99)) if same else None,
        mean_ms=_float(m.get(MEAN)) if same else None,
        std_ms=_float(m.get(STD)) if same else None,
        first_call_ms=_float(m.get(FIRST_CALL)) if same else None,
    )


def _float(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _int(v: Any) -> int:
    f = _float(v)
    return int(f) if f is not None and f == f else 0
