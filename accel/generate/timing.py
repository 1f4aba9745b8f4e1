"""Timing generation: time to first token (prefill), time per output token (decode), tokens/s.

One generation is greedy: the prompt's prefill gives the first token; each decode step feeds
the last token and gives the next. ``time_generation`` reads the clock (an argument, so tests
use a fake one) before the prefill and after every token. ``compare_generation`` times a
reference and a candidate in alternating rounds in this process, so a change of load hits
both alike; its ratios come with 95% bootstrap intervals over the paired rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accel.generate.decoders import Decoder
from accel.timing.stats import Interval, median_interval

Clock = Callable[[], float]
NOISY_SPREAD = 0.10  # rounds whose tokens/s vary more than this (relative) are called noisy


@dataclass(frozen=True)
class GenerationTiming:
    """One generation: the clock at the prefill's start and after each new token."""

    start: float
    token_times: tuple[float, ...]
    batch: int = 1
    tokens: Any = None  # the generated ids [batch, new_tokens]

    @property
    def ttft_s(self) -> float:
        return self.token_times[0] - self.start

    @property
    def total_s(self) -> float:
        return self.token_times[-1] - self.start

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (None with one new token)."""
        n = len(self.token_times)
        return None if n < 2 else (self.token_times[-1] - self.token_times[0]) / (n - 1)

    @property
    def tokens_per_s(self) -> float:
        """New tokens (all rows of the batch) per second of the whole generation."""
        return self.batch * len(self.token_times) / self.total_s if self.total_s > 0 else 0.0

    def tokens_per_s_at(self, new_tokens: int) -> float:
        """Tokens/s of a generation of ``new_tokens`` projected from this one's TTFT and TPOT:
        ``batch * n / (TTFT + (n - 1) * TPOT)`` (the measured figure where n is this one's
        length, or where there is no TPOT to project with)."""
        tpot = self.tpot_s
        if new_tokens == len(self.token_times) or tpot is None:
            return self.tokens_per_s
        total = self.ttft_s + (new_tokens - 1) * tpot
        return self.batch * new_tokens / total if total > 0 else 0.0


def _sync(t: Any) -> None:
    if getattr(t, "is_cuda", False):
        import torch

        torch.cuda.synchronize()


def time_generation(
    decoder: Decoder, prompt: Any, new_tokens: int, clock: Clock = time.perf_counter
) -> GenerationTiming:
    """Greedy generation of ``new_tokens`` after ``prompt`` [batch, prompt_len], timed."""
    import torch

    whole = getattr(decoder, "generate_timed", None)
    if whole is not None:  # a runtime's own generate call, clocked as each token arrives
        start, times, tokens = whole(prompt, new_tokens, clock)
        return GenerationTiming(start, tuple(times), int(prompt.shape[0]), tokens)
    start = clock()
    logits = decoder.prefill(prompt)
    token = logits.argmax(dim=-1, keepdim=True)
    _sync(token)
    times = [clock()]
    out = [token]
    for _ in range(new_tokens - 1):
        logits = decoder.step(token)
        token = logits.argmax(dim=-1, keepdim=True)
        _sync(token)
        times.append(clock())
        out.append(token)
    return GenerationTiming(start, tuple(times), int(prompt.shape[0]), torch.cat(out, dim=1))


@dataclass
class GenerationFigures:
    """One model's rounds: TTFT, TPOT and tokens/s per round, and the KV cache it held."""

    ttft_s: list[float] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    tokens_per_s: list[float] = field(default_factory=list)
    kv_cache_bytes: int = 0
    kv_cache: str = "none"
    # Rounds that generated fewer tokens than the figures are for: tokens/s projected to
    # ``projected_to`` new tokens from each round's TTFT and TPOT (None: as measured).
    projected_to: int | None = None

    def add(self, t: GenerationTiming) -> None:
        self.ttft_s.append(t.ttft_s)
        if t.tpot_s is not None:
            self.tpot_s.append(t.tpot_s)
        n = self.projected_to
        self.tokens_per_s.append(t.tokens_per_s if n is None else t.tokens_per_s_at(n))

    @property
    def noisy(self) -> bool:
        tps = self.tokens_per_s
        if len(tps) < 3:
            return False
        ordered = sorted(tps)
        return (ordered[-1] - ordered[0]) / max(
            ordered[len(ordered) // 2], 1e-12
        ) > 2 * NOISY_SPREAD

    def metrics(self, prefix: str = "") -> dict[str, float | None]:
        """Flat numbers (ms, tokens/s) with their intervals, for events, store and tables."""
        out: dict[str, float | None] = {}
        for key, values, scale in (
            ("ttft_ms", self.ttft_s, 1e3),
            ("tpot_ms", self.tpot_s, 1e3),
            ("tokens_per_s", self.tokens_per_s, 1.0),
        ):
            if not values:
                out[prefix + key] = None
                continue
            iv = median_interval(values)
            out[prefix + key] = iv.value * scale
            out[prefix + key + "_low"] = iv.low * scale
            out[prefix + key + "_high"] = iv.high * scale
        out[prefix + "kv_cache_bytes"] = float(self.kv_cache_bytes)
        return out


def time_alone(
    decoder: Decoder,
    prompt: Any,
    new_tokens: int,
    rounds: int,
    warmup: int = 1,
    clock: Clock = time.perf_counter,
) -> GenerationFigures:
    """One model's generation timed ``rounds`` times after ``warmup`` untimed ones."""
    for _ in range(warmup):
        time_generation(decoder, prompt, new_tokens, clock)
    figures = GenerationFigures(kv_cache=decoder.kv_cache)
    for _ in range(rounds):
        figures.add(time_generation(decoder, prompt, new_tokens, clock))
    figures.kv_cache_bytes = decoder.kv_cache_bytes()
    return figures


@dataclass
class GenerationComparison:
    """A candidate against its reference, timed in alternating rounds."""

    reference: GenerationFigures
    candidate: GenerationFigures
    timed_tokens: int | None = None  # rounds shorter than the figures' length (projected)

    def ratio(self, name: str, invert: bool = False) -> Interval:
        """Median of the paired per-round ratios candidate/reference (reference/candidate
        with ``invert``, for times), with a 95% bootstrap interval."""
        ref, cand = getattr(self.reference, name), getattr(self.candidate, name)
        pairs = [(r / c if invert else c / r) for r, c in zip(ref, cand, strict=False) if r and c]
        return (
            median_interval(pairs) if pairs else Interval(float("nan"), float("nan"), float("nan"))
        )

    @property
    def noisy(self) -> bool:
        return self.reference.noisy or self.candidate.noisy

    def metrics(self) -> dict[str, float | None]:
        out = self.candidate.metrics()
        out.update(self.reference.metrics(prefix="baseline_"))
        for key, name, invert in (
            ("tokens_per_s_ratio", "tokens_per_s", False),
            ("ttft_speedup", "ttft_s", True),
        ):
            iv = self.ratio(name, invert)
            out[key], out[key + "_low"], out[key + "_high"] = iv.value, iv.low, iv.high
        out["generation_noisy"] = 1.0 if self.noisy else 0.0
        return out


def compare_generation(
    reference: Decoder,
    candidate: Decoder,
    prompt: Any,
    new_tokens: int,
    rounds: int,
    warmup: int = 1,
    clock: Clock = time.perf_counter,
    cancel: Callable[[], bool] | None = None,
    timed_tokens: int | None = None,
    reference_warm: bool = False,
) -> GenerationComparison:
    """Both decoders timed in alternating rounds (the order flips every round).

    ``timed_tokens`` (fewer than ``new_tokens``): each round generates that many tokens and
    tokens/s is projected to ``new_tokens`` from the round's TTFT and TPOT (the search's
    trials: decoding an eager 1B model's 64 tokens costs minutes a round on two cores).
    ``reference_warm``: the reference just generated in this process (the parity's
    continuation), so only the candidate gets warm-up rounds."""
    length = new_tokens if timed_tokens is None else min(new_tokens, max(2, timed_tokens))
    project = None if length == new_tokens else new_tokens
    for dec in (candidate,) if reference_warm else (reference, candidate):
        for _ in range(warmup):
            time_generation(dec, prompt, length, clock)
    cmp = GenerationComparison(
        GenerationFigures(kv_cache=reference.kv_cache, projected_to=project),
        GenerationFigures(kv_cache=candidate.kv_cache, projected_to=project),
        timed_tokens=None if project is None else length,
    )
    sides = [(reference, cmp.reference), (candidate, cmp.candidate)]
    for r in range(rounds):
        if cancel is not None and cancel():
            break
        for dec, figures in sides if r % 2 == 0 else sides[::-1]:
            figures.add(time_generation(dec, prompt, length, clock))
    cmp.reference.kv_cache_bytes = reference.kv_cache_bytes()
    cmp.candidate.kv_cache_bytes = candidate.kv_cache_bytes()
    return cmp
