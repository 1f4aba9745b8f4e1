"""Torch quantization passes: dynamic int8, weight-only int8/int4 (torchao), static int8
(PT2E with calibration) and quantization-aware training (torchao QAT).

Every pass takes ``exclude``: layers kept in float (names, prefixes, globs such as
"layers.0.*" or type names such as "Linear") — the mixed-precision fallback for the
layers ``studio analyze`` finds most sensitive. The building blocks live in
``_torch_quant_helpers`` and are copied into exported scripts.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import logging
import warnings
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.errors import NotApplicable, PassError
from accel.layer_patterns import PATTERN_HELP, unmatched_message
from accel.models.forms import EAGER
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

EXCLUDE_DESCRIPTION = f"layers kept in float: {PATTERN_HELP}"
_EXCLUDE = Field(default_factory=list, description=EXCLUDE_DESCRIPTION)
_QAT_TRAIN_SEED = 20000
_QAT_HELDOUT_SEED = 30000  # held-out inputs: QAT is checked against PTQ on these


# -- shared ---------------------------------------------------------------------------------------


def _source(*fns: Any) -> list[str]:
    return [inspect.getsource(f) for f in fns]


def _call_helpers() -> tuple[Any, ...]:
    """The helpers that bind inputs to a forward's signature (copied beside those that call
    models)."""
    from accel.models import calls

    return (
        calls.forward_signature,
        calls._exported_keywords,
        calls.bind_inputs,
        calls.call_module,
        calls.bind_dynamic_shapes,
    )


def _select(
    pass_name: str, module: Any, types: tuple[str, ...], exclude: list[str], ctx: PassContext
) -> list[str]:
    """Layers to quantize; PassError when a pattern matches nothing or nothing is left."""
    from accel.passes._torch_quant_helpers import select_layers

    keep, excluded, unmatched = select_layers(module, types, exclude)
    if unmatched:
        names = [n for n, m in module.named_modules() if n and type(m).__name__ in types]
        raise PassError(
            f"{pass_name}: "
            + unmatched_message(unmatched, names, "exclude pattern(s)", f"{'/'.join(types)} layer")
        )
    if not keep:
        why = f" (all {len(excluded)} are excluded)" if excluded else ""
        raise NotApplicable(
            f"{pass_name}: the model has no {'/'.join(types)} layer to quantize{why}; remove the step."
        )
    ctx.details["quantized_layers"] = keep
    ctx.details["excluded_layers"] = excluded
    ctx.metrics["quantized_layers"] = float(len(keep))
    return keep


def _only_called(module: Any, names: list[str], model: LoadedModel, ctx: PassContext) -> list[str]:
    """``names`` less the layers the forward never calls as modules (kept float, said)."""
    from accel.passes._torch_quant_helpers import called_as_modules

    if not ctx.inputs:
        return names
    try:
        called = called_as_modules(module, names, model.prepare_inputs(ctx.inputs))
    except Exception:  # noqa: BLE001 - a module that cannot run alone (sensitivity's layer holder)
        return names
    left = [n for n in names if n not in called]
    if left:
        ctx.warn(f"{left} stay float: the model reads their weights directly, not calling them")
        ctx.details["excluded_layers"] = ctx.details.get("excluded_layers", []) + left
        ctx.details["quantized_layers"] = called
        ctx.metrics["quantized_layers"] = float(len(called))
    if not called:
        raise NotApplicable("no layer to quantize is called as a module; remove the step.")
    return called


def _module_bytes(module: Any) -> tuple[int, str]:
    """Serialized size of the weights (packed / subclass tensors included) and its hash."""
    import torch

    buf = io.BytesIO()
    state = module.state_dict()
    # PT2E folds quantized weights into graph constants that state_dict does not list.
    graph = getattr(module, "graph", None)
    if graph is not None:
        for node in graph.nodes:
            if node.op == "get_attr" and node.target not in state:
                t = module
                for part in str(node.target).split("."):
                    t = getattr(t, part, None)
                if isinstance(t, torch.Tensor):
                    state[str(node.target)] = t
    torch.save(state, buf)
    data = buf.getvalue()
    return len(data), hashlib.sha256(data).hexdigest()


def _finish(model: LoadedModel, module: Any, ctx: PassContext, backend: str) -> LoadedModel:
    size, digest = _module_bytes(module)
    ctx.details["backend"] = backend
    if model.size_bytes:
        ctx.metrics["size_ratio"] = size / model.size_bytes
    return model.replace(module=module, size_bytes=size, content_hash=digest)


@contextlib.contextmanager
def _quiet() -> Any:
    """torch.ao's eager quantization and PT2E warn about deprecations on every call."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*deprecat.*")
        yield


