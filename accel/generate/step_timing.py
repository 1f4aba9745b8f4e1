"""Generation figures as the one typed timing result (``accel.timing.StepTiming``).

A generating row's latency is milliseconds per generated token over the whole generation
(prefill included, i.e. 1000 / tokens/s per round); its speedup is the tokens/s ratio, the
median of the paired alternating rounds. Like every comparison's, the interval holds the
ratio of the two p50s, so a row cannot contradict itself.
"""

from __future__ import annotations

from accel.generate.timing import GenerationComparison, GenerationFigures
from accel.timing.result import BASELINE, INTERLEAVED, Latency, StepTiming
from accel.timing.stats import covering, median_interval

NOTE = (
    "generation: ms per generated token over the whole generation (prefill included); "
    "speedup = tokens/s ratio, median of paired alternating rounds"
)


def token_latency(figures: GenerationFigures) -> Latency | None:
    """Milliseconds per generated token, per round: their median with its interval."""
    ms = [1000.0 / t for t in figures.tokens_per_s if t > 0]
    if not ms:
        return None
    iv = median_interval(ms)
    return Latency(p50_ms=iv.value, low_ms=iv.low, high_ms=iv.high, samples=len(ms))


def baseline_timing(figures: GenerationFigures) -> StepTiming | None:
    """The original's own generating row."""
    latency = token_latency(figures)
    if latency is None:
        return None
    rounds = len(figures.tokens_per_s)
    return StepTiming(BASELINE, latency, rounds=rounds, noisy=figures.noisy, note=NOTE)


def comparison_timing(cmp: GenerationComparison) -> StepTiming:
    """A step generating against the original in alternating rounds."""
    ref, step = token_latency(cmp.reference), token_latency(cmp.candidate)
    iv = cmp.ratio("tokens_per_s")
    if ref is not None and step is not None and step.p50_ms > 0:
        iv = covering(iv, ref.p50_ms / step.p50_ms)  # as every comparison's row does
    return StepTiming(
        INTERLEAVED,
        ref,
        step,
        speedup=iv.value,
        speedup_low=iv.low,
        speedup_high=iv.high,
        rounds=len(cmp.candidate.tokens_per_s),
        noisy=cmp.noisy,
        note=f"{NOTE}; {kv_cache_note(cmp)}{projection_note(cmp)}",
    )


def kv_cache_note(cmp: GenerationComparison) -> str:
    """How each side keeps its KV cache (none: each token recomputes the whole sequence)."""
    return f"KV cache: original {cmp.reference.kv_cache}, step {cmp.candidate.kv_cache}"


def projection_note(cmp: GenerationComparison) -> str:
    """Said where the rounds were shorter than the generation the figures are for."""
    if cmp.timed_tokens is None:
        return ""
    return (
        f"; tokens/s projected to {cmp.reference.projected_to} new tokens from TTFT and TPOT "
        f"timed over {cmp.timed_tokens}"
    )
