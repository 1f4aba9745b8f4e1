"""The generation workload of a run or a profile: one model alone (the baseline, ``studio
profile --generate``) or a step's model against the original, in alternating rounds, with
teacher-forced parity. Memory is split into weights (the model's serialized size) and the KV
cache (bytes its cache tensors hold after a generation of the full length)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.generate.decoders import decoder_for
from accel.generate.parity import (
    GenerationParity,
    compare_generation_parity,
    reference_continuation,
)
from accel.generate.settings import (
    GenerateError,
    GenerateSettings,
    check_fits,
    model_lm_config,
    prompt_ids,
    setting,
    vocab_size,
)
from accel.generate.step_timing import baseline_timing, comparison_timing
from accel.generate.timing import Clock, GenerationFigures, compare_generation, time_alone
from accel.parity import Tolerances
from accel.timing.result import StepTiming

log = logging.getLogger(__name__)

MIN_ROUNDS = 3


def weights_bytes(model: Any) -> int:
    """Bytes of the model's weights: its serialized size, else its parameters' storage."""
    size = int(getattr(model, "size_bytes", 0) or 0)
    if size:
        return size
    module = getattr(model, "module", None)
    if module is None:
        return 0
    return sum(int(t.nbytes) for t in (*module.parameters(), *module.buffers()))


def rounds_of(bench: Any) -> int:
    """Timed rounds of a benchmark block (at least MIN_ROUNDS)."""
    return max(MIN_ROUNDS, int(setting(bench, "rounds") or MIN_ROUNDS))


def _threads(bench: Any) -> None:
    threads = setting(bench, "threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))


@dataclass
class GenerationProfile:
    """One model's generation figures: what ``studio profile --generate`` prints."""

    settings: GenerateSettings
    figures: GenerationFigures
    weights_bytes: int

    def metrics(self) -> dict[str, float | None]:
        out = self.figures.metrics()
        out["weights_bytes"] = float(self.weights_bytes)
        out["peak_memory_bytes"] = float(self.weights_bytes + self.figures.kv_cache_bytes)
        return out


def prepare(original: Any, bench: Any, seed: int = 0) -> tuple[GenerateSettings, Any]:
    """The checked settings and the seeded prompt for ``original`` (a loaded torch LM)."""
    settings = GenerateSettings.from_bench(bench)
    config = model_lm_config(original)
    check_fits(settings, config)
    return settings, prompt_ids(settings, vocab_size(config) or 1, seed)


def profile_generation(
    model: Any, bench: Any, seed: int = 0, clock: Clock = time.perf_counter
) -> GenerationProfile:
    """Time ``model`` generating alone: TTFT, TPOT, tokens/s with intervals, and memory."""
    settings, prompt = prepare(model, bench, seed)
    _threads(bench)
    decoder = decoder_for(model, settings.total_tokens)
    figures = time_alone(decoder, prompt, settings.new_tokens, rounds_of(bench), clock=clock)
    return GenerationProfile(settings, figures, weights_bytes(model))


@dataclass
class GenerationBaseline:
    """The original's prompt, greedy continuation and logits, and its own figures."""

    settings: GenerateSettings
    prompt: Any
    tokens: Any
    logits: Any
    decoder: Any
    metrics: dict[str, float | None] = field(default_factory=dict)
    timing: StepTiming | None = None  # the original's own row (None: not timed)
    warm: bool = True  # the decoder generated in this process (not read from a store)


def generation_baseline(
    original: Any,
    bench: Any,
    seed: int = 0,
    timed: bool = True,
    store: Path | None = None,
) -> GenerationBaseline:
    """The reference continuation of the original (parity) and, ``timed``, its figures.

    ``store``: a file that keeps the continuation for the next caller with the same model,
    settings and seed (the search's trials, each in its own process: an eager 1B decoder
    takes a minute to generate it). Read back as tensors only, and used only when its
    shapes are the ones these settings give; otherwise computed again and rewritten."""
    settings, prompt = prepare(original, bench, seed)
    _threads(bench)
    decoder = decoder_for(original, settings.total_tokens)
    stored = _read_continuation(store, prompt, settings.new_tokens)
    if stored is None:
        tokens, logits = reference_continuation(decoder, prompt, settings.new_tokens)
        _write_continuation(store, tokens, logits)
    else:
        tokens, logits = stored
    metrics: dict[str, float | None] = {}
    timing = None
    if timed:
        figures = time_alone(decoder, prompt, settings.new_tokens, rounds_of(bench), warmup=0)
        metrics = figures.metrics()
        timing = baseline_timing(figures)
    metrics["weights_bytes"] = float(weights_bytes(original))
    return GenerationBaseline(
        settings, prompt, tokens, logits, decoder, metrics, timing, warm=stored is None or timed
    )


def _read_continuation(path: Path | None, prompt: Any, new_tokens: int) -> tuple[Any, Any] | None:
    if path is None or not path.is_file():
        return None
    import torch

    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
        tokens, logits = data["tokens"], data["logits"]
    except Exception:  # noqa: BLE001 - unreadable: computed again
        log.warning("ignored the stored reference continuation %s (unreadable)", path)
        return None
    batch = int(prompt.shape[0])
    if (
        not isinstance(tokens, torch.Tensor)
        or not isinstance(logits, torch.Tensor)
        or tuple(tokens.shape) != (batch, new_tokens)
        or logits.dim() != 3
        or tuple(logits.shape[:2]) != (batch, new_tokens)
        or not bool(torch.isfinite(logits).all())
    ):
        log.warning("ignored the stored reference continuation %s (other shapes)", path)
        return None
    return tokens, logits


def _write_continuation(path: Path | None, tokens: Any, logits: Any) -> None:
    if path is None:
        return
    import os
    import uuid

    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    torch.save({"tokens": tokens, "logits": logits}, tmp)
    os.replace(tmp, path)  # concurrent trials: the last whole file wins


@dataclass
class StepGeneration:
    """A step's model against the original: metrics, timing details, parity."""

    metrics: dict[str, float | None]
    timing: StepTiming
    parity: GenerationParity


def evaluate_generation(
    base: GenerationBaseline,
    model: Any,
    tolerances: Tolerances,
    bench: Any,
    cancel: Callable[[], bool] | None = None,
) -> StepGeneration:
    """Teacher-forced parity, then both models generating in alternating rounds."""
    try:
        decoder = decoder_for(model, base.settings.total_tokens)
    except GenerateError as exc:
        raise GenerateError(f"the step's model cannot generate: {exc}") from None
    parity = compare_generation_parity(base.tokens, base.logits, decoder, base.prompt, tolerances)
    cmp = compare_generation(
        base.decoder,
        decoder,
        base.prompt,
        base.settings.new_tokens,
        rounds_of(bench),
        cancel=cancel,
    )
    metrics = cmp.metrics()
    metrics.update(parity.metrics())
    metrics["weights_bytes"] = float(weights_bytes(model))
    # The run's speedup columns carry the generation's (tokens/s against the original's)
    # through the step's StepTiming.
    return StepGeneration(metrics, comparison_timing(cmp), parity)
