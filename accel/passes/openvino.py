"""OpenVINO passes: ``openvino`` (convert a torch or ONNX model to an OpenVINO IR and run
it compiled) and ``quantize_openvino`` (NNCF post-training int8 of an OpenVINO model,
accuracy-controlled when the recipe has labelled eval data and a max accuracy drop).

Both save the IR (``model.xml`` + ``model.bin``) in the step's folder; later steps run
the compiled model (see accel/runtimes/openvino/).
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.errors import PassError
from accel.layer_patterns import PATTERN_HELP
from accel.models.calls import bind_dynamic_shapes, bind_inputs, call_module
from accel.passes._global_pool import SCRIPT_FIXED_MAPS, exact_global_pools
from accel.passes._global_pool import script_helpers as global_pool_script_helpers
from accel.passes._openvino_helpers import (
    OV_PRECISION_HELPER,
    compile_options,
    finish_ov_step,
    root_logging_kept,
)
from accel.passes.base import (
    KEEP_FLOAT,
    STAGE_LOWER,
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
from accel.runtimes.openvino.known_crashes import script_helpers as crash_free_helpers

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)


class OpenVinoConfig(PassConfig):
    device: Literal["CPU", "GPU", "AUTO"] = Field(
        "CPU", description="OpenVINO device to compile for (GPU means an Intel GPU)"
    )
    precision: Literal["auto", "f32", "bf16", "f16"] = Field(
        "auto",
        description="inference precision hint: auto is bf16 on a CPU with bf16 matrix kernels "
        "(AMX or AVX-512 BF16: several times faster than f32 there, at bf16 accuracy) and f32 "
        "elsewhere; bf16 needs such a CPU (falls back to f32 with a warning), f16 is for GPUs",
    )
    performance_hint: Literal["latency", "throughput"] = Field(
        "latency", description="latency: one request at a time; throughput: many streams"
    )
    streams: int | None = Field(
        None, ge=1, description="execution streams (default: from the performance hint)"
    )


def _spec_shapes(model: LoadedModel) -> list[tuple[str, list[int]]]:
    """(name, shape) per input with the spec's symbolic dims as -1 (dynamic)."""
    spec = model.input_spec
    default = spec.sample(seed=0)
    out = []
    for t in spec.inputs:
        shape = [-1 if isinstance(d, str) else int(d) for d in t.shape]
        if not shape and t.name in default:
            shape = list(default[t.name].shape)
        out.append((t.name, shape))
    return out


_OP_RE = re.compile(r"(aten::[A-Za-z0-9_.]+|prim::[A-Za-z0-9_]+|[A-Za-z]+Op\b)")


def _export_keyword_call(model: LoadedModel, module: Any, ctx: PassContext) -> Any:
    """torch.export of a forward that takes keyword-only inputs, the spec's symbolic dims
    dynamic (OpenVINO converts ExportedPrograms with the keyword structure kept)."""
    import torch

    from accel.models.shapes import example_for_export, ranged_dims

    spec = model.input_spec
    # torch.export specializes dims of size 0 and 1: trace where the dynamic ones are >= 2.
    feed = model.prepare_inputs(example_for_export(spec, ctx.inputs, ranged_dims(spec), ctx.seed))
    args, kwargs = bind_inputs(module, feed)
    per_input = [
        {i: torch.export.Dim.DYNAMIC for i, d in enumerate(shape) if d == -1}
        for _, shape in _spec_shapes(model)
    ]
    shapes = bind_dynamic_shapes(module, list(feed), per_input)
    with torch.no_grad():
        return torch.export.export(module.eval(), args, kwargs=kwargs, dynamic_shapes=shapes)


def convert_to_ov(model: LoadedModel, ctx: PassContext) -> Any:
    """``ov.Model`` of a torch module (traced on the recipe's inputs) or an ONNX file."""
    with root_logging_kept():
        return _convert(model, ctx)