def _export_example(spec: Any) -> dict[str, Any]:
    """Inputs for torch.export with every symbolic dim at least 2 (within its range): the
    export fixes a dim whose example size is 1, so a batch-1 sample would pin the batch."""
    dims = {k: min(max(2, d.default), d.max) for k, d in spec.dims.items()}
    return spec.sample(seed=0, dims=dims)


def _require_torch_module(pass_name: str, model: LoadedModel) -> Any:
    import torch

    module = model.module
    if isinstance(module, torch.jit.ScriptModule):
        raise PassError(
            f"{pass_name} cannot quantize a TorchScript module; load the eager model (pkg.mod:factory) instead."
        )
    if any(p.dtype in (torch.float16, torch.bfloat16) for p in module.parameters()):
        raise PassError(f"{pass_name} expects a float32 model; put it before the fp16/bf16 step.")
    return module


def _eager_engine_available() -> bool:
    import torch

    return any(
        e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm", "qnnpack")
    )


# -- dynamic int8 --------------------------------------------------------------------------------


class DynamicInt8Config(PassConfig):
    backend: Literal["auto", "torchao", "eager"] = Field(
        "auto",
        description="torchao (Int8DynamicActivationInt8WeightConfig tensor subclasses), eager "
        "(torch.ao quantize_dynamic, fbgemm/x86 kernels; also LSTM) or auto (eager on CPU, "
        "where it measured faster without torch.compile; torchao on CUDA)",
    )
    exclude: list[str] = _EXCLUDE


