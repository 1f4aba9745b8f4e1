"""Interval math: the median of paired per-round ratios and of latencies, each with a
seeded percentile bootstrap interval (reproducible)."""

from __future__ import annotations

from collections.abc import Sequence

from accel.timing.result import CONFIDENCE, Interval
from accel.timing.settings import MeasureError

BOOTSTRAP_RESAMPLES = 2000

__all__ = ["Interval", "covering", "median_interval", "percentile", "ratio_interval"]


def ratio_interval(
    reference: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Median of the per-round ratios ``reference[i] / candidate[i]`` with a percentile
    bootstrap interval (rounds resampled with replacement; seeded, so reproducible).

    Each entry is one round's time of one model; pairing them by round is what cancels a
    load that changes between rounds."""
    import numpy as np

    if len(reference) != len(candidate):
        raise MeasureError(
            f"{len(reference)} reference rounds but {len(candidate)} candidate rounds"
        )
    if not reference:
        raise MeasureError("no timing rounds: benchmark.rounds must be >= 1")
    ref = np.asarray(reference, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    for name, arr in (("reference", ref), ("candidate", cand)):
        if not np.all(np.isfinite(arr)):
            raise MeasureError(f"the {name} timings contain NaN or infinity")
        if np.any(arr <= 0):
            raise MeasureError(
                f"the {name} model timed at 0 s (below the timer's resolution); "
                "raise benchmark.iters or benchmark.min_time_s"
            )
    ratios = ref / cand
    value = float(np.median(ratios))
    if len(ratios) == 1:
        return Interval(value, value, value, confidence)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ratios), size=(resamples, len(ratios)))
    medians = np.median(ratios[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return Interval(value, min(float(low), value), max(float(high), value), confidence)


def median_interval(
    values: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Median of ``values`` with a percentile bootstrap interval (e.g. a latency's rounds)."""
    import numpy as np

    if not values:
        raise MeasureError("no values to summarise")
    v = np.asarray(values, dtype=float)
    value = float(np.median(v))
    if len(v) == 1:
        return Interval(value, value, value, confidence)
    rng = np.random.default_rng(seed)
    medians = np.median(v[rng.integers(0, len(v), size=(resamples, len(v)))], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return Interval(value, min(float(low), value), max(float(high), value), confidence)


def covering(interval: Interval, *points: float) -> Interval:
    """``interval`` widened to contain ``points`` (same value and confidence).

    A comparison reports the median of its per-round ratios; the table beside it shows the
    two medians of the samples. Their ratio is a second estimate of the same speedup: when
    it falls outside the bootstrap interval the two estimators disagree by more than the
    rounds' spread, and the interval says so by covering it."""
    low = min([interval.low, *points])
    high = max([interval.high, *points])
    return Interval(interval.value, low, high, interval.confidence)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of sorted values."""
    import math

    n = len(sorted_values)
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)