def _via_torch_export(model: LoadedModel, module: Any, ctx: PassContext, traced: Exception) -> Any:
    """The traced conversion failed: convert a torch.export program instead (composite ops
    such as aten::diff are decomposed there); if that fails too, the traced error stands, with
    a note of why the torch.export route failed."""
    import openvino as ov

    try:
        converted = ov.convert_model(_export_keyword_call(model, module, ctx))
    except Exception as exported:
        why = (str(exported).strip().splitlines() or [""])[0][:300]
        traced.add_note(f"The torch.export route failed too: {type(exported).__name__}: {why}")
        raise traced from None
    first = (str(traced).strip().splitlines() or [type(traced).__name__])[0][:200]
    ctx.details["converted_via"] = f"torch.export (the traced conversion failed: {first})"
    return converted


def _convert_module(model: LoadedModel, module: Any, feed: Any, ctx: PassContext) -> Any:
    import openvino as ov
    import torch

    args, kwargs = bind_inputs(module, feed)
    if kwargs:  # OpenVINO's tracer calls positionally: convert a torch.export program
        return ov.convert_model(_export_keyword_call(model, module, ctx))
    shapes = [ov.PartialShape(s) for _, s in _spec_shapes(model)]
    try:
        with torch.no_grad():
            return ov.convert_model(module.eval(), example_input=args, input=shapes)
    except Exception as traced:  # e.g. no rule for aten::diff (transformers' causal mask)
        return _via_torch_export(model, module, ctx, traced)


def _convert(model: LoadedModel, ctx: PassContext) -> Any:
    import openvino as ov
    import torch

    try:
        if model.onnx_path is not None and model.module is None:
            return ov.convert_model(str(model.onnx_path))
        if model.module is None:
            raise PassError(
                f"openvino converts torch or ONNX models; {model.source} is {model.kind}"
            )
        module = getattr(model.module, "_orig_mod", model.module)  # torch.compile wrapper
        if isinstance(module, torch.jit.ScriptModule):
            raise PassError(
                "openvino cannot convert a TorchScript module here; put the openvino step "
                "before the torchscript step, or export ONNX first"
            )
        feed = model.prepare_inputs(ctx.inputs)
        fixed_maps = not any(-1 in s[2:] for _, s in _spec_shapes(model))
        with exact_global_pools(module, lambda: call_module(module, feed), fixed_maps) as pools:
            if pools:
                ctx.details["global_pools_as_mean"] = pools
            return _convert_module(model, module, feed, ctx)
    except PassError:
        raise
    except Exception as exc:  # OpenVINO's frontends raise OpConversionFailure / RuntimeError
        text = str(exc)
        # The frontend's summary names the ops without a conversion rule; the first line of
        # its message is only the C++ check that failed.
        rule = [ln for ln in text.splitlines() if "No conversion rule found" in ln]
        ops = sorted(set(_OP_RE.findall(" ".join(rule) or text)))[:5]
        what = f" (no conversion rule for {', '.join(ops)})" if ops else ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        useful = [ln for ln in lines if not ln.startswith(("Check '", "FrontEnd API failed"))]
        first = (useful or lines or [type(exc).__name__])[0][:300]
        hint = (
            " Try the ONNX route: add an export_onnx step before the openvino step."
            if model.module is not None
            else " Check the ONNX opset, or re-export the model."
        )
        notes = "".join(f" {n.rstrip('.')}." for n in getattr(exc, "__notes__", ()))
        raise PassError(
            f"OpenVINO cannot convert the model{what}: {type(exc).__name__}: {first.rstrip('.')}."
            f"{notes}{hint}"
        ) from None