@register_pass
class QuantizeDynamicInt8(Pass):
    name = "quantize_dynamic_int8"
    search = SearchSpec(
        stage=STAGE_NUMERIC,
        params={"backend": Choice(("auto", "torchao"))},
        when=("linear", "lstm"),
        exportable=False,
    )
    summary = (
        "Int8 weights, activations quantized on the fly (Linear, LSTM); no calibration data needed."
    )
    category = "quantize"
    Config = DynamicInt8Config
    layer_types = ("Linear", "LSTM")  # what it quantizes (sensitivity analysis, exclude)
    layer_local = True  # quantizing a layer does not depend on the others (sensitivity)
    requires = Requirements(
        model_kinds=("torch",),
        libraries=("torchao",),
        note="speeds up Linear/LSTM-heavy models on CPU",
        accepts=(EAGER,),
        layer_lists={"exclude": KEEP_FLOAT},
    )

    def _backend(self, config: DynamicInt8Config, module: Any, device: str) -> str:
        if config.backend != "auto":
            return config.backend
        return "torchao" if str(device).startswith("cuda") else "eager"

    def apply(self, model: LoadedModel, config: DynamicInt8Config, ctx: PassContext) -> LoadedModel:
        import torch

        module = _require_torch_module(self.name, model)
        backend = self._backend(config, module, ctx.device)
        if backend == "eager" and str(ctx.device).startswith("cuda"):
            raise PassError(
                "the eager quantize_dynamic backend runs on CPU only; use backend: torchao on CUDA."
            )
        if backend == "eager" and not _eager_engine_available():
            raise PassError(
                "this torch build has no fbgemm/x86/qnnpack quantized engine; use backend: torchao."
            )
        types = ("Linear", "LSTM")
        names = _only_called(
            module, _select(self.name, module, types, config.exclude, ctx), model, ctx
        )
        ctx.progress(0.2, f"quantizing {len(names)} layers ({backend})")
        with _quiet():
            if backend == "eager":
                spec = {n: torch.ao.quantization.default_dynamic_qconfig for n in names}
                module = torch.ao.quantization.quantize_dynamic(module, spec, dtype=torch.qint8)
                used = "eager"
            else:
                from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

                from accel.passes._torch_quant_helpers import name_filter

                kinds = {n: type(module.get_submodule(n)).__name__ for n in names}
                linears = [n for n in names if kinds[n] == "Linear"]
                lstms = [n for n in names if kinds[n] == "LSTM"]
                quantize_(
                    module, Int8DynamicActivationInt8WeightConfig(), filter_fn=name_filter(linears)
                )
                used = "torchao"
                if lstms:
                    # torchao has no LSTM support: those go through the eager path.
                    spec = {n: torch.ao.quantization.default_dynamic_qconfig for n in lstms}
                    module = torch.ao.quantization.quantize_dynamic(module, spec, dtype=torch.qint8)
                    used = "torchao+eager(LSTM)"
                    ctx.warn(
                        f"torchao cannot quantize LSTM; {lstms} use the eager quantize_dynamic path"
                    )
        return _finish(model, module, ctx, used)

    def to_script(self, config: DynamicInt8Config) -> ScriptStep:
        from accel.passes import _torch_quant_helpers as h

        helpers = _source(
            *_call_helpers(), h.layer_matches, h.select_layers, h.called_as_modules, h.name_filter
        )
        select = (
            f'names, kept_float, _ = select_layers(model, ("Linear", "LSTM"), {list(config.exclude)!r})\n'
            "names = called_as_modules(model, names, inputs)  # a weight its parent reads stays float\n"
        )
        eager = (
            "qconfig_spec = {n: torch.ao.quantization.default_dynamic_qconfig for n in names}\n"
            "model = torch.ao.quantization.quantize_dynamic(model, qconfig_spec, dtype=torch.qint8)\n"
        )
        if config.backend == "auto":
            code = (
                select
                + "if device.startswith('cuda'):\n"
                + _indent(self._torchao_code())
                + "else:\n"
                + _indent(eager)
            )
        elif config.backend == "eager":
            code = select + eager
        else:
            code = select + self._torchao_code()
        return ScriptStep(
            code=code,
            imports=[
                "from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_"
            ],
            helpers=helpers,
        )

    @staticmethod
    def _torchao_code() -> str:
        return (
            "linears = [n for n in names if isinstance(model.get_submodule(n), nn.Linear)]\n"
            "lstms = [n for n in names if isinstance(model.get_submodule(n), nn.LSTM)]\n"
            "quantize_(model, Int8DynamicActivationInt8WeightConfig(), filter_fn=name_filter(linears))\n"
            "if lstms:  # torchao has no LSTM support: eager dynamic quantization for those\n"
            "    qconfig_spec = {n: torch.ao.quantization.default_dynamic_qconfig for n in lstms}\n"
            "    model = torch.ao.quantization.quantize_dynamic(model, qconfig_spec, dtype=torch.qint8)\n"
        )


def _indent(code: str) -> str:
    return "".join("    " + line + "\n" for line in code.splitlines())


# -- weight-only ---------------------------------------------------------------------------------


class WeightOnlyConfig(PassConfig):
    bits: Literal[8, 4] = Field(8, description="weight bits: 8 (int8) or 4 (int4, grouped)")
    group_size: int | None = Field(
        None,
        ge=16,
        description="weights per scale along the input dim (int4 default 128; int8 default per channel)",
    )
    layout: Literal["auto", "tinygemm", "intx"] = Field(
        "auto",
        description="int4 kernel: tinygemm (Int4WeightOnlyConfig, packed int4 kernels; CUDA), intx "
        "(IntxWeightOnlyConfig, int4 values in int8 storage; any CPU) or auto (tinygemm on CUDA, intx on CPU)",
    )
    exclude: list[str] = _EXCLUDE


