"""``openvino_stateful``: a Hugging Face causal LM as a stateful OpenVINO IR, its KV cache in
the infer request's state (accel/passes/_lm_stateful.py says how it is built).

A plain ``openvino`` export of a decoder has no cache inputs, so each generated token costs a
prefill; this one keeps the cache in the request: the prefill feeds the prompt once, each
decode step one token. ``kv_cache_precision`` is the CPU plugin's KV_CACHE_PRECISION (u8
and u4 quantize the cached keys and values per token; f16 / bf16 / f32 keep them in float).
``compress_weights_openvino`` (NNCF int8 / int4 weights) applies on top and keeps the state.
"""

from __future__ import annotations

import inspect
import time
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.errors import NotApplicable, PassError
from accel.models.forms import EAGER
from accel.passes._openvino_helpers import (
    OV_PRECISION_HELPER,
    compile_options,
    finish_ov_step,
    root_logging_kept,
)
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
from accel.runtimes.openvino.known_crashes import script_helpers as crash_free_helpers
from accel.runtimes.openvino.stateful import STATEFUL_FORM

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

KV_CACHE_PRECISIONS = ("u8", "u4", "f16", "bf16", "f32")


class OpenVinoStatefulConfig(PassConfig):
    precision: Literal["auto", "f32", "bf16"] = Field(
        "auto",
        description="inference precision hint: auto is bf16 on a CPU with bf16 matrix kernels "
        "(AMX or AVX-512 BF16) and f32 elsewhere; bf16 without them falls back to f32",
    )
    kv_cache_precision: Literal["u8", "u4", "f16", "bf16", "f32"] = Field(
        "u8",
        description="precision of the cached keys and values (the CPU plugin's "
        "KV_CACHE_PRECISION): u8 (OpenVINO's CPU default) and u4 are quantized per token, "
        "f16 / bf16 / f32 stay float (f32: exact)",
    )
    pipeline: Literal["infer_request", "genai"] = Field(
        "infer_request",
        description="how the IR generates: infer_request (the studio drives the request one "
        "token at a time) or genai (OpenVINO GenAI's LLMPipeline, token ids in, batch 1; "
        "teacher-forced parity still runs the same IR through the infer request, since the "
        "pipeline returns no logits)",
    )
    attention: Literal["sdpa", "paged"] = Field(
        "sdpa",
        description="pipeline genai: the pipeline's attention backend: sdpa keeps the IR's "
        "attention and state; paged rewrites it to paged attention with a block KV cache "
        "(OpenVINO GenAI's continuous-batching form; teacher-forced parity runs the IR "
        "through the infer request, so it does not cover the paged cache: only the free-"
        "running agreement does)",
    )


def causal_lm(module: Any) -> Any:
    """The Hugging Face causal LM in ``module``; NotApplicable (naming the check) when it is
    not one with a KV cache this export can carry."""
    inner = getattr(module, "_orig_mod", module)
    config = getattr(inner, "config", None)
    gen = getattr(inner, "generation_config", None)
    forward = getattr(inner, "forward", None)
    params = set(inspect.signature(forward).parameters) if callable(forward) else set()
    if config is None or gen is None or not params & {"cache", "past_key_values"}:
        raise NotApplicable(
            "openvino_stateful needs a Hugging Face causal language model (a generation config "
            "and a KV cache argument in forward); this model has none. Use the openvino pass."
        )
    if getattr(config, "is_encoder_decoder", False):
        raise NotApplicable(
            "openvino_stateful exports decoder-only LMs; this model is an encoder-decoder"
        )
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        raise NotApplicable(
            "openvino_stateful: the model has sliding-window or other non-full attention "
            "layers (config.layer_types), whose cache this export does not carry"
        )
    if not all(isinstance(getattr(config, a, None), int) for a in ("num_hidden_layers",)):
        raise NotApplicable("openvino_stateful: the model's config has no num_hidden_layers")
    return inner


def _convert(lm: Any, ctx: PassContext) -> Any:
    from accel.passes._lm_stateful import lm_to_openvino, make_ir_stateful
    from accel.runtimes.openvino.stateful import tag_lm_facts

    try:
        with root_logging_kept():
            ov_model, past, present = lm_to_openvino(lm)
            ctx.details["state_variables"] = len(past)
            stateful = make_ir_stateful(ov_model, past, present)
            tag_lm_facts(stateful, getattr(lm, "config", None))
            return stateful
    except Exception as exc:  # tracing and OpenVINO's frontend raise many kinds
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        useful = [ln for ln in lines if not ln.startswith(("Check '", "FrontEnd API failed"))]
        first = (useful or lines or [""])[0][:300]
        raise PassError(
            f"openvino_stateful: converting {type(lm).__name__} with its KV cache failed: "
            f"{type(exc).__name__}: {first}. The openvino pass converts it without a cache."
        ) from None


