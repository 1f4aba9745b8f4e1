"""``ort_genai``: a Hugging Face causal LM built into an ONNX Runtime GenAI model folder by ONNX
Runtime GenAI's model builder (accel/passes/_ort_genai_build.py says how), offline.

The folder's ``model.onnx`` carries the KV cache as past/present tensors (GroupQueryAttention)
and, at int4 / int8, weight-only MatMulNBits weights (``block_size`` weights per scale;
``accuracy_level`` is the lowest precision MatMulNBits may compute in: 4 = int8 activations,
the CPU's fastest, 1 = fp32). The model then generates through ``og.Generator``
(accel/runtimes/ort_genai), which keeps the cache. The builder insists on a tokenizer: the
pass trains a small byte-level BPE on the Python standard library's sources and saves it in
the folder; the studio never uses it (prompts are token ids, every figure comes from ids and
logits).
"""

from __future__ import annotations

import hashlib
import inspect
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.errors import NotApplicable, PassError
from accel.models.forms import EAGER
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


class OrtGenaiConfig(PassConfig):
    precision: Literal["int4", "int8", "fp32"] = Field(
        "int4",
        description="weights: int4 / int8 weight-only (MatMulNBits, per block of weights) or "
        "fp32 (exact)",
    )
    block_size: Literal[16, 32, 64, 128, 256] = Field(
        32, description="int4/int8: weights sharing one scale (smaller: closer, larger file)"
    )
    accuracy_level: Literal[1, 2, 3, 4] = Field(
        4,
        description="int4/int8: the lowest precision MatMulNBits computes in: 4 = int8 "
        "activations (fastest on CPUs), 3 = bf16, 2 = fp16, 1 = fp32",
    )
    quantize_embedding: bool = Field(
        True,
        description="int4: the token embedding too (GatherBlockQuantized): much smaller "
        "weights where the vocabulary is large (hf:llama_small int4: 0.16x fp32 with it, 0.47x "
        "without), the embedding's rows rounded like the weights; at int8 the builder "
        "leaves the embedding in float either way (0.55x)",
    )


def genai_lm(module: Any) -> Any:
    """The Hugging Face causal LM in ``module`` if the model builder knows its architecture;
    NotApplicable naming the failed check otherwise."""
    from accel.passes._ort_genai_build import BUILDER_ARCHITECTURES

    inner = getattr(module, "_orig_mod", module)
    config = getattr(inner, "config", None)
    forward = getattr(inner, "forward", None)
    params = set(inspect.signature(forward).parameters) if callable(forward) else set()
    if config is None or getattr(inner, "generation_config", None) is None:
        raise NotApplicable(
            "ort_genai needs a Hugging Face causal language model (a config and a generation "
            "config); this model has none"
        )
    if not params & {"cache", "past_key_values"} or not hasattr(inner, "save_pretrained"):
        raise NotApplicable(
            "ort_genai needs a Hugging Face causal LM with a KV cache argument in forward and "
            "save_pretrained; this model has neither"
        )
    arch = type(inner).__name__
    if arch not in BUILDER_ARCHITECTURES:
        raise NotApplicable(
            f"ort_genai: ONNX Runtime GenAI's model builder does not know {arch} (it builds "
            f"{', '.join(BUILDER_ARCHITECTURES[:8])}, ...); use openvino_stateful"
        )
    return inner


def folder_stats(files: list[Path]) -> tuple[int, str]:
    """(bytes, sha256) of the model's files."""
    h = hashlib.sha256()
    total = 0
    for f in files:
        total += f.stat().st_size
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return total, h.hexdigest()