@register_pass
class QuantizeWeightOnly(Pass):
    name = "quantize_weight_only"
    # int8 / int4 weights: what decoding (memory-bound) gains from; the generation
    # objectives seed it (accel.search.generation). Only where the Linear layers hold the
    # weights: on a CNN it touched the classifier alone, and every CNN search spent a trial
    # (45-65 s after prune + distill) on int4 failing with a pruned head's odd width.
    search = SearchSpec(
        stage=STAGE_NUMERIC,
        params={"bits": Choice((8, 4))},
        when=("linear_heavy",),
        exportable=False,
    )
    summary = "Int8 or int4 weights, float activations (torchao); shrinks Linear weights, helps memory-bound inference."
    category = "quantize"
    Config = WeightOnlyConfig
    layer_types = ("Linear",)  # what it quantizes (sensitivity analysis, exclude)
    layer_local = True  # quantizing a layer does not depend on the others (sensitivity)
    requires = Requirements(
        model_kinds=("torch",),
        libraries=("torchao",),
        note="Linear layers",
        accepts=(EAGER,),
        layer_lists={"exclude": KEEP_FLOAT},
    )

    @staticmethod
    def _layout(config: WeightOnlyConfig, device: str) -> str:
        if config.bits == 8:
            return "int8"
        if config.layout == "auto":
            return "tinygemm" if str(device).startswith("cuda") else "intx"
        return config.layout

    def apply(self, model: LoadedModel, config: WeightOnlyConfig, ctx: PassContext) -> LoadedModel:
        from torchao.quantization import quantize_

        from accel.passes._torch_quant_helpers import name_filter, weight_only_config

        module = _require_torch_module(self.name, model)
        layout = self._layout(config, ctx.device)
        if layout == "tinygemm" and not str(ctx.device).startswith("cuda"):
            raise PassError(
                "int4 tinygemm weights (Int4WeightOnlyConfig) have no CPU kernel in this torchao build "
                "(it needs CUDA or the mslk package). Use layout: intx (int4 values in int8 storage, runs "
                "on CPU) or bits: 8."
            )
        names = _select(self.name, module, ("Linear",), config.exclude, ctx)
        group = config.group_size or (128 if config.bits == 4 else None)
        if group:
            odd = [n for n in names if module.get_submodule(n).in_features % group]
            if odd:
                ctx.warn(
                    f"{odd} stay float: their input size is not a multiple of group_size {group}"
                )
                names = [n for n in names if n not in odd]
                ctx.details["quantized_layers"] = names
                ctx.details["excluded_layers"] = ctx.details["excluded_layers"] + odd
            if not names:
                raise PassError(
                    f"no Linear layer has an input size divisible by group_size {group}; lower group_size."
                )
        ctx.progress(0.2, f"quantizing {len(names)} Linear layers to int{config.bits}")
        try:
            with _quiet():
                quantize_(
                    module,
                    weight_only_config(config.bits, group, layout),
                    filter_fn=name_filter(names),
                )
        except (ImportError, NotImplementedError, AssertionError) as exc:
            raise PassError(
                f"torchao int{config.bits} weight-only ({layout}) cannot run here: {exc}. "
                + (
                    "Use layout: intx on CPU."
                    if config.bits == 4
                    else "Use quantize_dynamic_int8 instead."
                )
            ) from None
        ctx.details["group_size"] = group
        return _finish(model, module, ctx, f"torchao-{layout}")

    def to_script(self, config: WeightOnlyConfig) -> ScriptStep:
        from accel.passes import _torch_quant_helpers as h

        group = config.group_size or (128 if config.bits == 4 else None)
        layout = (
            repr(self._layout(config, "cpu"))
            if config.bits == 8 or config.layout != "auto"
            else "'tinygemm' if device.startswith('cuda') else 'intx'"
        )
        code = (
            f'names, kept_float, _ = select_layers(model, ("Linear",), {list(config.exclude)!r})\n'
            f"group_size = {group!r}\n"
            "if group_size:  # layers whose input size is not a multiple of the group stay float\n"
            "    names = [n for n in names if model.get_submodule(n).in_features % group_size == 0]\n"
            f"quantize_(model, weight_only_config({config.bits}, group_size, {layout}), filter_fn=name_filter(names))\n"
        )
        return ScriptStep(
            code=code,
            imports=["from torchao.quantization import quantize_"],
            helpers=_source(h.layer_matches, h.select_layers, h.name_filter, h.weight_only_config),
        )


# -- static int8 (PT2E) failures: which step of PT2E failed, and which check ------------------

_PT2E_STEPS = {
    "export_for_quantization": "exporting the model with torch.export",
    "prepare_pt2e": "inserting observers (prepare_pt2e with the X86 quantizer)",
    "call_module": "running a calibration batch through the observed graph",
    "convert_pt2e": "converting the calibrated graph to int8 (convert_pt2e)",
}