def _check_genai(config: OpenVinoStatefulConfig) -> None:
    from accel.runtimes.openvino.genai import pipeline_unavailable

    reason = pipeline_unavailable()
    if reason:
        raise NotApplicable(f"openvino_stateful pipeline genai: {reason}")


def _try_pipeline(model: LoadedModel, ctx: PassContext) -> None:
    """Build the LLMPipeline once (then drop it): a pipeline that cannot take this IR is
    refused here, with OpenVINO GenAI's reason, not at the first generation."""
    from pathlib import Path

    from accel.runtimes.openvino.genai import pipeline_for

    ctx.progress(0.8, "checking that OpenVINO GenAI's LLMPipeline takes the IR")
    t0 = time.perf_counter()
    try:
        pipeline_for(Path(model.runtime_file), dict(model.session_options))
    except Exception as exc:  # noqa: BLE001 - the pipeline's C++ errors are RuntimeErrors
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        raise PassError(
            f"openvino_stateful: OpenVINO GenAI's LLMPipeline refused the IR: {first[:300]}. "
            "Use pipeline: infer_request"
        ) from None
    ctx.metrics["pipeline_build_time_s"] = time.perf_counter() - t0


@register_pass
class OpenVinoStatefulPass(Pass):
    name = "openvino_stateful"
    summary = (
        "Decoder LM to a stateful OpenVINO IR: the KV cache lives in the infer request "
        "(KV-cache precision u8/u4/f16/bf16/f32); fast CPU generation, int4 weights on top."
    )
    category = "runtime"
    Config = OpenVinoStatefulConfig
    requires = Requirements(
        model_kinds=("torch",),
        libraries=("openvino",),
        note="Hugging Face causal LMs (full attention); CPU; generation workloads",
        accepts=(EAGER,),
        produces=STATEFUL_FORM,
    )
    output_kind = "openvino"
    keeps_kv_cache = True
    search = SearchSpec(
        stage=STAGE_LOWER,
        params={
            "precision": Choice(("auto", "f32")),
            "kv_cache_precision": Choice(("u8", "f16")),
            # the paged backend is not searched: its KV cache is not the IR's, so the
            # teacher-forced parity (through the infer request) would not cover it
            "pipeline": Choice(("infer_request", "genai")),
        },
        devices=("cpu",),
        when=("attention",),
        exportable=False,
    )

    def preflight(self, model: LoadedModel, config: OpenVinoStatefulConfig) -> None:
        causal_lm(model.module)
        if config.pipeline == "genai":
            _check_genai(config)

    def apply(
        self, model: LoadedModel, config: OpenVinoStatefulConfig, ctx: PassContext
    ) -> LoadedModel:
        from accel.runtimes.openvino.ir import bf16_supported
        from accel.runtimes.openvino.stateful import kv_precision_of

        lm = causal_lm(model.module)
        if config.kv_cache_precision == "bf16" and not bf16_supported("CPU"):
            raise PassError(
                "openvino_stateful: kv_cache_precision bf16 needs a CPU with bf16 support "
                "(AVX-512 BF16 / AMX); use f16 or u8"
            )
        options = compile_options("CPU", config.precision, "latency", None, ctx)
        options["kv_cache_precision"] = config.kv_cache_precision
        if config.pipeline == "genai":
            _check_genai(config)
            options.update(pipeline="genai", attention=config.attention)
        ctx.progress(0.1, "converting the LM with its KV cache to OpenVINO")
        t0 = time.perf_counter()
        ov_model = _convert(lm, ctx)
        ctx.metrics["convert_time_s"] = time.perf_counter() - t0
        ctx.details["attn_implementation"] = str(getattr(lm.config, "_attn_implementation", ""))
        ctx.check_cancelled()
        ctx.progress(0.6, "saving and compiling the stateful IR")
        new = finish_ov_step(model, ov_model, ctx, options, "openvino_ir_stateful")
        ctx.details["kv_cache_precision_ran"] = kv_precision_of(new.session()[0])
        if config.pipeline == "genai":
            _try_pipeline(new, ctx)
        return new

    def to_script(self, config: OpenVinoStatefulConfig) -> ScriptStep:
        from accel.passes import _lm_stateful as lms

        lines = [
            "if kind != 'torch':",
            "    raise SystemExit('openvino_stateful converts the torch model: put it first')",
            "ov_model, _past, _present = lm_to_openvino(getattr(model, '_orig_mod', model))",
            "ov_model = make_ir_stateful(ov_model, _past, _present)",
            'ov_path = step_dir / "model.xml"',
            "ov.save_model(ov_model, str(ov_path), compress_to_fp16=False)",
            "ov_config = {",
            '    "PERFORMANCE_HINT": "LATENCY",',
            f'    "INFERENCE_PRECISION_HINT": ov_precision({config.precision!r}, "CPU"),',
            f'    "KV_CACHE_PRECISION": {config.kv_cache_precision!r},',
            "}",
            "if THREADS:",
            '    ov_config["INFERENCE_NUM_THREADS"] = THREADS',
            f"ov_config = ov_crash_free(ov_model, ov_config, {config.precision!r})",
            "compiled = ov.Core().compile_model(ov.Core().read_model(str(ov_path)), 'CPU', ov_config)",
            "request = compiled.create_infer_request()",
            'kind, model, session, input_casts = "openvino", None, None, {}',
        ]
        helpers = [OV_PRECISION_HELPER, *crash_free_helpers()]
        imports = ["import openvino as ov", "from typing import Any"]
        if config.pipeline == "genai":
            from accel.runtimes.openvino import genai

            backend = genai.ATTENTION_BACKENDS[config.attention]
            lines += [
                "# OpenVINO GenAI's LLMPipeline generates (token ids in, batch 1); teacher-",
                "# forced parity runs the same IR through `request` (the pipeline has no logits).",
                f"ov_genai_attention = {backend!r}",
                "ov_pipe = ov_pipeline(ov_path, ov_config, ov_genai_attention)",
            ]
            helpers.append(inspect.getsource(genai._link_or_copy))
            helpers.append(
                f"EOS_PLACEHOLDER, PAGED_CACHE_GB, PAGED_MAX_BATCHED_TOKENS = "
                f"{genai.EOS_PLACEHOLDER!r}, {genai.PAGED_CACHE_GB!r}, "
                f"{genai.PAGED_MAX_BATCHED_TOKENS!r}"
            )
            helpers.append(OV_PIPELINE_HELPER)
            imports += ["import os", "import shutil", "import tempfile"]
        trace = f"TRACE_BATCH, TRACE_PAST, TRACE_NEW = {lms.TRACE_BATCH!r}, {lms.TRACE_PAST!r}, {lms.TRACE_NEW!r}"
        sources = [inspect.getsource(f) for f in (lms.kv_shape, lms.flat_cache_lm)]
        sources += [inspect.getsource(f) for f in (lms.lm_to_openvino, lms.make_ir_stateful)]
        return ScriptStep(
            code="\n".join(lines), imports=imports, helpers=[*helpers, trace, *sources]
        )