def _build(lm: Any, config: OrtGenaiConfig, ctx: PassContext) -> Path:
    """Save the LM, run the builder; the model folder (the LM's copy and caches removed)."""
    from accel.passes import _ort_genai_build as b

    hf_dir, out, cache = ctx.work_dir / "hf_model", ctx.work_dir / "genai", ctx.work_dir / "cache"
    ctx.progress(0.05, "saving the LM and training a tokenizer for the model builder")
    b.save_hf_folder(lm, hf_dir)
    ctx.check_cancelled()
    ctx.progress(0.3, f"building the ONNX Runtime GenAI model ({config.precision})")
    options = b.builder_options(
        config.precision, config.block_size, config.accuracy_level, config.quantize_embedding
    )
    t0 = time.perf_counter()
    try:
        b.build_genai(str(hf_dir), str(out), str(cache), config.precision, options)
    except RuntimeError as exc:
        raise PassError(f"ort_genai: ONNX Runtime GenAI's model builder failed: {exc}") from None
    finally:
        shutil.rmtree(hf_dir, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    ctx.metrics["convert_time_s"] = time.perf_counter() - t0
    ctx.check_cancelled()
    return out


@register_pass
class OrtGenaiPass(Pass):
    name = "ort_genai"
    summary = (
        "Decoder LM to an ONNX Runtime GenAI model (its model builder, offline): int4/int8 "
        "MatMulNBits weights, the KV cache held by og.Generator; fast CPU generation."
    )
    category = "runtime"
    Config = OrtGenaiConfig
    requires = Requirements(
        model_kinds=("torch",),
        libraries=("onnxruntime_genai",),
        note="Hugging Face causal LMs the model builder knows (Llama, Qwen, Phi, Gemma, "
        "Mistral, ...); CPU; generation workloads",
        accepts=(EAGER,),
    )
    output_kind = "ort_genai"
    keeps_kv_cache = True
    search = SearchSpec(
        stage=STAGE_LOWER,
        params={"precision": Choice(("int4", "int8")), "block_size": Choice((32, 128))},
        devices=("cpu",),
        when=("attention",),
        exportable=False,
    )

    def preflight(self, model: LoadedModel, config: OrtGenaiConfig) -> None:
        genai_lm(model.module)

    def apply(self, model: LoadedModel, config: OrtGenaiConfig, ctx: PassContext) -> LoadedModel:
        from accel.runtimes.ort_genai.decoder import model_files

        lm = genai_lm(model.module)
        if str(ctx.device).startswith("cuda"):
            raise PassError(
                "ort_genai builds for the CPU execution provider; set the device to cpu"
            )
        out = _build(lm, config, ctx)
        files = model_files(out)
        size, digest = folder_stats(files)
        ctx.add_artifact(out, "ort_genai_folder")
        new = model.replace(
            kind="ort_genai",
            module=None,
            onnx_path=None,
            runtime_file=out,
            providers=None,
            input_casts={},
            size_bytes=size,
            content_hash=digest,
            format=f"ort_genai_{config.precision}",
            session_options={},
            channels_last_inputs=False,
        )
        ctx.progress(0.85, "loading the model into ONNX Runtime GenAI")
        t0 = time.perf_counter()
        new.session()
        ctx.metrics["compile_time_s"] = time.perf_counter() - t0
        ctx.details["precision"] = config.precision
        return new

    def to_script(self, config: OrtGenaiConfig) -> ScriptStep:
        from accel.passes import _ort_genai_build as b

        options = b.builder_options(
            config.precision, config.block_size, config.accuracy_level, config.quantize_embedding
        )
        lines = [
            "if kind != 'torch':",
            "    raise SystemExit('ort_genai builds from the torch model: put it first')",
            "genai_hf = step_dir / 'hf_model'",
            "save_hf_folder(getattr(model, '_orig_mod', model), genai_hf)",
            "genai_dir = step_dir / 'genai'",
            f"build_genai(str(genai_hf), str(genai_dir), str(step_dir / 'cache'), "
            f"{config.precision!r}, {options!r})",
            "og.disable_telemetry_events()",
            "_og_config = og.Config(str(genai_dir))",
            "_og_config.clear_providers()",
            "if THREADS:",
            "    _og_config.overlay(json.dumps({'model': {'decoder': {'session_options': "
            "{'intra_op_num_threads': THREADS}}}}))",
            "compiled = og.Model(_og_config)  # generation: og.Generator on it",
            "_genai = json.loads((genai_dir / 'genai_config.json').read_text())['model']['decoder']",
            "GENAI_HEAD_SIZE = int(_genai['head_size'])",
            "_so = ort.SessionOptions()",
            "if THREADS:",
            "    _so.intra_op_num_threads = THREADS",
            "session = ort.InferenceSession(str(genai_dir / _genai['filename']), _so, "
            "providers=['CPUExecutionProvider'])  # the plain forward",
            'kind, model, request, input_casts = "ort_genai", None, None, {}',
        ]
        sources = [inspect.getsource(f) for f in (b.train_tokenizer, b.save_hf_folder)]
        sources.append(inspect.getsource(b.build_genai))
        return ScriptStep(
            code="\n".join(lines),
            imports=[
                "import json",
                "import onnxruntime as ort",
                "import onnxruntime_genai as og",
                "from typing import Any",
            ],
            helpers=sources,
        )