def _pt2e_step(exc: BaseException) -> str | None:
    """The helper called by pt2e_static_quantize in whose frames ``exc`` was raised."""
    import traceback

    names = [f.name for f in traceback.extract_tb(exc.__traceback__)]
    if "pt2e_static_quantize" not in names:
        return None
    after = names[names.index("pt2e_static_quantize") + 1 :]
    return next((n for n in after if n in _PT2E_STEPS), None)


def _explain_pt2e_failure(exc: BaseException) -> str:
    """quantize_static_int8's refusal: the PT2E step that failed and the check inside it."""
    from accel.passes._export_errors import explain_export_failure, first_line

    step = _pt2e_step(exc)
    if step == "export_for_quantization":
        cause = explain_export_failure(exc)
        fix = (
            "PT2E quantizes a torch.export graph; fix what stops the export, or use "
            "quantize_dynamic_int8 (no export needed) or the ONNX / OpenVINO int8 routes."
        )
    else:
        cause = f"{type(exc).__name__}: {first_line(exc)}"
        fix = (
            "exclude the layer named in the message (exclude: [...]), or use quantize_dynamic_int8 "
            "or the ONNX / OpenVINO int8 routes."
        )
    what = _PT2E_STEPS.get(step or "", "quantizing the model")
    return f"quantize_static_int8 failed while {what}: {cause}. {fix}"


# -- static int8 (PT2E) --------------------------------------------------------------------------


class StaticInt8Config(PassConfig):
    calibration_batches: int = Field(
        8, ge=1, description="calibration batches to run through the observers"
    )
    observer: Literal["histogram", "minmax", "moving_average"] = Field(
        "histogram",
        description="activation range observer: histogram (robust to outliers), minmax or moving_average",
    )
    exclude: list[str] = _EXCLUDE


_STATIC_TYPES = ("Linear", "Conv1d", "Conv2d", "Conv3d")


@register_pass
class QuantizeStaticInt8(Pass):
    name = "quantize_static_int8"
    search = SearchSpec(stage=STAGE_NUMERIC, devices=("cpu",), exportable=False)
    summary = (
        "Post-training static int8 (PT2E, X86 quantizer): activation ranges calibrated on data."
    )
    category = "quantize"
    Config = StaticInt8Config
    layer_types = _STATIC_TYPES  # what it quantizes (sensitivity analysis, exclude)
    requires = Requirements(
        model_kinds=("torch",),
        libraries=("torchao",),
        note="needs a torch.export-able model; int8 kernels after torch.compile, q/dq reference ops in eager",
        accepts=(EAGER,),
        layer_lists={"exclude": KEEP_FLOAT},
    )

    def apply(self, model: LoadedModel, config: StaticInt8Config, ctx: PassContext) -> LoadedModel:
        from accel.passes._torch_quant_helpers import pt2e_static_quantize

        module = _require_torch_module(self.name, model)
        if model.channels_last_inputs:
            ctx.warn("PT2E quantization ignores channels_last; the quantized graph runs contiguous")
        names = _select(self.name, module, _STATIC_TYPES, config.exclude, ctx)
        excluded = ctx.details["excluded_layers"]
        batches = ctx.calibration_batches(config.calibration_batches)
        if not batches:
            raise PassError(
                "no calibration data; set data.calibration in the recipe or leave it empty for synthetic data"
            )
        ctx.details["calibration_batches"] = len(batches)
        ctx.details["observer"] = config.observer

        def on_batch(i: int, n: int) -> None:
            ctx.check_cancelled()
            ctx.progress(0.1 + 0.8 * (i + 1) / n, f"calibrating {i + 1}/{n}")

        ctx.progress(0.05, "exporting the model (torch.export)")
        try:
            with _quiet():
                q = pt2e_static_quantize(
                    module.eval(),
                    [model.prepare_inputs(b) for b in batches],
                    config.observer,
                    excluded,
                    on_batch,
                    model.prepare_inputs(_export_example(model.input_spec)),
                )
        except PassError:
            raise
        except Exception as exc:
            if type(exc).__name__ == "Cancelled":
                raise
            raise PassError(_explain_pt2e_failure(exc)) from None
        ctx.metrics["quantized_layers"] = float(len(names))
        ctx.details["hint"] = (
            "in eager mode the graph runs reference quantize/dequantize ops (slower than float); "
            "add a compile step after this one for fused int8 kernels"
        )
        return _finish(model, q, ctx, "pt2e-x86")

    def to_script(self, config: StaticInt8Config) -> ScriptStep:
        from accel.passes import _torch_quant_helpers as h

        code = (
            f"_, kept_float, _ = select_layers(model, {_STATIC_TYPES!r}, {list(config.exclude)!r})\n"
            "# Export at symbolic dims >= 2 (torch.export fixes a size-1 dim) so other batch sizes run.\n"
            f"model = pt2e_static_quantize(model.eval(), calibration_batches({config.calibration_batches}), "
            f"{config.observer!r}, kept_float, example=make_inputs(seed=0, dims={{k: min(max(2, d), hi) for k, (lo, hi, d) in DIMS.items()}}))\n"
        )
        return ScriptStep(
            code=code,
            helpers=_source(
                *_call_helpers(),
                h.layer_matches,
                h.select_layers,
                h.export_for_quantization,
                h.x86_quant_config,
                h.explicit_conv_padding,
                h.drop_integer_annotations,
                h.split_repeated_calls,
                h.with_annotation_fixes,
                h.pt2e_static_quantize,
            ),
        )


