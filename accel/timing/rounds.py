"""The one timing loop: a model's first call timed apart, its warm-up, then rounds of
samples; two models in alternating rounds (A B, then B A, ...: neither always runs on the
other's caches), or one model alone (the original's row, the memory fallback) with the very
same first call, warm-up, batching and rounds; or a reference and several candidates in
rotating order (``run_round_robin``: the search's final side-by-side re-timing).

Nothing here asserts on wall time; the tests drive it with a fake clock (``CLOCK``).
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accel.timing.batching import calls_per_sample
from accel.timing.noise import NOISY_HALF_WIDTH, NoiseMonitor, NoiseReport
from accel.timing.placement import CpuPlacement
from accel.timing.result import APART, BASELINE, INTERLEAVED, Interval, Latency, StepTiming
from accel.timing.settings import TimingSettings
from accel.timing.stats import covering, median_interval, ratio_interval

# ``min_time_s`` never adds rounds beyond this.
MAX_ROUNDS = 200
# ``give_up_below``: rounds timed before a far slower candidate's timing may stop.
GIVE_UP_ROUNDS = 2

# The clock every sample is read from (seconds). Tests replace it with a fake one.
CLOCK: Callable[[], float] = time.perf_counter


@dataclass
class Side:
    """One model's timings in a measurement (milliseconds per call)."""

    round_ms: list[float] = field(default_factory=list)  # one value per round
    samples_ms: list[float] = field(default_factory=list)  # every sample, in order
    batch: int = 1  # calls per sample
    first_call_ms: float = 0.0

    def latency(self, seed: int = 0) -> Latency:
        """The median of the samples with its interval, and the tail percentiles."""
        import numpy as np

        s = np.asarray(self.samples_ms, dtype=float)
        p90, p99 = np.percentile(s, [90, 99])
        iv = median_interval(self.samples_ms, seed=seed)
        return Latency(
            p50_ms=iv.value,
            low_ms=iv.low,
            high_ms=iv.high,
            p90_ms=float(p90),
            p99_ms=float(p99),
            mean_ms=float(s.mean()),
            std_ms=float(s.std(ddof=1)) if len(s) > 1 else 0.0,
            first_call_ms=self.first_call_ms,
            samples=len(s),
            batch=self.batch,
        )


@dataclass
class Comparison:
    """The result of ``run_rounds`` / ``accel.timing.compare_interleaved``."""

    speedup: Interval
    reference: Side
    candidate: Side
    rounds: int
    iters: int  # samples per model per round
    warmup: int
    threads: int | None
    noise: NoiseReport | None = None
    reasons: list[str] = field(default_factory=list)  # why it is noisy (empty: it is not)
    placement: CpuPlacement | None = None
    seed: int = 0

    @property
    def noisy(self) -> bool:
        return bool(self.reasons)

    @property
    def noise_reason(self) -> str:
        return "; ".join(self.reasons)

    def timing(self) -> StepTiming:
        """The typed result: both latencies from these rounds, the speedup whose interval
        contains their ratio (``stats.covering``)."""
        ref = self.reference.latency(self.seed)
        step = self.candidate.latency(self.seed)
        speedup = covering(self.speedup, ref.p50_ms / step.p50_ms)
        return StepTiming(
            mode=INTERLEAVED,
            reference=ref,
            step=step,
            speedup=speedup.value,
            speedup_low=speedup.low,
            speedup_high=speedup.high,
            confidence=speedup.confidence,
            rounds=self.rounds,
            **_where(self.threads, self.placement),
            noisy=self.noisy,
            noise_reason=self.noise_reason or None,
            noise=self.noise.to_dict() if self.noise is not None else None,
        )

    def summary(self) -> str:
        s = self.speedup
        text = f"{s.value:.2f}x [{s.low:.2f}-{s.high:.2f}]"
        return text + (f" (noisy: {self.noise_reason})" if self.noisy else "")


def _where(threads: int | None, placement: CpuPlacement | None) -> dict[str, Any]:
    return {
        "threads": threads,
        "cpus": tuple(placement.cpus) if placement is not None else (),
        "placement": placement.note if placement is not None else None,
    }


