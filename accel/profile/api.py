"""``profile_model``: one entry point for torch and ONNX models."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from accel.profile.generation import GenerationLayers
from accel.profile.results import ModelProfile

log = logging.getLogger(__name__)


def profile_model(
    loaded: Any,
    inputs: Mapping[str, Any] | None = None,
    *,
    iters: int = 20,
    warmup: int = 5,
    ops: bool = True,
    trace_path: str | Path | None = None,
    device: str | None = None,
    threads: int | None = None,
    progress: Callable[[float, str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> ModelProfile:
    """Profile a ``LoadedModel`` layer by layer (torch: per module, ONNX: per node).

    ``inputs`` default to ``loaded.example_inputs()``. ``device`` defaults to the
    model's device; a torch model on another device is moved there for the
    profile and moved back afterwards. ``progress(fraction, message)`` is called
    as the work advances; ``cancel()`` is polled between iterations and raises
    ``accel.errors.Cancelled`` when it returns True. ``trace_path`` writes a
    Chrome/Perfetto trace (open it in https://ui.perfetto.dev or chrome://tracing).
    ``threads`` (torch and ONNX Runtime intra-op threads) defaults to the physical cores,
    as the runner's timing does.
    """
    device = device or loaded.device or "cpu"
    if not threads:  # one thread policy with the runner: the physical cores
        from accel.timing import physical_cores

        threads = physical_cores()
    if inputs is None:
        inputs = loaded.example_inputs()
    from accel.models.runtime import ProfileRequest, runtime_of

    request = ProfileRequest(
        iters=iters,
        warmup=warmup,
        ops=ops,
        trace_path=trace_path,
        device=device,
        threads=threads,
        progress=progress,
        cancel=cancel,
    )
    prof = runtime_of(loaded).profile(loaded, inputs, request)
    prof.source = loaded.source
    return prof


def profile_generation_layers(
    loaded: Any,
    bench: Any = None,
    *,
    rounds: int = 3,
    warmup: int = 1,
    threads: int | None = None,
    seed: int = 0,
    progress: Callable[[float, str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> GenerationLayers:
    """Where a decoder LM's generation time goes, layer by layer: each module's time in one
    prefill of the prompt and per decode step, against the plain TTFT and TPOT, and the KV
    cache's bytes at each length with its closed-form size per token.

    ``bench``: the generation settings (a recipe's benchmark block or a mapping:
    ``prompt_tokens``, ``new_tokens``, ``batch``; defaults 128 / 64 / 1). ``rounds`` hooked
    generations (each beside a plain one) after ``warmup``.
    """
    from accel.generate.decoders import decoder_for
    from accel.generate.evaluate import prepare
    from accel.generate.profiling import (
        GreedyWork,
        cache_dtype_bytes,
        kv_bytes_per_token,
        kv_growth,
    )
    from accel.generate.settings import lm_config
    from accel.models.runtime import ProfileRequest, runtime_of

    if not threads:
        from accel.timing import physical_cores

        threads = physical_cores()
    settings, prompt = prepare(loaded, bench or {}, seed)
    decoder = decoder_for(loaded, settings.total_tokens)
    work = GreedyWork(decoder, prompt, settings.new_tokens)
    request = ProfileRequest(
        iters=rounds, warmup=warmup, threads=threads, progress=progress, cancel=cancel
    )
    layers = runtime_of(loaded).profile_generation(loaded, work, request)
    layers.prompt_tokens, layers.batch = settings.prompt_tokens, settings.batch
    layers.kv_cache = decoder.kv_cache
    layers.kv_lengths, layers.kv_bytes = kv_growth(work)
    module = getattr(loaded, "module", None)
    per_token = kv_bytes_per_token(lm_config(module), cache_dtype_bytes(module), settings.batch)
    held = getattr(decoder, "per_token_bytes", None)  # a runtime's own cache (stateful IR)
    if per_token is None and held:
        per_token = int(held * settings.batch)
    layers.kv_bytes_per_token = per_token
    layers.notes.extend(kv_notes(layers))
    return layers


def kv_notes(layers: GenerationLayers) -> list[str]:
    """How the measured KV cache compares with its closed form."""
    per, sizes = layers.kv_bytes_per_token, layers.kv_bytes
    if per is None or not sizes:
        return []
    if layers.kv_cache == "static":
        return ["static KV cache: allocated for the whole generation up front, flat with length"]
    off = [n for n, b in zip(layers.kv_lengths, sizes, strict=False) if b != n * per]
    if off:
        return [
            f"the KV cache differs from 2 x layers x kv heads x head size x dtype x batch "
            f"= {per} bytes per position at {len(off)} of {len(sizes)} lengths (a sliding "
            "window, a quantized or an offloaded cache)"
        ]
    return []