# -- QAT -----------------------------------------------------------------------------------------


class QATConfigModel(PassConfig):
    scheme: Literal[
        "int8_dynamic_act_int4_weight", "int8_dynamic_act_int8_weight", "int4_weight_only"
    ] = Field(
        "int8_dynamic_act_int4_weight",
        description="what training simulates and the final model uses (torchao configs): int8 dynamic "
        "activations with int4 grouped / int8 per-channel weights, or int4 weight-only",
    )
    steps: int = Field(
        50,
        ge=0,
        description="fine-tuning steps (0: convert without training = post-training quantization)",
    )
    lr: float = Field(
        2e-5,
        gt=0,
        description="Adam learning rate (2e-5 beats PTQ on the zoo models; 1e-4 ended worse)",
    )
    batch_size: int = Field(
        16, ge=1, description="batch size of the synthetic training data (without data.train)"
    )
    batch_dim: str = Field(
        "batch", description="the symbolic input dim batch_size sets (synthetic training data)"
    )
    loss: Literal["distill", "cross_entropy"] = Field(
        "distill",
        description="distill: match the float model's outputs (MSE, no labels needed); "
        "cross_entropy: fit the training data's labels",
    )
    group_size: int = Field(32, ge=8, description="int4 weights per scale (along the input dim)")
    exclude: list[str] = _EXCLUDE


