"""The search's generation objectives (``tokens_per_s``, ``ttft``): what a trial gates on
(teacher-forced logits cosine against the original's continuation, accel.generate) and what
it times (both models generating in alternating rounds). Passes that leave torch are not
searched for these objectives (their models run here without a KV cache, recomputing the
whole sequence for every token), except those that keep one (``Pass.keeps_kv_cache``: the
stateful OpenVINO export, whose cache lives in the infer request, and the ONNX Runtime GenAI
build, whose cache lives in og.Generator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accel.parity import ParityReport, Tolerances
from accel.timing.result import StepTiming

GENERATION_OBJECTIVES = ("tokens_per_s", "ttft")
PRIMARY = {
    "tokens_per_s": ("tokens_per_s_ratio", "maximize"),
    "ttft": ("ttft_speedup", "maximize"),
}
NO_KV_CACHE = (
    "leaves torch: the exported model runs without a KV cache here (each token recomputes the "
    "sequence), so it cannot win a generation objective"
)


# Stacks tried first for a generation objective: on CPUs the stateful OpenVINO LM with int8
# or int4 weights (NNCF) and ONNX Runtime GenAI's int4 build (the CPU's fastest decoding), the
# decode step compiled with a static KV cache on float or on int8 weights, the weights alone,
# the stateful LM alone. Chains the device's space lacks (OpenVINO or ORT GenAI on CUDA, a
# library not installed, a model the GenAI builder does not know) are dropped.
SEEDS = (
    ("openvino_stateful", "compress_weights_openvino"),
    ("ort_genai",),
    ("static_kv_cache",),
    ("quantize_weight_only", "static_kv_cache"),
    ("quantize_weight_only",),
    ("openvino_stateful",),
)


# Searched values a seed starts from (``pass.param``; the rest at the pass defaults): the
# stateful LM's first trial with int8 weights, which keeps teacher-forced logits within the
# default cosine budget (int4's default g128 often does not on random weights; the search
# still samples it), generating through OpenVINO GenAI's LLMPipeline: on hf:llama_small
# (prompt 128, 64 new, 2 threads) its decode step took 1.67 ms per token against 6.93 ms
# for the studio's own infer-request loop on the same IR (28.4x vs 9.3x eager fp32 tokens/s).
# The pipeline streams batch 1 only: other batches start from the infer request.
SEED_VALUES: dict[tuple[str, ...], dict[str, Any]] = {
    ("openvino_stateful", "compress_weights_openvino"): {
        "compress_weights_openvino.mode": "int8_asym",
        "openvino_stateful.pipeline": "genai",
    },
}


def seed_values(chain: tuple[str, ...], batch: int = 1) -> dict[str, Any]:
    values = dict(SEED_VALUES.get(tuple(chain), {}))
    if batch != 1 and values.get("openvino_stateful.pipeline") == "genai":
        values["openvino_stateful.pipeline"] = "infer_request"
    return values


# The same chains at other values, tried right after them: ORT GenAI at int8, which keeps
# the teacher-forced logits within a tight cosine budget where int4 may not (random-weight
# hf:llama_small: cosine 0.9997 at int8, 0.95 at int4).
VARIANTS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("ort_genai",), {"ort_genai.precision": "int8"}),
)


def generation_seeds(config: Any) -> tuple[Any, ...]:
    """The objective's own seeds (accel.search.seeds.Seed): SEEDS at their SEED_VALUES (else
    the passes' defaults), each followed by its VARIANTS."""
    from accel.search.seeds import Seed

    if config.objective not in GENERATION_OBJECTIVES:
        return ()
    batch = int((getattr(config, "generate", None) or {}).get("batch", 1) or 1)
    out = []
    for chain in SEEDS:
        out.append(Seed(chain, seed_values(chain, batch), "objective"))
        out += [Seed(c, dict(v), "objective") for c, v in VARIANTS if c == chain]
    return tuple(out)


def generation_bench(config: Any) -> dict[str, Any]:
    """The trial's (and the best recipe's) benchmark entries for a generation objective."""
    if config.objective not in GENERATION_OBJECTIVES:
        return {}
    return {"workload": "generate", **dict(getattr(config, "generate", None) or {})}


GENERATION_ONLY = (
    "speeds up generation only (the decode step with a KV cache); this objective times one "
    "forward pass over the sequence, which the compile pass covers"
)


def objective_exclusions(config: Any) -> dict[str, str]:
    """Pass name -> why a generation objective cannot search it: the passes that leave torch
    without a KV cache (their chains cannot be timed token by token). Not overridable."""
    from accel.passes import list_passes

    if config.objective not in GENERATION_OBJECTIVES:
        return {}
    return {
        cls.name: NO_KV_CACHE
        for cls in list_passes(include_test=True)
        # moves it to another runtime, without a KV cache there
        if cls.search is not None and cls.output_kind is not None and not cls.keeps_kv_cache
    }