@dataclass
class Alone:
    """One model timed on its own with the comparison's machinery."""

    side: Side
    rounds: int
    threads: int | None
    placement: CpuPlacement | None = None
    noise: NoiseReport | None = None

    def timing(self, seed: int = 0) -> StepTiming:
        """The original's row: its latency, timed like the steps, and no speedup."""
        busy = self.noise is not None and self.noise.busy
        return StepTiming(
            mode=BASELINE,
            reference=self.side.latency(seed),
            rounds=self.rounds,
            **_where(self.threads, self.placement),
            noisy=busy,
            noise_reason=self.noise.reason() if busy else None,
            noise=self.noise.to_dict() if self.noise is not None else None,
        )


def apart_timing(reference: Alone, step: Alone, reason: str, seed: int = 0) -> StepTiming:
    """A step timed on its own after the reference was (memory fallback): the speedup is the
    ratio of the two p50s, with no interval (the rounds are not paired)."""
    ref, cand = reference.side.latency(seed), step.side.latency(seed)
    return StepTiming(
        mode=APART,
        reference=ref,
        step=cand,
        speedup=ref.p50_ms / cand.p50_ms,
        rounds=step.rounds,
        **_where(step.threads, step.placement),
        note=f"timed apart, not side by side: {reason}; the original was re-timed right "
        "before the step (no interval)",
    )


def _sample_ms(call: Callable[[], Any], batch: int, sync: Callable[[], None]) -> float:
    clock = CLOCK
    t = clock()
    for _ in range(batch):
        call()
    sync()
    return (clock() - t) * 1000.0 / batch


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _p50_ratio(ref: Side, cand: Side) -> list[float]:
    p50 = _median(cand.samples_ms)
    return [_median(ref.samples_ms) / p50] if p50 > 0 else []


def first_and_warmup(
    call: Callable[[], Any],
    first: Callable[[], Any],
    warm: int,
    sync: Callable[[], None],
    check: Callable[[Any], None] | None,
) -> Side:
    """A side after its first call (timed alone, never counted) and ``warm`` warm-up calls,
    timed one by one: the fastest tells whether to batch (at least one is made for that, so
    a warm-up of 0 still calibrates)."""
    side = Side()
    t = CLOCK()
    out = first()
    sync()
    if check is not None:
        check(out)
    side.first_call_ms = (CLOCK() - t) * 1000.0
    fastest = math.inf
    for _ in range(max(warm, 1)):
        t = CLOCK()
        call()
        sync()
        fastest = min(fastest, CLOCK() - t)
    side.batch = calls_per_sample(fastest)
    return side


def time_round(side: Side, call: Callable[[], Any], per_round: int, sync: Callable) -> float:
    """One round of ``per_round`` samples into ``side``; the seconds it timed."""
    samples = [_sample_ms(call, side.batch, sync) for _ in range(per_round)]
    side.samples_ms.extend(samples)
    side.round_ms.append(_median(samples))
    return sum(samples) * side.batch / 1000.0


def more_rounds(settings: TimingSettings, rounds: int, timed_s: float) -> bool:
    return rounds < settings.base_rounds or (
        timed_s < settings.min_time_s and rounds < max(MAX_ROUNDS, settings.base_rounds)
    )