@register_pass
class QuantizationAwareTraining(Pass):
    name = "qat"
    search = SearchSpec(
        stage=STAGE_NUMERIC,
        params={"scheme": Choice(("int8_dynamic_act_int8_weight", "int8_dynamic_act_int4_weight"))},
        fixed={"steps": 20},
        opt_in="qat",
        when=("linear",),
        exportable=False,
    )
    summary = (
        "Quantization-aware fine-tuning (torchao QAT): train with fake quantization, then convert."
    )
    category = "quantize"
    Config = QATConfigModel
    layer_types = ("Linear",)  # what it quantizes (sensitivity analysis, exclude)
    requires = Requirements(
        model_kinds=("torch",),
        libraries=("torchao",),
        note="trains the model for `steps` steps",
        accepts=(EAGER,),
        layer_lists={"exclude": KEEP_FLOAT},
    )

    def preflight(self, model: LoadedModel, config: QATConfigModel) -> None:
        """Grouped int4 weights need Linear layers whose input size the group size divides:
        say so before training (with a group size that fits) when none does."""
        import torch

        from accel.passes._torch_quant_helpers import select_layers

        module = model.module
        if config.scheme == "int8_dynamic_act_int8_weight" or not isinstance(
            module, torch.nn.Module
        ):
            return
        keep, _, _ = select_layers(module, ("Linear",), config.exclude)
        sizes = sorted({module.get_submodule(n).in_features for n in keep})
        if not sizes or any(s % config.group_size == 0 for s in sizes):
            return
        fits = [g for g in (256, 128, 64, 32, 16, 8) if any(s % g == 0 for s in sizes)]
        hint = f"set group_size {fits[0]}, or " if fits else ""
        raise NotApplicable(
            f"qat: no Linear layer's input size ({', '.join(map(str, sizes[:6]))}) is a multiple "
            f"of group_size {config.group_size}; {hint}use scheme int8_dynamic_act_int8_weight "
            "(per-channel weights)."
        )

    def apply(self, model: LoadedModel, config: QATConfigModel, ctx: PassContext) -> LoadedModel:
        import copy

        import torch
        from torchao.quantization import quantize_
        from torchao.quantization.qat import QATConfig

        from accel.passes._torch_quant_helpers import name_filter, qat_base_config, qat_train

        module = _require_torch_module(self.name, model)
        names = _select(self.name, module, ("Linear",), config.exclude, ctx)
        if config.scheme != "int8_dynamic_act_int8_weight":
            odd = [n for n in names if module.get_submodule(n).in_features % config.group_size]
            if odd:
                ctx.warn(
                    f"{odd} stay float: input size not a multiple of group_size {config.group_size}"
                )
                names = [n for n in names if n not in odd]
                ctx.details["excluded_layers"] = ctx.details["excluded_layers"] + odd
                ctx.details["quantized_layers"] = names
            if not names:
                raise PassError(
                    f"no Linear layer's input size is a multiple of group_size {config.group_size}"
                )
        batches = self._batches(model, config, ctx)
        teacher = copy.deepcopy(module).eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        base = qat_base_config(config.scheme, config.group_size)
        ctx.details.update(scheme=config.scheme, steps=config.steps, loss=config.loss, lr=config.lr)

        def on_step(step: int, n: int, loss: float) -> None:
            ctx.check_cancelled()
            ctx.progress(0.1 + 0.8 * (step + 1) / n, f"QAT step {step + 1}/{n} loss {loss:.3g}")

        # The same scheme without training (PTQ): QAT must beat it on held-out inputs.
        ptq = copy.deepcopy(module) if config.steps else None
        with _quiet():
            quantize_(module, QATConfig(base, step="prepare"), filter_fn=name_filter(names))
            for p in module.parameters():
                p.requires_grad_(True)
            with torch.enable_grad():
                module, last = qat_train(
                    module, teacher, batches, config.steps, config.lr, config.loss, on_step
                )
            quantize_(module, QATConfig(base, step="convert"), filter_fn=name_filter(names))
            if ptq is not None:
                quantize_(ptq, QATConfig(base, step="prepare"), filter_fn=name_filter(names))
                quantize_(ptq, QATConfig(base, step="convert"), filter_fn=name_filter(names))
        for p in module.parameters():
            p.requires_grad_(False)
        if config.steps:
            ctx.metrics["qat_final_loss"] = last
            module = self._keep_better(module.eval(), ptq.eval(), teacher, model, config, ctx)
        return _finish(model, module.eval(), ctx, f"torchao-qat-{config.scheme}")

    @staticmethod
    def _keep_better(
        qat: Any, ptq: Any, teacher: Any, model: LoadedModel, config: Any, ctx: PassContext
    ) -> Any:
        """The QAT model, unless the untrained PTQ model matches the float one better on
        held-out inputs (seeds the training never saw): then PTQ, with a warning."""
        from accel.passes._torch_quant_helpers import heldout_mse

        heldout = [
            model.prepare_inputs(model.input_spec.sample(seed=_QAT_HELDOUT_SEED + i))
            for i in range(4)
        ]
        qat_mse = heldout_mse(qat, teacher, heldout)
        ptq_mse = heldout_mse(ptq, teacher, heldout)
        ctx.metrics["qat_heldout_mse"] = qat_mse
        ctx.metrics["ptq_heldout_mse"] = ptq_mse
        if qat_mse <= ptq_mse:
            ctx.details["kept"] = "qat"
            return qat
        ctx.details["kept"] = "ptq"
        ctx.warn(
            f"QAT ended worse than post-training quantization of the same scheme on held-out "
            f"inputs (MSE {qat_mse:.3g} vs {ptq_mse:.3g}); kept the PTQ model. Try a lower lr "
            f"(now {config.lr:g}), more steps (now {config.steps}) or real data.train."
        )
        return ptq

    def _batches(self, model: LoadedModel, config: QATConfigModel, ctx: PassContext) -> Any:
        data = ctx.train_data
        if data is not None:
            items = list(data.batches())
            if config.loss == "cross_entropy" and not all(b.labels is not None for b in items):
                raise PassError(
                    "loss cross_entropy needs labelled data.train; use loss: distill or add labels"
                )
            ctx.details["train_data"] = getattr(data, "spec", "recipe data.train")
            return lambda step: (items[step % len(items)].inputs, items[step % len(items)].labels)
        if config.loss == "cross_entropy":
            raise PassError(
                "loss cross_entropy needs labelled training data: set data.train in the recipe "
                "(e.g. synthetic-labelled:zoo:NAME or a .npz with labels), or use loss: distill"
            )
        spec = model.input_spec
        dims = None
        if config.batch_dim in spec.dims:
            d = spec.dims[config.batch_dim]
            if not d.min <= config.batch_size <= d.max:
                raise PassError(
                    f"batch_size {config.batch_size} is outside {config.batch_dim}={d.min}..{d.max}"
                )
            dims = {config.batch_dim: config.batch_size}
        ctx.details["train_data"] = f"synthetic (seed {_QAT_TRAIN_SEED}+step, dims {dims})"
        return lambda step: (spec.sample(seed=_QAT_TRAIN_SEED + step, dims=dims), None)

    def to_script(self, config: QATConfigModel) -> ScriptStep:
        from accel.passes import _torch_quant_helpers as h

        group_filter = (
            ""
            if config.scheme == "int8_dynamic_act_int8_weight"
            else f"names = [n for n in names if model.get_submodule(n).in_features % {config.group_size} == 0]\n"
        )
        code = (
            f'names, kept_float, _ = select_layers(model, ("Linear",), {list(config.exclude)!r})\n'
            + group_filter
            + "teacher = copy.deepcopy(model).eval().requires_grad_(False)  # the float model to distill from\n"
            f"base = qat_base_config({config.scheme!r}, {config.group_size})\n"
            'quantize_(model, QATConfig(base, step="prepare"), filter_fn=name_filter(names))\n'
            "model.requires_grad_(True)\n"
            'if "train_batches" in globals():  # the recipe\'s data.train, exported with it\n'
            "    _train = train_batches()\n"
            "    train_batch = lambda step: _train[step % len(_train)]\n"
            "else:  # synthetic training inputs, the studio's seeds; the distill loss needs no labels\n"
            f"    train_batch = lambda step: (make_inputs(seed={_QAT_TRAIN_SEED} + step, dims={ {config.batch_dim: config.batch_size}!r}), None)\n"
            "with torch.enable_grad():\n"
            f"    model, _ = qat_train(model, teacher, train_batch, {config.steps}, {config.lr!r}, {config.loss!r})\n"
            'quantize_(model, QATConfig(base, step="convert"), filter_fn=name_filter(names))\n'
            "model = model.eval().requires_grad_(False)\n"
        )
        if (
            config.steps
        ):  # the studio keeps PTQ when QAT ends worse on held-out inputs; so does this
            code += (
                "ptq = copy.deepcopy(teacher)\n"
                'quantize_(ptq, QATConfig(base, step="prepare"), filter_fn=name_filter(names))\n'
                'quantize_(ptq, QATConfig(base, step="convert"), filter_fn=name_filter(names))\n'
                "heldout = [\n"
                "    {k: (x.to(input_casts[k]) if k in input_casts and x.is_floating_point() else x).to(device)\n"
                f"     for k, x in make_inputs(seed={_QAT_HELDOUT_SEED} + i).items()}}\n"
                "    for i in range(4)\n"
                "]\n"
                "if heldout_mse(model, teacher, heldout) > heldout_mse(ptq.eval(), teacher, heldout):\n"
                '    print("QAT ended worse than PTQ on held-out inputs; keeping the PTQ model")\n'
                "    model = ptq.eval()\n"
            )
        return ScriptStep(
            code=code,
            imports=[
                "import copy",
                "from torchao.quantization import quantize_",
                "from torchao.quantization.qat import QATConfig",
            ],
            helpers=_source(
                *_call_helpers(),
                h.layer_matches,
                h.select_layers,
                h.name_filter,
                h.qat_base_config,
                h.first_output,
                h.qat_train,
                h.heldout_mse,
            ),
        )