def generation_only_exclusions(config: Any) -> dict[str, str]:
    """Pass name -> why a forward objective leaves it out: the passes that speed up
    generation only (``--passes`` can still name them; the engine decides that)."""
    from accel.passes import list_passes

    if config.objective in GENERATION_OBJECTIVES:
        return {}
    return {
        cls.name: GENERATION_ONLY
        for cls in list_passes(include_test=True)
        if cls.search is not None and cls.speeds_generation_only
    }


def gate(
    original: Any,
    current: Any,
    bench: dict[str, Any],
    gates: dict[str, Any],
    seed: int,
    store: Path | None = None,
) -> tuple[ParityReport, dict[str, float | None], str | None, Any]:
    """Teacher-forced parity of ``current`` on the original's greedy continuation; returns
    the report, the metrics (``cosine_drop`` from the teacher-forced logits), the gate's
    reason to fail (None: passed) and the baseline to time with. ``store``: the file the
    continuation is kept in for the search's other trials (``continuation_file``)."""
    from accel.generate.decoders import decoder_for
    from accel.generate.evaluate import generation_baseline, weights_bytes
    from accel.generate.parity import compare_generation_parity

    base = generation_baseline(original, {**bench, "rounds": 1}, seed, timed=False, store=store)
    max_drop = gates.get("max_cosine_drop")
    tol = Tolerances(
        rtol=float(gates.get("rtol", 1e-3)),
        atol=float(gates.get("atol", 1e-4)),
        min_cosine=None if max_drop is None else 1.0 - float(max_drop),
    )
    decoder = decoder_for(current, base.settings.total_tokens)
    parity = compare_generation_parity(base.tokens, base.logits, decoder, base.prompt, tol)
    cos = parity.report.worst().get("min_cosine")
    metrics: dict[str, float | None] = {
        **parity.metrics(),
        "cosine_drop": None if cos is None else max(0.0, 1.0 - float(cos)),
        "max_abs": parity.report.worst().get("max_abs"),
        "size_bytes": float(weights_bytes(current)),
    }
    reason = None if parity.passed else f"parity: {parity.report.first_failure}"
    return parity.report, metrics, reason, base


# New tokens a trial's rounds generate; tokens/s is projected from their TTFT and TPOT to the
# benchmark's ``new_tokens`` (accel.generate.timing.compare_generation). Decoding dominates a
# round (an eager fp32 1B decoder: about 0.3 s a token on two cores, so 64 tokens a side and
# four rounds made the first trial alone outlast a 15-minute budget); TPOT hardly moves with
# the 48 positions of KV cache the shorter rounds leave out (the prompt's 128 dominate).
TRIAL_TIMED_TOKENS = 16


def continuation_file(cache_dir: Path, model_hash: str, bench: dict[str, Any], seed: int) -> Path:
    """Where the search's trials keep the original's reference continuation: one file per
    model content, generation settings, threads and seed, in the search's cache folder."""
    import hashlib
    import json

    from accel.generate.settings import GenerateSettings

    settings = GenerateSettings.from_bench(bench)
    key = json.dumps(
        [
            model_hash,
            settings.prompt_tokens,
            settings.new_tokens,
            settings.batch,
            bench.get("threads"),
            seed,
        ],
        default=str,
    )
    return cache_dir / "generation" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.pt"


def time_against(
    base: Any, current: Any, bench: dict[str, Any], cancel: Any
) -> tuple[dict[str, float | None], StepTiming]:
    """Both models generating in alternating rounds: TTFT, TPOT, tokens/s and the ratios,
    and the row's StepTiming (speedup: the tokens/s ratio). Rounds generate
    TRIAL_TIMED_TOKENS (projected to the benchmark's new tokens); a reference decoder warm
    from the gate's continuation gets no warm-up round."""
    from accel.generate.decoders import decoder_for
    from accel.generate.evaluate import rounds_of
    from accel.generate.step_timing import comparison_timing
    from accel.generate.timing import compare_generation

    decoder = decoder_for(current, base.settings.total_tokens)
    cmp = compare_generation(
        base.decoder,
        decoder,
        base.prompt,
        base.settings.new_tokens,
        rounds_of(bench),
        cancel=cancel,
        timed_tokens=TRIAL_TIMED_TOKENS,
        reference_warm=base.warm,
    )
    return cmp.metrics(), comparison_timing(cmp)