@register_pass
class OpenVinoPass(Pass):
    name = "openvino"
    summary = "Convert to OpenVINO (torch or ONNX) and run the compiled IR; bf16 on CPUs with it"
    category = "runtime"
    Config = OpenVinoConfig
    requires = Requirements(model_kinds=("torch", "onnx", "openvino"), libraries=("openvino",))
    output_kind = "openvino"
    # Leaving torch for OpenVINO on CPUs (an alternative to export_onnx); the IR stays there.
    search = SearchSpec(
        stage=STAGE_LOWER,
        params={"precision": Choice(("auto", "f32", "bf16"))},
        devices=("cpu",),
        exportable=False,
    )

    def apply(self, model: LoadedModel, config: OpenVinoConfig, ctx: PassContext) -> LoadedModel:
        options = compile_options(
            config.device, config.precision, config.performance_hint, config.streams, ctx
        )
        ctx.progress(0.1, "converting to OpenVINO")
        if model.runtime_file is not None:  # already OpenVINO: recompile with new hints
            from accel.runtimes.openvino.ir import read_ir

            ov_model = read_ir(model.runtime_file)
            ctx.details["converted_from"] = "openvino"
        else:
            t0 = time.perf_counter()
            ov_model = convert_to_ov(model, ctx)
            ctx.metrics["convert_time_s"] = time.perf_counter() - t0
            ctx.details["converted_from"] = model.kind
        ctx.check_cancelled()
        ctx.progress(0.6, "saving and compiling the IR")
        return finish_ov_step(model, ov_model, ctx, options, "openvino_ir")

    def to_script(self, config: OpenVinoConfig) -> ScriptStep:
        return ScriptStep(
            code="\n".join(
                [
                    "if kind == 'torch':",
                    "    ov_shapes = [ov.PartialShape([-1 if i in DYNAMIC_AXES.get(n, {}) else d",
                    "                                  for i, d in enumerate(x.shape)])",
                    "                 for n, x in inputs.items()]",
                    "    ov_example = tuple((x.to(input_casts[k]) if k in input_casts and x.is_floating_point()",
                    "                        else x).to(device) for k, x in inputs.items())",
                    "    # Average pools whose window covers the whole map convert as a mean (OpenVINO",
                    "    # rejects a kernel larger than its input), while the spatial sizes are fixed.",
                    "    with exact_global_pools(model.eval(), lambda: model(*ov_example),",
                    f"                            {SCRIPT_FIXED_MAPS}), torch.no_grad():",
                    "        try:",
                    "            ov_model = ov.convert_model(model, example_input=ov_example, input=ov_shapes)",
                    "        except Exception as traced:  # e.g. no rule for aten::diff (a causal mask)",
                    "            # as the studio does: convert a torch.export program (composite ops",
                    "            # decomposed), the dynamic axes free where the example allows it",
                    '            print(f"traced conversion failed ({type(traced).__name__}); via torch.export")',
                    "            ov_dyn = tuple({i: torch.export.Dim.AUTO for i in DYNAMIC_AXES.get(n, {})}",
                    "                           for n in inputs)",
                    "            ov_model = ov.convert_model(",
                    "                torch.export.export(model.eval(), ov_example, dynamic_shapes=ov_dyn))",
                    "elif kind == 'onnx':",
                    "    ov_model = ov.convert_model(str(onnx_path))",
                    "else:",
                    "    ov_model = ov.Core().read_model(str(ov_path))",
                    'ov_path = step_dir / "model.xml"',
                    "ov.save_model(ov_model, str(ov_path), compress_to_fp16=False)",
                    *_compile_lines(config),
                ]
            ),
            imports=["import contextlib", "import openvino as ov"],
            helpers=[OV_PRECISION_HELPER, *crash_free_helpers(), *global_pool_script_helpers()],
        )


def _compile_lines(config: Any) -> list[str]:
    lines = [
        "ov_config = {",
        f'    "PERFORMANCE_HINT": {config.performance_hint.upper()!r},',
        f'    "INFERENCE_PRECISION_HINT": ov_precision({config.precision!r}, {config.device!r}),',
        "}",
        "if THREADS:",
        '    ov_config["INFERENCE_NUM_THREADS"] = THREADS',
    ]
    if config.streams:
        lines.append(f'ov_config["NUM_STREAMS"] = {int(config.streams)!r}')
    lines += [
        "ov_model = ov.Core().read_model(str(ov_path))",
        f"ov_config = ov_crash_free(ov_model, ov_config, {config.precision!r}, {config.device!r})",
        f"compiled = ov.Core().compile_model(ov_model, {config.device!r}, ov_config)",
        "request = compiled.create_infer_request()",
        'kind, model, session, input_casts = "openvino", None, None, {}',
    ]
    return lines


