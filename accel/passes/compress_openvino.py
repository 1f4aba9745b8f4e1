"""Weight-only compression of an OpenVINO model (NNCF ``compress_weights``): int8 or int4
weights of the MatMul / embedding constants, activations stay float. The decoder LMs'
memory-bound decode step reads every weight once per token, so smaller weights are faster
tokens; no calibration data is needed (data-free)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from accel.errors import PassError
from accel.passes._openvino_helpers import finish_ov_step
from accel.passes.base import (
    STAGE_RUNTIME_NUMERIC,
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

MODES = ("int8_asym", "int8_sym", "int4_sym", "int4_asym")


class CompressWeightsConfig(PassConfig):
    mode: Literal["int8_asym", "int8_sym", "int4_sym", "int4_asym"] = Field(
        "int4_sym", description="weight format: int8 (per channel) or int4 (grouped) sym/asym"
    )
    group_size: int = Field(
        128,
        ge=-1,
        le=65536,
        description="int4: weights per scale along the input dim (-1: per channel); int8 "
        "modes are always per channel",
    )
    group_size_fallback: Literal["adjust", "error", "ignore"] = Field(
        "adjust",
        description="int4: a layer whose input size group_size does not divide gets the "
        "largest power-of-two group (>= 32) that does (adjust), stops the step (error) or "
        "stays in the int8 backup (ignore)",
    )
    ratio: float = Field(
        1.0,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="int4: share of the layers in int4, the rest in int8 (1.0: all int4)",
    )


def _kwargs(config: CompressWeightsConfig) -> dict[str, object]:
    if config.mode.startswith("int8"):
        return {}
    return {"group_size": config.group_size, "ratio": config.ratio}


def _advanced(config: CompressWeightsConfig) -> dict[str, object]:
    """NNCF's advanced parameters: the int4 group-size fallback."""
    if config.mode.startswith("int8"):
        return {}
    from nncf.quantization.advanced_parameters import (
        AdvancedCompressionParameters,
        GroupSizeFallbackMode,
    )

    mode = GroupSizeFallbackMode[config.group_size_fallback.upper()]
    return {"advanced_parameters": AdvancedCompressionParameters(group_size_fallback_mode=mode)}


@register_pass
class CompressWeightsOpenVino(Pass):
    name = "compress_weights_openvino"
    summary = (
        "Int8 or int4 weights of an OpenVINO model (NNCF compress_weights, data-free); "
        "shrinks weights, speeds memory-bound decoding."
    )
    category = "quantize"
    Config = CompressWeightsConfig
    requires = Requirements(
        model_kinds=("openvino",),
        libraries=("openvino", "nncf"),
        note="MatMul and embedding weights; group_size must divide the layers' input size",
    )
    search = SearchSpec(
        stage=STAGE_RUNTIME_NUMERIC,
        params={"mode": Choice(("int8_asym", "int4_sym")), "group_size": Choice((64, 128))},
        devices=("cpu",),
        exportable=False,
    )

    def apply(
        self, model: LoadedModel, config: CompressWeightsConfig, ctx: PassContext
    ) -> LoadedModel:
        import nncf

        from accel.runtimes.openvino.ir import read_ir

        ov_model = read_ir(model.runtime_file)
        mode = nncf.CompressWeightsMode[config.mode.upper()]
        ctx.details.update(mode=config.mode, **_kwargs(config))
        if not config.mode.startswith("int8"):
            ctx.details["group_size_fallback"] = config.group_size_fallback
        ctx.progress(0.1, f"compressing weights to {config.mode}")
        t0 = time.perf_counter()
        try:
            compressed = nncf.compress_weights(
                ov_model, mode=mode, **_kwargs(config), **_advanced(config)
            )
        except Exception as exc:  # NNCF raises many kinds; the first line says what failed
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise PassError(
                f"NNCF compress_weights failed: {type(exc).__name__}: {first}. Try another "
                "group_size (one that divides the layers' input size), group_size_fallback "
                "adjust, or mode int8_asym"
            ) from None
        ctx.metrics["compress_time_s"] = time.perf_counter() - t0
        ctx.check_cancelled()
        ctx.progress(0.8, "saving and compiling the compressed IR")
        before = model.size_bytes
        new = finish_ov_step(
            model, compressed, ctx, dict(model.session_options), f"openvino_ir_{config.mode}"
        )
        if before:
            ctx.metrics["size_ratio"] = new.size_bytes / before
        return new

    def to_script(self, config: CompressWeightsConfig) -> ScriptStep:
        kwargs = "".join(f", {k}={v!r}" for k, v in _kwargs(config).items())
        if not config.mode.startswith("int8"):
            kwargs += (
                ", advanced_parameters=AdvancedCompressionParameters(group_size_fallback_mode="
                f"GroupSizeFallbackMode.{config.group_size_fallback.upper()})"
            )
        lines = [
            "import nncf",
            "from nncf.quantization.advanced_parameters import (",
            "    AdvancedCompressionParameters, GroupSizeFallbackMode)",
            "ov_model = ov.Core().read_model(str(ov_path))",
            "ov_model = nncf.compress_weights(",
            f"    ov_model, mode=nncf.CompressWeightsMode.{config.mode.upper()}{kwargs}",
            ")",
            'ov_path = step_dir / "model.xml"',
            "ov.save_model(ov_model, str(ov_path), compress_to_fp16=False)",
            "compiled = ov.Core().compile_model(ov.Core().read_model(str(ov_path)), 'CPU', ov_config)",
            "request = compiled.create_infer_request()",
            "if globals().get('ov_pipe') is not None:  # OpenVINO GenAI's pipeline, on these weights",
            "    ov_pipe = ov_pipeline(ov_path, ov_config, ov_genai_attention)",
        ]
        return ScriptStep(code="\n".join(lines), imports=["import openvino as ov"])
