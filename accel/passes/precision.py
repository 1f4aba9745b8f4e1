"""Precision passes: fp16 / bf16 weights and compute, and autocast mixed precision."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from accel.layer_patterns import PATTERN_HELP
from accel.models.forms import COMPILED, EAGER, EXPORTED
from accel.passes.base import (
    KEEP_FLOAT,
    STAGE_NUMERIC,
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

log = logging.getLogger(__name__)


class LowPrecisionConfig(PassConfig):
    keep_norm_fp32: bool = Field(
        True,
        description="keep normalization layers (BatchNorm, LayerNorm, GroupNorm...) in float32",
    )
    keep_last_fp32: bool = Field(
        False, description="keep the last layer (the classifier head) in float32"
    )
    keep: list[str] = Field(
        default_factory=list, description=f"more layers kept in float32: {PATTERN_HELP}"
    )


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _warn_cpu_speed(dtype: str, ctx: PassContext) -> None:
    """Low precision on CPU is often slower than float32; say so before the user wonders why."""
    if str(ctx.device).startswith("cuda"):
        return
    flags = _cpu_flags()
    if dtype == "float16" and not ({"avx512_fp16", "amx_fp16"} & flags):
        ctx.warn(
            "float16 on this CPU has no native kernels (no AVX512-FP16/AMX-FP16): matmuls and convs are "
            "emulated and usually slower than float32. Use bf16 on CPU, or run on a CUDA GPU."
        )
    elif dtype == "bfloat16" and not ({"avx512_bf16", "amx_bf16"} & flags):
        ctx.warn(
            "this CPU has no native bfloat16 instructions (AVX512-BF16/AMX): bf16 will save memory "
            "but likely run slower than float32."
        )


def _float_input_casts(model: LoadedModel, dtype: str) -> dict[str, str]:
    from accel.models.inputs import is_floating

    casts = dict(model.input_casts)
    for t in model.input_spec.inputs:
        if is_floating(t.dtype):  # integer inputs (token ids) stay as they are
            casts[t.name] = dtype
    return casts


def _has_low_precision_weights(module) -> bool:
    import torch

    try:
        return any(p.dtype in (torch.float16, torch.bfloat16) for p in module.parameters())
    except Exception:  # noqa: BLE001 - modules without parameters() (scripted oddities)
        return False


def _check_keep(pass_name: str, module, patterns: list[str]) -> None:
    """A keep pattern that selects no layer is a typo: say so before converting."""
    from accel.errors import PassError
    from accel.layer_patterns import match, unmatched_message

    layers = [(n, type(m).__name__) for n, m in module.named_modules() if n]
    _, unmatched = match(layers, patterns)
    if unmatched:
        names = [n for n, _ in layers]
        raise PassError(f"{pass_name}: " + unmatched_message(unmatched, names, "keep pattern(s)"))


class _LowPrecision(Pass):
    dtype: str = "float32"
    category = "precision"
    Config = LowPrecisionConfig
    requires = Requirements(
        model_kinds=("torch",),
        accepts=(EAGER,),
        layer_lists={"keep": KEEP_FLOAT},
        keeps_layer_names=True,
    )

    def apply(
        self, model: LoadedModel, config: LowPrecisionConfig, ctx: PassContext
    ) -> LoadedModel:
        import torch

        from accel.errors import PassError
        from accel.models.sources import torch_stats
        from accel.passes._torch_helpers import to_low_precision

        module = model.module
        if isinstance(module, torch.jit.ScriptModule):
            raise PassError(
                f"{self.name} cannot convert a TorchScript module; put {self.name} before torchscript."
            )
        if type(module).__name__ == "OptimizedModule":
            raise PassError(
                f"{self.name} cannot convert a torch.compile'd model; put {self.name} before compile."
            )
        if model.metadata.get("exported_program"):
            raise PassError(
                f"{self.name} cannot convert a torch.export program; put {self.name} before torch_export."
            )
        floats = [p for p in module.parameters() if p.is_floating_point()]
        if not floats:
            raise PassError(
                f"{self.name}: the model has no floating-point weights to convert (already quantized?)."
            )
        _check_keep(self.name, module, config.keep)
        _warn_cpu_speed(self.dtype, ctx)
        kept = to_low_precision(
            module,
            getattr(torch, self.dtype),
            keep_norm_fp32=config.keep_norm_fp32,
            keep_last_fp32=config.keep_last_fp32,
            keep=tuple(config.keep),
        )
        n_params, size, digest = torch_stats(module)
        ctx.details["dtype"] = self.dtype
        ctx.details["kept_fp32"] = kept
        casts = _float_input_casts(model, self.dtype)
        ctx.details["input_casts"] = casts
        converted = model.replace(
            module=module,
            input_casts=casts,
            num_params=n_params,
            size_bytes=size,
            content_hash=digest,
        )
        self._check_runs(converted, ctx)
        return converted

    def _check_runs(self, converted: LoadedModel, ctx: PassContext) -> None:
        """One forward in the new dtype: an op with no kernel for it here (torchvision's nms on
        CPU has none for half types) fails now with what to do, not later in the parity check."""
        import torch

        from accel.errors import PassError

        if not ctx.inputs:
            return
        try:
            with torch.no_grad():
                converted.forward(ctx.inputs)
        except Exception as exc:  # noqa: BLE001 - any failure means the model does not run
            first = (str(exc).strip().splitlines() or [""])[-1][:300]
            raise PassError(
                f"the model does not run in {self.dtype} on {ctx.device}: {type(exc).__name__}: "
                f"{first}. An op it calls has no {self.dtype} kernel here (e.g. torchvision's nms "
                "on CPU); use autocast instead (it runs such ops in float32)."
            ) from None

    def to_script(self, config: LowPrecisionConfig) -> ScriptStep:
        from accel.passes._torch_helpers import (
            KeepFloat32,
            layer_matches,
            source_of,
            to_low_precision,
        )

        keep = f", keep={tuple(config.keep)!r}" if config.keep else ""
        code = (
            f"kept = to_low_precision(model, torch.{self.dtype}, keep_norm_fp32={config.keep_norm_fp32}, "
            f"keep_last_fp32={config.keep_last_fp32}{keep})\n"
            "print('    kept in float32:', ', '.join(kept) or 'none')\n"
            "# Floating inputs are cast to the model's dtype; integer inputs (token ids) stay as they are.\n"
            f"input_casts.update({{name: torch.{self.dtype} for name, x in inputs.items() if x.is_floating_point()}})\n"
        )
        return ScriptStep(
            code=code, helpers=source_of(layer_matches, KeepFloat32, to_low_precision)
        )


@register_pass
class Float16(_LowPrecision):
    name = "fp16"
    search = SearchSpec(
        stage=STAGE_NUMERIC,
        params={"keep_norm_fp32": Choice((True, False)), "keep_last_fp32": Choice((False, True))},
        devices=("cuda",),
    )
    summary = "Convert weights and compute to float16 (optionally keeping norms / the last layer in float32)."
    dtype = "float16"


@register_pass
class BFloat16(_LowPrecision):
    name = "bf16"
    search = SearchSpec(
        stage=STAGE_NUMERIC,
        params={"keep_norm_fp32": Choice((True, False)), "keep_last_fp32": Choice((False, True))},
        exportable=False,
    )
    summary = "Convert weights and compute to bfloat16 (optionally keeping norms / the last layer in float32)."
    dtype = "bfloat16"


class AutocastConfig(PassConfig):
    dtype: Literal["auto", "bfloat16", "float16"] = Field(
        "auto", description="autocast dtype; auto = bfloat16 on CPU, float16 on CUDA"
    )


@register_pass
class Autocast(Pass):
    name = "autocast"
    summary = "Mixed precision: run forward under torch.autocast; weights stay float32."
    category = "precision"
    Config = AutocastConfig
    requires = Requirements(model_kinds=("torch",), accepts=(EAGER, COMPILED, EXPORTED))

    def apply(self, model: LoadedModel, config: AutocastConfig, ctx: PassContext) -> LoadedModel:
        import torch

        from accel.errors import PassError
        from accel.passes._torch_helpers import AutocastForward

        low = {c for c in model.input_casts.values() if c in ("float16", "bfloat16")}
        if low or _has_low_precision_weights(model.module):
            raise PassError(
                "autocast is for float32 models, and this one already runs in "
                f"{', '.join(sorted(low)) or 'low precision'} (an fp16/bf16 step ran); use one or the other."
            )
        device_type = "cuda" if str(ctx.device).startswith("cuda") else "cpu"
        dtype = (
            config.dtype
            if config.dtype != "auto"
            else ("float16" if device_type == "cuda" else "bfloat16")
        )
        _warn_cpu_speed(dtype, ctx)
        ctx.details["autocast"] = {"device_type": device_type, "dtype": dtype}
        wrapped = AutocastForward(model.module, device_type, getattr(torch, dtype))
        return model.replace(module=wrapped)

    def to_script(self, config: AutocastConfig) -> ScriptStep:
        from accel.passes._torch_helpers import AutocastForward, source_of

        if config.dtype == "auto":
            dtype = "torch.float16 if device.startswith('cuda') else torch.bfloat16"
        else:
            dtype = f"torch.{config.dtype}"
        code = (
            "device_type = 'cuda' if device.startswith('cuda') else 'cpu'\n"
            f"model = AutocastForward(model, device_type, {dtype})\n"
        )
        return ScriptStep(code=code, helpers=source_of(AutocastForward))