# -- quantize_openvino ----------------------------------------------------------------------


class QuantizeOpenVinoConfig(PassConfig):
    preset: Literal["performance", "mixed"] = Field(
        "performance",
        description="performance: symmetric int8 everywhere; mixed: asymmetric activations "
        "(better for activations that are not centred, e.g. after GELU)",
    )
    model_type: Literal["auto", "transformer", "cnn"] = Field(
        "auto",
        description="transformer keeps sensitive ops (softmax, layer norm) in float; auto picks "
        "it when the model has attention (Softmax or SDPA) and MatMul",
    )
    samples: int = Field(
        64,
        ge=1,
        le=100_000,
        description="calibration batches taken from the recipe's data.calibration (synthetic "
        "from the input spec when absent)",
    )
    fast_bias_correction: bool = Field(
        True, description="fast bias correction (the slow one is more exact, much slower)"
    )
    overflow_fix: Literal["auto", "enable", "first_layer", "disable"] = Field(
        "auto",
        description="NNCF's 7-bit weights against int16 saturation in the u8 x s8 kernels of "
        "CPUs without VNNI/AMX: enable (every layer), first_layer (NNCF's default), disable; "
        "auto: enable where this CPU has no VNNI/AMX, first_layer elsewhere",
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="ops kept in float (NNCF ignored scope): op names (globs) or the torch "
        f"layers they came from: {PATTERN_HELP}; type names match nothing here (no torch classes)",
    )
    max_accuracy_drop: float | None = Field(
        None,
        ge=0.0,
        description="accuracy-controlled quantization (needs data.eval with labels): layers "
        "go back to float until the drop in the recipe's metric is at most this",
    )


def _ov_ignored_names(ov_model: Any, patterns: list[str]) -> tuple[list[str], list[str]]:
    """Op names matching any pattern (the op name as a glob, or the torch module path it came
    from as accel.layer_patterns matches a layer), and the patterns that matched nothing."""
    import fnmatch

    from accel.layer_patterns import layer_matches
    from accel.runtimes.openvino.ir import module_path_of

    ops = [
        op.get_friendly_name()
        for op in ov_model.get_ordered_ops()
        if op.get_type_name() not in ("Constant", "Parameter", "Result")
    ]
    paths = {n: module_path_of(n) for n in ops}
    names, unmatched = [], []
    for pattern in patterns:
        hits = [
            n for n in ops if fnmatch.fnmatchcase(n, pattern) or layer_matches(pattern, paths[n])
        ]
        if not hits:
            unmatched.append(pattern)
        names += [h for h in hits if h not in names]
    return names, unmatched


def _ov_unmatched_message(ov_model: Any, unmatched: list[str]) -> str:
    from accel.layer_patterns import unmatched_message
    from accel.runtimes.openvino.ir import module_path_of

    ops = [op.get_friendly_name() for op in ov_model.get_ordered_ops()]
    modules = sorted({module_path_of(n) for n in ops} - {""})
    return (
        unmatched_message(
            unmatched, modules + ops, "exclude pattern(s)", "op of the OpenVINO model"
        )
        + " Op names look like '__module.layer1.0.conv1/aten::_convolution/Convolution'; type "
        "names match no op here (OpenVINO keeps no torch class)."
    )


def check_batches(model: LoadedModel, batches: list[dict[str, Any]], what: str) -> None:
    """Reject batches that do not fit the model's inputs (names, rank, fixed dims)."""
    spec = model.input_spec
    for i, b in enumerate(batches):
        missing = [n for n in spec.names if n not in b]
        if missing and len(b) != len(spec.names):
            raise PassError(
                f"{what} batch {i} has inputs {sorted(b)}, the model takes {spec.names}; "
                "make the data's names match the input spec"
            )
        for t, (name, x) in zip(spec.inputs, b.items()):
            shape = tuple(getattr(x, "shape", ()))
            if len(shape) != len(t.shape) or any(
                isinstance(d, int) and d != s for d, s in zip(t.shape, shape)
            ):
                raise PassError(
                    f"{what} batch {i}: input {name!r} has shape {list(shape)}, the model "
                    f"expects {list(t.shape)}; fix the calibration data (or the input spec)"
                )