OV_PIPELINE_HELPER = '''
def ov_pipeline(ov_path, ov_config, attention):
    """OpenVINO GenAI's LLMPipeline of the IR (no tokenizer: token ids in)."""
    import openvino_genai

    folder = Path(tempfile.mkdtemp(prefix="ov-genai-"))
    try:
        _link_or_copy(Path(ov_path), folder / "openvino_model.xml")
        _link_or_copy(Path(ov_path).with_suffix(".bin"), folder / "openvino_model.bin")
        extra = {}
        if attention == "PA":  # no prefix caching: a repeated prompt would skip its prefill
            sc = openvino_genai.SchedulerConfig()
            sc.enable_prefix_caching = False
            sc.cache_size, sc.max_num_batched_tokens = PAGED_CACHE_GB, PAGED_MAX_BATCHED_TOKENS
            extra["scheduler_config"] = sc
        return openvino_genai.LLMPipeline(
            str(folder), "CPU", **ov_config, ATTENTION_BACKEND=attention, **extra
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def ov_pipeline_generate(pipe, prompt, n):
    """Greedy, exactly n tokens through the pipeline: (tokens [1, n], start, clock per token)."""
    import openvino_genai

    if prompt.shape[0] != 1:
        raise SystemExit("OpenVINO GenAI's LLMPipeline streams batch 1 only")
    times = []

    class Clocked(openvino_genai.StreamerBase):
        def write(self, token):
            times.extend([time.perf_counter()] * (len(token) if isinstance(token, list) else 1))
            return openvino_genai.StreamingStatus.RUNNING

        def end(self):
            pass

    cfg = pipe.get_generation_config()
    cfg.do_sample, cfg.num_beams, cfg.ignore_eos = False, 1, True
    cfg.max_new_tokens = cfg.min_new_tokens = n
    cfg.eos_token_id, cfg.stop_token_ids = EOS_PLACEHOLDER, {EOS_PLACEHOLDER}
    ids = np.ascontiguousarray(prompt.numpy(), dtype=np.int64)
    inputs = openvino_genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
    start = time.perf_counter()
    result = pipe.generate(inputs, cfg, Clocked())
    return torch.tensor([list(result.tokens[0])]), start, times
'''
