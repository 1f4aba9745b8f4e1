"""The typed result of a measurement: what one comparison found, as one frozen record.

A :class:`StepTiming` is what the runner emits with every step (and with the original's
row), what the store keeps and what every table shows: the reference's and the step's
latency *from the same comparison* (the median of their interleaved samples, each with its
95 % interval), the speedup with its interval, whether the machine was noisy, where it ran
and how it was batched. A row built from it cannot contradict itself: the speedup interval
always contains ``p50_ref_ms / p50_step_ms`` (``consistent``).

Pure data: no numpy, no torch; it sits at the bottom layer so events can carry it. Its JSON
form (``to_json`` / ``from_json``) uses the field names; the store's flat metric keys live
in one module at the store's boundary (studio.store.timing_keys).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95

# How a row was measured.
INTERLEAVED = "interleaved"  # the step against the reference, in alternating rounds
APART = "apart"  # too big to hold both: the reference re-timed right before, no interval
BASELINE = "baseline"  # the original's own row: the reference alone, timed like the steps
MODES = (INTERLEAVED, APART, BASELINE)


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval (``low <= value <= high``)."""

    value: float
    low: float
    high: float
    confidence: float = CONFIDENCE

    @property
    def half_width(self) -> float:
        """Largest distance from the value to an end, relative to the value (0.05 = +-5 %)."""
        if self.value <= 0:
            return math.inf
        return max(self.value - self.low, self.high - self.value) / self.value

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Latency:
    """One model's latency in a measurement, in milliseconds per call (first call apart).

    ``p50_ms`` is the median of the samples, ``low_ms``/``high_ms`` its 95 % interval;
    ``batch`` calls made one sample (tiny models, see accel.timing.batching)."""

    p50_ms: float
    low_ms: float | None = None
    high_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    std_ms: float | None = None
    first_call_ms: float | None = None
    samples: int = 0
    batch: int = 1

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.low_ms is None or self.high_ms is None:
            return None
        return self.low_ms, self.high_ms


@dataclass(frozen=True)
class StepTiming:
    """One row's timing: reference and step latency from one comparison, and the speedup.

    ``reference`` is None only for rows recorded before references were kept with each
    step; ``step`` is None for the original's own row (``mode == "baseline"``).
    ``speedup_low``/``speedup_high`` are None when the rounds were not paired (``apart``)."""

    mode: str
    reference: Latency | None
    step: Latency | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    confidence: float = CONFIDENCE
    rounds: int = 0
    threads: int | None = None
    cpus: tuple[int, ...] = ()
    placement: str | None = None  # why it ran on some CPUs only (None: not pinned)
    noisy: bool = False
    noise_reason: str | None = None
    note: str | None = None  # e.g. why the step was timed apart from the reference
    noise: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False)

    @property
    def p50_ref_ms(self) -> float | None:
        return None if self.reference is None else self.reference.p50_ms

    @property
    def p50_step_ms(self) -> float | None:
        return None if self.step is None else self.step.p50_ms

    @property
    def p50_ms(self) -> float | None:
        """The row's own latency: the step's, or the reference's on the original's row."""
        return self.p50_ref_ms if self.mode == BASELINE else self.p50_step_ms

    @property
    def speedup_bounds(self) -> tuple[float, float] | None:
        if self.speedup_low is None or self.speedup_high is None:
            return None
        return self.speedup_low, self.speedup_high

    def p50_ratio(self) -> float | None:
        """``p50_ref_ms / p50_step_ms`` (None when either is unknown)."""
        ref, step = self.p50_ref_ms, self.p50_step_ms
        if ref is None or step is None or step <= 0:
            return None
        return ref / step

    def consistent(self, rel: float = 1e-9) -> bool:
        """Whether the row agrees with itself: the p50 ratio lies inside the speedup
        interval (equals the speedup when there is no interval). Rows without both p50s
        (the original's, old runs) have nothing to contradict."""
        ratio = self.p50_ratio()
        if ratio is None or self.speedup is None:
            return True
        lo, hi = self.speedup_bounds or (self.speedup, self.speedup)
        slack = rel * max(abs(hi), 1.0)
        return lo - slack <= ratio <= hi + slack

    # -- JSON --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (field names as keys); ``from_json`` gives the same record back."""
        d = dataclasses.asdict(self)
        d["cpus"] = list(self.cpus)
        d["noise"] = None if self.noise is None else dict(self.noise)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StepTiming:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown StepTiming fields: {sorted(unknown)}")
        kw = dict(d)
        if kw.get("mode") not in MODES:
            raise ValueError(f"StepTiming mode must be one of {MODES}, got {kw.get('mode')!r}")
        for side in ("reference", "step"):
            if kw.get(side) is not None:
                kw[side] = _latency(kw[side])
        kw["cpus"] = tuple(int(c) for c in kw.get("cpus") or ())
        return cls(**kw)

    @staticmethod
    def looks_like(d: Any) -> bool:
        """Whether ``d`` is the JSON form of a StepTiming (and not an older details dict)."""
        return isinstance(d, Mapping) and d.get("mode") in MODES and "reference" in d


def _latency(d: Mapping[str, Any]) -> Latency:
    names = {f.name for f in dataclasses.fields(Latency)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown Latency fields: {sorted(unknown)}")
    return Latency(**d)


def baseline_timing(reference: Latency, **facts: Any) -> StepTiming:
    """The original's own row: its latency timed like the steps, no speedup."""
    return StepTiming(mode=BASELINE, reference=reference, **facts)