def _not_stateful(ov_model: Any) -> Any:
    """``ov_model``, refused (NotApplicable) when it is a stateful LM."""
    from accel.errors import NotApplicable
    from accel.runtimes.openvino.stateful import is_stateful_lm

    if is_stateful_lm(ov_model):  # an IR the form check could not tell (a renamed file)
        raise NotApplicable(STATEFUL_REFUSAL)
    return ov_model


STATEFUL_REFUSAL = (
    "quantize_openvino calibrates activations on whole-sequence inputs, but the model is a "
    "stateful OpenVINO LM here (KV cache in the infer request, one token per call). Use "
    "compress_weights_openvino (int8/int4 weights) after openvino_stateful instead, or put "
    "quantize_openvino after a plain openvino step."
)


def overflow_fix(config: Any) -> str:
    """The config's overflow_fix with ``auto`` resolved for this CPU (accel.hardware)."""
    if config.overflow_fix == "auto":
        from accel.hardware import int8_saturates

        return "enable" if int8_saturates() else "first_layer"
    return str(config.overflow_fix)


def _nncf_kwargs(
    config: Any, ov_model: Any, names: list[str], batches: int
) -> tuple[dict[str, Any], bool, str]:
    """nncf.quantize's keyword arguments for ``config``, whether the model is quantized as a
    transformer, and the overflow fix applied."""
    import nncf

    transformer = config.model_type == "transformer" or (
        config.model_type == "auto" and _is_transformer(ov_model)
    )
    kwargs: dict[str, Any] = {
        "preset": nncf.QuantizationPreset.MIXED
        if config.preset == "mixed"
        else nncf.QuantizationPreset.PERFORMANCE,
        "subset_size": batches,
        "fast_bias_correction": config.fast_bias_correction,
    }
    if transformer:
        kwargs["model_type"] = nncf.ModelType.TRANSFORMER
    if names:
        kwargs["ignored_scope"] = nncf.IgnoredScope(names=names)
    fix = overflow_fix(config)
    if fix != "first_layer":  # NNCF's default otherwise
        from nncf.quantization.advanced_parameters import (
            AdvancedQuantizationParameters,
            OverflowFix,
        )

        kwargs["advanced_parameters"] = AdvancedQuantizationParameters(
            overflow_fix=OverflowFix[fix.upper()]
        )
    return kwargs, transformer, fix


def _overflow_fix_lines(config: Any) -> list[str]:
    """The exported script's overflow fix (auto: resolved for the CPU it is written on)."""
    fix = overflow_fix(config)
    if fix == "first_layer":
        return []
    return [
        "from nncf.quantization.advanced_parameters import (",
        "    AdvancedQuantizationParameters, OverflowFix)",
        "ov_kwargs['advanced_parameters'] = AdvancedQuantizationParameters(",
        f"    overflow_fix=OverflowFix.{fix.upper()})",
    ]


def _is_transformer(ov_model: Any) -> bool:
    types = {op.get_type_name() for op in ov_model.get_ordered_ops()}
    attention = {"Softmax", "ScaledDotProductAttention"} & types
    return bool(attention) and "MatMul" in types


