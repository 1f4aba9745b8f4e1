"""Static KV cache with torch.compile: the decode step of a Hugging Face causal LM compiled
once for fixed shapes.

A dynamic KV cache grows by one position per token, so every decode step has new shapes and
a compiled graph would recompile (or fall back to Python). With a static cache (preallocated
to the generation's full length, ``generation_config.cache_implementation = "static"``, as
transformers' ``generate`` reads it) the decode step's shapes never change: Dynamo captures
it once, the backend generates its code once, and each token replays it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from accel.models.forms import COMPILED, EAGER
from accel.passes.base import (
    STAGE_LOWER,
    Choice,
    Pass,
    PassConfig,
    PassContext,
    Requirements,
    ScriptStep,
    SearchSpec,
    register_pass,
)

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

WARMUP_TOKENS = 3  # compile the prefill and the decode step on a short generation


class StaticKvCacheConfig(PassConfig):
    compile: bool = Field(
        True, description="torch.compile the model (false: only switch to the static cache)"
    )
    backend: Literal["inductor", "aot_eager", "eager"] = Field(
        "inductor", description="torch.compile backend (eager: capture only, to check graphs)"
    )
    mode: Literal["default", "max-autotune-no-cudagraphs", "reduce-overhead"] = Field(
        "default",
        description="inductor mode: reduce-overhead replays CUDA graphs (GPU only)",
    )


def _lm(module: object) -> object:
    """The Hugging Face model inside (through a compile wrapper), with its forward's cache
    argument; PassError when it is not a causal LM with a KV cache."""
    import inspect

    from accel.errors import NotApplicable

    inner = getattr(module, "_orig_mod", module)
    config = getattr(inner, "config", None)
    gen = getattr(inner, "generation_config", None)
    params = (
        set(inspect.signature(inner.forward).parameters) if hasattr(inner, "forward") else set()
    )
    if config is None or gen is None or not params & {"cache", "past_key_values"}:
        raise NotApplicable(
            "static_kv_cache needs a Hugging Face causal language model (a generation config "
            "and a KV cache argument); this model has none. Use the compile pass instead."
        )
    if getattr(config, "is_encoder_decoder", False):
        raise NotApplicable(
            f"static_kv_cache compiles decoder-only generation (input_ids in, one token per "
            f"step); {type(inner).__name__} is an encoder-decoder, whose decoder needs "
            "decoder_input_ids. Use the compile pass instead."
        )
    if not getattr(inner, "_can_compile_fullgraph", True):
        raise NotApplicable(
            f"static_kv_cache: {type(inner).__name__} does not support a static cache "
            "(transformers marks it not compilable); use the compile pass instead"
        )
    return inner


@register_pass
class StaticKvCache(Pass):
    name = "static_kv_cache"
    search = SearchSpec(
        stage=STAGE_LOWER,
        params={"mode": Choice(("default", "max-autotune-no-cudagraphs"))},
        when=("attention",),
    )
    summary = (
        "Static KV cache + torch.compile for decoder LMs: the decode step compiled once for "
        "fixed shapes (generation workloads)."
    )
    category = "compile"
    Config = StaticKvCacheConfig
    # a forward call is a plain compile's (that is the compile pass), and building the trial
    # compiles prefill and decode: a 1-thread decoder-prefill latency search spent 200 s of
    # its 900 on one such chain (0.04x)
    speeds_generation_only = True
    requires = Requirements(
        model_kinds=("torch",),
        note="Hugging Face causal LMs; inductor needs a C++ compiler; first generation compiles",
        accepts=(EAGER,),
        produces=COMPILED,
    )

    def apply(
        self, model: LoadedModel, config: StaticKvCacheConfig, ctx: PassContext
    ) -> LoadedModel:
        import torch

        from accel.errors import PassError

        inner = _lm(model.module)
        if config.mode == "reduce-overhead" and not str(ctx.device).startswith("cuda"):
            raise PassError(
                "static_kv_cache: mode reduce-overhead replays CUDA graphs; on CPU use default"
            )
        inner.generation_config.cache_implementation = "static"
        ctx.details["cache_implementation"] = "static"
        if not config.compile:
            return model
        compiled = torch.compile(
            inner,
            backend=config.backend,
            mode=None if config.mode == "default" else config.mode,
            dynamic=False,
        )
        new = model.replace(module=compiled, metadata={**model.metadata, "compiled": True})
        ctx.details.update(backend=config.backend, mode=config.mode)
        ctx.progress(0.2, f"compiling prefill and decode ({config.backend})")
        t0 = time.perf_counter()
        try:
            _warm(new, ctx)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PassError(
                f"static_kv_cache: torch.compile ({config.backend}) failed: "
                f"{type(exc).__name__}: {first}. Try backend: eager to see whether capture fails."
            ) from None
        ctx.metrics["compile_time_s"] = time.perf_counter() - t0
        ctx.details["compile_time_s"] = round(ctx.metrics["compile_time_s"], 3)
        return new

    def to_script(self, config: StaticKvCacheConfig) -> ScriptStep:
        code = 'model.generation_config.cache_implementation = "static"\n'
        if config.compile:
            mode = "" if config.mode == "default" else f", mode={config.mode!r}"
            code += (
                f"model = torch.compile(model, backend={config.backend!r}{mode}, dynamic=False)\n"
                "# The first call compiles; time it apart from the latency.\n"
                "t0 = time.perf_counter()\n"
                "run(inputs)\n"
                "print(f'    compile time {time.perf_counter() - t0:.2f} s')\n"
            )
        return ScriptStep(code=code)


def _warm(model: LoadedModel, ctx: PassContext) -> None:
    """A short greedy generation from the run's first input (compiles prefill and decode),
    then the plain forward the forward workload times."""
    from accel.generate.decoders import CacheDecoder
    from accel.generate.timing import time_generation

    ids = next(iter(model.prepare_inputs(ctx.inputs).values()))
    decoder = CacheDecoder(model.module, int(ids.shape[1]) + WARMUP_TOKENS, device=model.device)
    time_generation(decoder, ids, WARMUP_TOKENS)
    model.forward(ctx.inputs)