@contextlib.contextmanager
def gc_paused():
    """No garbage collection while timing: a collection inside a sample would land in one
    side only."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _warmed_up(
    calls: Mapping[str, Callable[[], Any]],
    settings: TimingSettings,
    sync: Callable[[], None],
    first: Mapping[str, Callable[[], Any]] | None,
    check_output: Callable[[Any, str], None] | None,
    reference_warm: bool,
) -> dict[str, Side]:
    """Each side after its first call and warm-up (``first_and_warmup``), by name."""
    sides = {}
    for name, call in calls.items():
        # the runner's baseline already warmed the reference up: one call is enough
        warm = min(1, settings.warmup) if reference_warm and name == "reference" else None
        check = None if check_output is None else (lambda out, n=name: check_output(out, n))
        start = (first or {}).get(name, call)
        sides[name] = first_and_warmup(
            call, start, settings.warmup if warm is None else warm, sync, check
        )
    return sides


def _timed_rounds(
    order: Callable[[int], Sequence[tuple[Side, Callable[[], Any]]]],
    settings: TimingSettings,
    sync: Callable[[], None],
    *,
    time_scale: float = 1.0,
    monitor: NoiseMonitor | None,
    cancel: Callable[[], bool] | None,
    progress: Callable[[float, str], None] | None = None,
    stop: Callable[[int], bool] | None = None,
) -> tuple[int, NoiseReport | None]:
    """Rounds until ``settings`` are met (``min_time_s`` against ``time_scale`` times the
    timed seconds) or ``stop(rounds)`` says so, garbage collection paused; ``order(round)``:
    the sides that round times, in order. Returns the number of rounds and the monitor's
    report."""
    from accel.errors import Cancelled

    if monitor is not None:
        monitor.start()
    timed_s = 0.0
    rounds = 0
    with gc_paused():
        while more_rounds(settings, rounds, time_scale * timed_s):
            if cancel is not None and cancel():
                raise Cancelled("timing cancelled")
            for side, call in order(rounds):
                timed_s += time_round(side, call, settings.per_round, sync)
            rounds += 1
            if monitor is not None:
                monitor.tick()
            if progress is not None:
                progress(min(1.0, rounds / settings.base_rounds), f"timing round {rounds}")
            if stop is not None and more_rounds(settings, rounds, time_scale * timed_s):
                if stop(rounds):
                    break
    return rounds, (monitor.stop() if monitor is not None else None)


def run_rounds(
    reference: Callable[[], Any],
    candidate: Callable[[], Any],
    settings: TimingSettings,
    *,
    sync: Callable[[], None] = lambda: None,
    monitor: NoiseMonitor | None = None,
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[float, str], None] | None = None,
    seed: int = 0,
    first: Mapping[str, Callable[[], Any]] | None = None,
    check_output: Callable[[Any, str], None] | None = None,
    reference_warm: bool = False,
) -> Comparison:
    """Time two zero-argument callables in alternating rounds (see the module docstring).

    The first call of each is timed alone (``first_call_ms``) and never counted; then
    ``settings.warmup`` untimed calls each; then rounds A B / B A / ... of
    ``settings.iters`` samples per side. A round's value is the median of its samples.
    ``first`` (by side name) replaces a side's first call (e.g. one that creates its session);
    ``check_output(output, side)`` sees the first call's output (to reject NaN).
    ``reference_warm``: the reference already ran in this process (the runner's baseline),
    so it gets one warm-up call instead of ``settings.warmup``."""
    return run_round_robin(
        reference,
        {"candidate": candidate},
        settings,
        sync=sync,
        monitor=monitor,
        cancel=cancel,
        progress=progress,
        seed=seed,
        first=first,
        check_output=check_output,
        reference_warm=reference_warm,
    )["candidate"]


def run_round_robin(
    reference: Callable[[], Any],
    candidates: Mapping[str, Callable[[], Any]],
    settings: TimingSettings,
    *,
    sync: Callable[[], None] = lambda: None,
    monitor: NoiseMonitor | None = None,
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[float, str], None] | None = None,
    seed: int = 0,
    first: Mapping[str, Callable[[], Any]] | None = None,
    check_output: Callable[[Any, str], None] | None = None,
    reference_warm: bool = False,
    give_up_below: float | None = None,
) -> dict[str, Comparison]:
    """``run_rounds`` for a reference and any number of named candidates in ONE measurement:
    every round times each side once, in an order rotated by one each round (with one
    candidate: A B, then B A, ...), so that every candidate and the reference see the same
    machine load. Each candidate's Comparison holds the reference's side of these very
    rounds; its speedup is the median of the per-round ratios (``_speedup_and_noise``).
    ``min_time_s`` counts the time of two sides (a pair's), whatever the number of sides.
    ``give_up_below``: stop early when every candidate is far slower (``_GiveUp``)."""
    if not candidates:
        raise ValueError("round-robin timing needs at least one candidate")
    if "reference" in candidates:
        raise ValueError("'reference' names the reference side; name the candidate otherwise")
    calls = {"reference": reference, **candidates}
    sides = _warmed_up(calls, settings, sync, first, check_output, reference_warm)
    order = list(calls)

    def rotated(rounds: int) -> list[tuple[Side, Callable[[], Any]]]:
        k = rounds % len(order)
        return [(sides[name], calls[name]) for name in order[k:] + order[:k]]

    ref = sides["reference"]
    give_up = _GiveUp(ref, [sides[name] for name in candidates], give_up_below)
    rounds, noise = _timed_rounds(
        rotated,
        settings,
        sync,
        time_scale=2.0 / len(order),
        monitor=monitor,
        cancel=cancel,
        progress=progress,
        stop=give_up,
    )
    return {
        name: _comparison(ref, sides[name], rounds, settings, noise, seed, give_up)
        for name in candidates
    }


def _comparison(
    ref: Side,
    cand: Side,
    rounds: int,
    settings: TimingSettings,
    noise: NoiseReport | None,
    seed: int,
    give_up: _GiveUp,
) -> Comparison:
    """One candidate's Comparison against the reference side of the same rounds."""
    interval, reasons = _speedup_and_noise(ref, cand, noise, seed)
    return Comparison(
        speedup=interval,
        reference=ref,
        candidate=cand,
        rounds=rounds,
        iters=settings.per_round,
        warmup=settings.warmup,
        threads=settings.threads,
        noise=noise,
        reasons=reasons + give_up.reasons(rounds, interval.value),
        seed=seed,
    )


class _GiveUp:
    """``run_round_robin``'s ``give_up_below`` rule, called after each round that would be
    followed by another: True (stop) once every candidate ran below ``below`` in each of at
    least GIVE_UP_ROUNDS rounds. For a search trial that cannot win: inductor took 1.3 s a
    call for HF EfficientNet-B0's 77 ms, and its full timing cost the search 40 s. The
    comparison says so in its reasons; its interval comes from the rounds timed."""

    def __init__(self, ref: Side, candidates: Sequence[Side], below: float | None) -> None:
        self.ref, self.candidates, self.below = ref, candidates, below
        self.stopped = False

    def __call__(self, rounds: int) -> bool:
        if self.below is None or rounds < GIVE_UP_ROUNDS:
            return False
        self.stopped = all(self._all_rounds_below(side) for side in self.candidates)
        return self.stopped

    def _all_rounds_below(self, cand: Side) -> bool:
        pairs = zip(self.ref.round_ms, cand.round_ms, strict=False)
        return bool(cand.round_ms) and all(c > 0 and r / c < self.below for r, c in pairs)

    def reasons(self, rounds: int, speedup: float) -> list[str]:
        """Why the comparison is less sure than a full one (empty: it was not stopped)."""
        if not self.stopped:
            return []
        return [
            f"timing stopped after {rounds} rounds: {speedup:.2f}x, below {self.below:g}x "
            "the original in every round"
        ]


def _speedup_and_noise(
    ref: Side, cand: Side, noise: NoiseReport | None, seed: int
) -> tuple[Interval, list[str]]:
    """The median of the per-round ratios with an interval that also covers the ratio of the
    two p50s shown beside it, and why the comparison is noisy (empty: it is not)."""
    interval = covering(
        ratio_interval(ref.round_ms, cand.round_ms, seed=seed), *_p50_ratio(ref, cand)
    )
    reasons: list[str] = []
    if noise is not None and noise.busy:
        reasons.append(noise.reason())
    if interval.half_width > NOISY_HALF_WIDTH:
        reasons.append(f"interval wider than +-{NOISY_HALF_WIDTH:.0%} ({interval.half_width:+.0%})")
    return interval, reasons


def run_alone(
    call: Callable[[], Any],
    first: Callable[[], Any],
    settings: TimingSettings,
    *,
    sync: Callable[[], None] = lambda: None,
    monitor: NoiseMonitor | None = None,
    cancel: Callable[[], bool] | None = None,
    check: Callable[[Any], None] | None = None,
) -> tuple[Side, int, NoiseReport | None]:
    """One model with ``run_rounds``' first call, warm-up, batching and rounds; ``min_time_s``
    counts its time twice (a comparison times two models in the same rounds)."""
    side = first_and_warmup(call, first, settings.warmup, sync, check)
    rounds, noise = _timed_rounds(
        lambda _: [(side, call)], settings, sync, time_scale=2, monitor=monitor, cancel=cancel
    )
    return side, rounds, noise