def _first_useful_line(text: str) -> str:
    """The line of an OpenVINO error that says what failed: its first lines only name the
    C++ files the exception passed through ("Exception from src/...cpp:224:")."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Exception from", "Check '"))]
    return (useful or lines or [""])[0][:300]


@register_pass
class QuantizeOpenVinoPass(Pass):
    name = "quantize_openvino"
    summary = "NNCF int8 post-training quantization of an OpenVINO model (calibrated)"
    category = "quantize"
    Config = QuantizeOpenVinoConfig
    # torch layers whose ops it quantizes; its exclude takes their module names (search)
    module_layer_types = ("Linear", "Conv1d", "Conv2d", "Conv3d")
    # an OpenVINO model converted from ONNX has no torch module paths: names do not match there
    module_names_lost_after = ("export_onnx",)
    # a plain IR only: a stateful LM (openvino_stateful's form) takes one token at a time
    # with its KV cache in the request, and NNCF calibrates whole-sequence inputs
    requires = Requirements(
        model_kinds=("openvino",),
        libraries=("openvino", "nncf"),
        note="calibrates on the recipe's data; accuracy control with data.eval",
        layer_lists={"exclude": KEEP_FLOAT},
        accepts=("openvino",),
    )
    search = SearchSpec(
        stage=STAGE_RUNTIME_NUMERIC,
        params={"preset": Choice(("performance", "mixed"))},
        fixed={"samples": 32},
        devices=("cpu",),
        exportable=False,
    )

    @classmethod
    def form_problem(cls, form: str) -> str | None:
        from accel.runtimes.openvino.stateful import STATEFUL_FORM

        if form == STATEFUL_FORM:
            return STATEFUL_REFUSAL
        return super().form_problem(form)

    def apply(
        self, model: LoadedModel, config: QuantizeOpenVinoConfig, ctx: PassContext
    ) -> LoadedModel:
        import nncf

        from accel.runtimes.openvino.ir import read_ir, to_numpy_feed

        batches = ctx.calibration_batches(config.samples)
        if not batches:
            raise PassError("quantize_openvino got no calibration batches; check data.calibration")
        check_batches(model, batches, "calibration")
        ov_model = _not_stateful(read_ir(model.runtime_file))
        names, unmatched = _ov_ignored_names(ov_model, list(config.exclude))
        if unmatched:
            raise PassError(_ov_unmatched_message(ov_model, unmatched))
        ports = list(ov_model.inputs)

        class _Ports:  # to_numpy_feed matches by port names
            inputs = ports

        def transform(batch: dict[str, Any]) -> dict[int, Any]:
            return to_numpy_feed(_Ports, model.prepare_inputs(batch))

        kwargs, transformer, fix = _nncf_kwargs(config, ov_model, names, len(batches))
        ctx.details.update(
            {
                "overflow_fix": fix,
                "calibration_batches": len(batches),
                "model_type": "transformer" if transformer else "default",
                "ignored_ops": names,
            }
        )
        ctx.progress(0.1, f"calibrating on {len(batches)} batches")
        dataset = nncf.Dataset(batches, transform)
        t0 = time.perf_counter()
        try:
            if config.max_accuracy_drop is not None:
                quantized = self._with_accuracy_control(
                    model, ov_model, dataset, config, ctx, kwargs
                )
            else:
                quantized = nncf.quantize(ov_model, dataset, **kwargs)
        except PassError:
            raise
        except Exception as exc:  # NNCF raises many kinds; the first line says what failed
            first = _first_useful_line(str(exc))
            raise PassError(
                f"NNCF quantization failed: {type(exc).__name__}: {first}. Try exclude for the "
                "failing op, preset: mixed, or fewer samples"
            ) from None
        ctx.metrics["quantize_time_s"] = time.perf_counter() - t0
        ctx.check_cancelled()
        fq = sum(1 for op in quantized.get_ordered_ops() if op.get_type_name() == "FakeQuantize")
        ctx.details["fake_quantize_ops"] = fq
        ctx.progress(0.8, "saving and compiling the int8 IR")
        return finish_ov_step(
            model, quantized, ctx, dict(model.session_options), "openvino_ir_int8"
        )

    def _with_accuracy_control(
        self,
        model: LoadedModel,
        ov_model: Any,
        dataset: Any,
        config: QuantizeOpenVinoConfig,
        ctx: PassContext,
        kwargs: dict[str, Any],
    ) -> Any:
        import nncf

        from accel.data import evaluate_accuracy

        if "advanced_parameters" in kwargs:  # this entry point names it differently
            kwargs = dict(kwargs)
            kwargs["advanced_quantization_parameters"] = kwargs.pop("advanced_parameters")

        data = ctx.eval_data
        if data is None or not getattr(data, "has_labels", False):
            raise PassError(
                "max_accuracy_drop needs labelled evaluation data: set the recipe's data.eval "
                "(e.g. 'synthetic-labelled') or remove max_accuracy_drop"
            )
        metric = getattr(getattr(ctx.recipe, "data", None), "metric", None) or "top1"
        eval_batches = list(data.batches())
        check_batches(model, [b.inputs for b in eval_batches], "evaluation")

        class _Subset:
            has_labels = True
            spec = getattr(data, "spec", "eval")

            def __init__(self, items: list[Any]) -> None:
                self.items = items

            def batches(self) -> Any:
                return iter(self.items)

        def validate(compiled: Any, items: Any) -> float:
            probe = model.replace(_session=(compiled, compiled.create_infer_request()))
            return float(evaluate_accuracy(probe, _Subset(list(items)), metric))

        validation = nncf.Dataset(eval_batches)
        kwargs = dict(kwargs)
        kwargs.pop("fast_bias_correction", None)
        ctx.details["accuracy_control"] = {"metric": metric, "max_drop": config.max_accuracy_drop}
        return nncf.quantize_with_accuracy_control(
            ov_model,
            calibration_dataset=dataset,
            validation_dataset=validation,
            validation_fn=validate,
            max_drop=float(config.max_accuracy_drop),
            drop_type=nncf.DropType.ABSOLUTE,
            **kwargs,
        )

    def to_script(self, config: QuantizeOpenVinoConfig) -> ScriptStep:
        if config.max_accuracy_drop is not None:
            raise NotImplementedError  # codegen reports: cannot be exported as a script yet
        lines = [
            "import nncf",
            "ov_model = ov.Core().read_model(str(ov_path))",
            f"ov_batches = list(calibration_batches({int(config.samples)!r}))",
            "def _ov_transform(batch):",
            "    return {i: (x.float() if x.is_floating_point() else x).numpy()",
            "            for i, x in enumerate(batch.values())}",
            "ov_kwargs = dict(",
            f"    preset=nncf.QuantizationPreset.{config.preset.upper()},",
            "    subset_size=len(ov_batches),",
            f"    fast_bias_correction={config.fast_bias_correction!r},",
            ")",
        ]
        lines += _overflow_fix_lines(config)
        if config.model_type == "transformer":
            lines.append("ov_kwargs['model_type'] = nncf.ModelType.TRANSFORMER")
        elif config.model_type == "auto":
            lines += [
                "_types = {op.get_type_name() for op in ov_model.get_ordered_ops()}",
                "if {'Softmax', 'ScaledDotProductAttention'} & _types and 'MatMul' in _types:",
                "    ov_kwargs['model_type'] = nncf.ModelType.TRANSFORMER",
            ]
        if config.exclude:
            lines += [
                f"_patterns = {list(config.exclude)!r}",
                "_ignored = []",
                "for op in ov_model.get_ordered_ops():",
                "    _n = op.get_friendly_name()",
                "    _mp = _n.split('/', 1)[0].removeprefix('__module.') if _n.startswith('__module.') else ''",
                "    if any(fnmatch.fnmatchcase(_n, p) or layer_matches(p, _mp) for p in _patterns)"
                " and op.get_type_name() not in ('Constant', 'Parameter', 'Result'):",
                "        _ignored.append(_n)",
                "ov_kwargs['ignored_scope'] = nncf.IgnoredScope(names=_ignored)",
            ]
        lines += [
            "ov_model = nncf.quantize(ov_model, nncf.Dataset(ov_batches, _ov_transform), **ov_kwargs)",
            'ov_path = step_dir / "model.xml"',
            "ov.save_model(ov_model, str(ov_path), compress_to_fp16=False)",
            "compiled = ov.Core().compile_model(ov.Core().read_model(str(ov_path)), 'CPU', ov_config)",
            "request = compiled.create_infer_request()",
        ]
        imports = ["import openvino as ov"]
        helpers = []
        if config.exclude:
            import inspect

            from accel.layer_patterns import layer_matches

            imports.append("import fnmatch")
            helpers.append(inspect.getsource(layer_matches))
        return ScriptStep(code="\n".join(lines), imports=imports, helpers=helpers)
