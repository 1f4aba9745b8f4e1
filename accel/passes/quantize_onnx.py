"""ONNX Runtime quantization passes: dynamic (weights int8, activations at run time) and
static (activations calibrated on data), QDQ or QOperator format.

Both write a new ONNX file under the step's work folder and return the model pointing at
it. ``exclude`` keeps nodes in float (node-name globs, or torch layers in the one pattern
language of accel.layer_patterns): the mixed-precision fallback for layers that lose too
much accuracy.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.layer_patterns import PATTERN_HELP
from accel.passes.base import (
    KEEP_FLOAT,
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

log = logging.getLogger(__name__)

# Dynamic quantization of Conv gives ConvInteger, which ORT's CPU provider runs slower than
# float Conv; the useful default covers matrix multiplies and recurrent layers.
DYNAMIC_DEFAULT_OPS = ("MatMul", "Attention", "LSTM")

_QTYPES = {"int8": "QInt8", "uint8": "QUInt8", "int16": "QInt16", "uint16": "QUInt16"}
_CALIB = {"minmax": "MinMax", "percentile": "Percentile", "entropy": "Entropy"}

ExtraValue = bool | int | float | str


class _CommonConfig(PassConfig):
    per_channel: bool = Field(
        False,
        description="one scale per output channel of each weight (better accuracy for Conv/MatMul)",
    )
    reduce_range: bool | Literal["auto"] = Field(
        "auto",
        description="7-bit weights: no int16 saturation in the u8 x s8 kernels of CPUs "
        "without VNNI/AMX (auto: on where this CPU has none, full range elsewhere)",
        json_schema_extra={"enum": ["auto", True, False]},  # one choice in the GUI's form
    )
    weight_type: Literal["int8", "uint8"] = Field(
        "int8", description="integer type of quantized weights"
    )
    op_types: list[str] | None = Field(
        None,
        description="op types to quantize (default: all the quantizer supports; dynamic: MatMul, Attention, LSTM)",
    )
    exclude_op_types: list[str] = Field(
        default_factory=list,
        description="op types to keep in float, e.g. [Gather, LayerNormalization]",
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="nodes kept in float (mixed precision): ONNX node names (globs, "
        f"'/classifier/*') or the torch layers they came from: {PATTERN_HELP}",
    )
    preprocess: bool = Field(
        True,
        description="run quant_pre_process (shape inference + graph cleanup) before quantizing",
    )
    extra_options: dict[str, ExtraValue] = Field(
        default_factory=dict,
        description="ORT quantizer extra_options, e.g. {ActivationSymmetric: true, CalibPercentile: 99.99}",
    )


class QuantizeOnnxDynamicConfig(_CommonConfig):
    """Dynamic quantization takes the common options only."""


class QuantizeOnnxStaticConfig(_CommonConfig):
    per_channel: bool = Field(
        True,
        description="one scale per output channel of each weight (better accuracy for Conv/MatMul)",
    )
    quant_format: Literal["qdq", "qoperator"] = Field(
        "qdq",
        description="QDQ (QuantizeLinear/DequantizeLinear pairs) or QOperator (QLinearConv, ...)",
    )
    # Measured on x86 (bench/bench_onnx_quant_prune.py): uint8 activations with int8 weights
    # use ORT's U8S8 kernels; int8 activations in QDQ ran up to 2x slower than fp32.
    activation_type: Literal["int8", "uint8", "int16", "uint16"] = Field(
        "uint8",
        description="integer type of quantized activations (uint8: fastest on x86 CPUs; int8 for GPUs/NPUs)",
    )
    calibration_method: Literal["minmax", "percentile", "entropy"] = Field(
        "minmax", description="how activation ranges are chosen"
    )
    calibration_batches: int = Field(
        8,
        ge=1,
        description="calibration batches (from the recipe's data.calibration, else synthetic)",
    )


def _enum(name: str, value: str) -> str:
    return f"{name}.{value}"


def _op_types(config: _CommonConfig, mode: str) -> list[str] | None:
    """The op_types_to_quantize list (None: the quantizer's default)."""
    if config.op_types is not None:
        base = list(config.op_types)
    elif mode == "dynamic":
        base = list(DYNAMIC_DEFAULT_OPS)
    elif config.exclude_op_types:
        from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

        fmt = getattr(config, "quant_format", "qdq")
        base = sorted(QDQRegistry if fmt == "qdq" else QLinearOpsRegistry)
    else:
        return None
    return [t for t in base if t not in set(config.exclude_op_types)]


_CWD_LOCK = threading.Lock()


@contextlib.contextmanager
def _scratch_cwd(parent: Path) -> Iterator[Path]:
    """A fresh folder under ``parent`` as working directory, removed afterwards.

    ORT's quantization tools write temporary files into the current directory (symbolic shape
    inference saves ``sym_shape_infer_temp.onnx`` and ``<uuid>.data`` files when it cannot
    infer every shape). The working directory is process-wide, hence the lock; every path
    handed to ORT inside is absolute.
    """
    with _CWD_LOCK, tempfile.TemporaryDirectory(prefix="ort_tmp_", dir=parent) as tmp:
        old = os.getcwd()
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(old)


def _preprocess(src: Path, work: Path, ctx: PassContext) -> Path:
    """quant_pre_process into the work folder; without symbolic shape inference if that is incomplete."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from accel.errors import PassError

    ctx.progress(0.02, "pre-processing (shape inference)")
    pre = work / "model_preprocessed.onnx"
    try:
        try:
            with _scratch_cwd(work):
                quant_pre_process(str(src), str(pre))
        except Exception as exc:  # noqa: BLE001 - ORT raises a plain Exception here
            if "Incomplete symbolic shape inference" not in str(exc):
                raise
            # Models with ops ORT's symbolic shape inference does not know (e.g. rotary
            # embeddings, some attention reshapes): ONNX's own shape inference still runs.
            ctx.details["preprocess"] = (
                "symbolic shape inference incomplete for this model; pre-processed without it "
                "(ONNX shape inference and graph optimization only)"
            )
            with _scratch_cwd(work):
                quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    except Exception as exc:  # noqa: BLE001 - ORT/onnx raise many types here
        raise PassError(
            f"quant_pre_process (shape inference) failed on this model: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}. Set preprocess: false to quantize without it."
        ) from None
    return pre


def _run_dynamic(
    src: Path,
    out: Path,
    config: Any,
    op_types: list[str] | None,
    exclude: list[str],
    ctx: PassContext,
) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    ctx.progress(0.2, "quantizing weights")
    quantize_dynamic(
        str(src),
        str(out),
        op_types_to_quantize=op_types,
        per_channel=config.per_channel,
        reduce_range=reduce_range(config),
        weight_type=getattr(QuantType, _QTYPES[config.weight_type]),
        nodes_to_exclude=exclude,
        extra_options=dict(config.extra_options),
    )


BARE = "model_without_value_info.onnx"


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else ""


def reduce_range(config: Any) -> bool:
    """The config's reduce_range with ``auto`` resolved for this CPU (accel.hardware)."""
    if config.reduce_range == "auto":
        from accel.hardware import int8_saturates

        return int8_saturates()
    return bool(config.reduce_range)


def _calibration_reader(src: Path, model: LoadedModel, config: Any, ctx: PassContext) -> Any:
    """ORT calibration reader over the context's calibration batches, reporting each batch."""
    from accel.errors import PassError
    from accel.passes import _onnx_quant_helpers as h

    n = config.calibration_batches
    batches = [model.prepare_inputs(b) for b in ctx.calibration_batches(n)]
    if not batches:
        raise PassError("no calibration batches: check the recipe's data.calibration source")

    def on_batch(i: int, total: int) -> None:
        ctx.check_cancelled()
        ctx.progress(0.1 + 0.8 * i / max(total, 1), f"calibration batch {i}/{total}")

    ctx.details.update(
        {
            "calibration_method": config.calibration_method,
            "calibration_batches": len(batches),
            "quant_format": config.quant_format,
        }
    )
    return h.BatchCalibrationReader(src, batches, on_batch)


def _run_static(
    src: Path,
    out: Path,
    reader: Any,
    config: Any,
    op_types: list[str] | None,
    exclude: list[str],
) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    quantize_static(
        str(src),
        str(out),
        reader,
        quant_format=getattr(QuantFormat, "QDQ" if config.quant_format == "qdq" else "QOperator"),
        op_types_to_quantize=op_types,
        per_channel=config.per_channel,
        reduce_range=reduce_range(config),
        activation_type=getattr(QuantType, _QTYPES[config.activation_type]),
        weight_type=getattr(QuantType, _QTYPES[config.weight_type]),
        nodes_to_exclude=exclude,
        calibrate_method=getattr(CalibrationMethod, _CALIB[config.calibration_method]),
        extra_options=dict(config.extra_options),
    )


def _levels_used_later(ctx: PassContext) -> list[str]:
    """ONNX Runtime graph optimization levels the quantized model will be loaded at: "all"
    (the runner's own sessions) and those of the recipe's later onnxruntime steps; without a
    recipe, every level the onnxruntime pass offers that fuses (all, extended)."""
    recipe = ctx.recipe
    if recipe is None or not hasattr(recipe, "enabled_steps"):
        return ["all", "extended"]
    levels = ["all"]
    for index, step in recipe.enabled_steps():
        if index > ctx.step_index and step.pass_name == "onnxruntime":
            level = step.params.get("graph_optimization_level", "all")
            if level not in levels and level != "disabled":
                levels.append(level)
    return levels


def _check_loads(path: Path, levels: list[str], ctx: PassContext) -> None:
    """Refuse a quantized graph ONNX Runtime rejects at a level later steps load it with
    (its fusions can build nodes with invalid input types from a valid quantized graph)."""
    import onnxruntime as ort

    from accel.errors import PassError

    enum = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
    for level in levels:
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, enum[level])
        try:
            ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT's load errors (INVALID_GRAPH, FAIL...)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PassError(
                f"the quantized model does not load in ONNX Runtime at graph_optimization_level "
                f"{level} (which a later step or the studio's own check uses): {first}. The "
                "float model loads, so ONNX Runtime's quantizer (or its fusions at this level) "
                "built the invalid node; a later onnxruntime step at a lower "
                "graph_optimization_level may load it, else use quantize_onnx_dynamic or the "
                "OpenVINO int8 route (quantize_openvino) for this model."
            ) from None
    ctx.details["load_checked_levels"] = levels


def _script_helpers() -> list[Any]:
    """The helpers an exported ONNX quantization step copies (the pattern matcher first)."""
    from accel.passes import _onnx_quant_helpers as h

    return [
        h.layer_matches,
        h.onnx_module_paths,
        h.onnx_module_types,
        h.onnx_nodes_matching,
        h.index_computing_nodes,
        h.BatchCalibrationReader,
        h.without_value_info,
    ]


class _QuantizeOnnx(Pass):
    category = "quantize"
    requires = Requirements(
        model_kinds=("onnx",),
        libraries=("onnxruntime", "onnx"),
        layer_lists={"exclude": KEEP_FLOAT},
    )
    mode = "dynamic"

    def _out_name(self, config: Any) -> str:
        return f"model_int8_{self.mode}.onnx"

    def apply(self, model: LoadedModel, config: Any, ctx: PassContext) -> LoadedModel:
        from accel.passes import _onnx_quant_helpers as h

        work = Path(ctx.work_dir).resolve()
        work.mkdir(parents=True, exist_ok=True)
        src = Path(model.onnx_path).resolve()
        if config.preprocess:
            src = _preprocess(src, work, ctx)
        exclude = self._exclude_nodes(src, model, config)
        # Static: nodes computing a Gather's indices stay float (quantized, they break the indices).
        index_nodes = []
        if self.mode == "static":
            index_nodes = [n for n in h.index_computing_nodes(src) if n not in set(exclude)]
            ctx.details["float_index_nodes"] = len(index_nodes)
        histogram = h.onnx_op_histogram(src)
        op_types = _op_types(config, self.mode)
        ctx.details.update(
            {
                "reduce_range": reduce_range(config),
                "backend": "onnxruntime.quantization",
                "mode": self.mode,
                "excluded_nodes": exclude,
                "op_types": op_types,
            }
        )
        out = work / self._out_name(config)
        ctx.check_cancelled()
        self._quantize(src, out, model, config, op_types, exclude + index_nodes, ctx)
        counts = h.quantized_op_counts(out)
        ctx.details["quantized_ops"] = counts
        _check_loads(out, _levels_used_later(ctx), ctx)
        if not counts:
            self._warn_nothing_quantized(histogram, op_types, ctx)
        return self._result(model, out, counts, ctx)

    def _exclude_nodes(self, src: Path, model: LoadedModel, config: Any) -> list[str]:
        """Node names matched by config.exclude (a clear error for a pattern matching none)."""
        from accel.errors import PassError
        from accel.passes import _onnx_quant_helpers as h

        exclude, unmatched = h.onnx_nodes_matching(src, config.exclude, model.onnx_path)
        if unmatched:
            import onnx

            from accel.layer_patterns import unmatched_message

            paths = h.onnx_module_paths(
                onnx.load(str(model.onnx_path), load_external_data=False).graph
            )
            modules = sorted({p for p in paths.values() if p})
            raise PassError(
                unmatched_message(
                    unmatched, modules + list(paths), "exclude pattern(s)", "node of the model"
                )
            )
        if self.mode == "dynamic":
            # The dynamic quantizer rewrites Gemm as MatMul + Add named "<gemm>_MatMul"; exclude both names.
            exclude = exclude + [f"{n}_MatMul" for n in exclude]
        return exclude

    def _quantize(
        self,
        src: Path,
        out: Path,
        model: LoadedModel,
        config: Any,
        op_types: list[str] | None,
        exclude: list[str],
        ctx: PassContext,
    ) -> None:
        """Run ORT's quantizer; its failures become a PassError that says what to change."""
        from accel.errors import AccelError, PassError
        from accel.passes import _onnx_quant_helpers as h

        # The quantizer prints progress (entropy histograms...) to stdout, which a worker may use
        # for its protocol; keep it in the log instead. It runs in a scratch folder as working
        # directory: ORT writes some temporary files (external data) to the current directory.
        captured = io.StringIO()
        try:
            # Calibration data is read before: a recipe's data paths may be relative.
            reader = (
                None if self.mode == "dynamic" else _calibration_reader(src, model, config, ctx)
            )
            try:
                self._run(src, out, reader, config, op_types, exclude, ctx, captured)
            except Exception as exc:  # noqa: BLE001 - ORT's shape inference raises its own types
                bare = h.without_value_info(src, out.parent / BARE, exc)
                if bare is None:
                    raise
                # The exporter's intermediate shape annotations contradicted the shapes ONNX
                # inferred for the quantizer's rewrite (diffusers' UNet: 64 vs 256); they are
                # optional, and the quantizer infers its own.
                ctx.details["value_info_dropped"] = f"{type(exc).__name__}: {_first_line(exc)}"
                if reader is not None:
                    reader.rewind()
                self._run(bare, out, reader, config, op_types, exclude, ctx, captured)
        except AccelError:
            raise
        except Exception as exc:  # noqa: BLE001 - report the quantizer's failure with what to change
            first = _first_line(exc)
            # preprocess: false is only a way out where the pre-processing ran.
            also = ", or preprocess: false" if config.preprocess else ""
            raise PassError(
                f"ONNX Runtime {self.mode} quantization failed: {type(exc).__name__}: {first}. Try excluding the "
                f"failing op type (exclude_op_types) or node (exclude){also}."
            ) from None
        finally:
            if captured.getvalue().strip():
                log.debug("quantizer output:\n%s", captured.getvalue())

    def _run(
        self,
        src: Path,
        out: Path,
        reader: Any,
        config: Any,
        op_types: list[str] | None,
        exclude: list[str],
        ctx: PassContext,
        captured: io.StringIO,
    ) -> None:
        with contextlib.redirect_stdout(captured), _scratch_cwd(out.parent):
            if reader is None:
                _run_dynamic(src, out, config, op_types, exclude, ctx)
            else:
                _run_static(src, out, reader, config, op_types, exclude)

    def _warn_nothing_quantized(
        self, histogram: dict[str, int], op_types: list[str] | None, ctx: PassContext
    ) -> None:
        present = sorted(histogram)
        hint = "Check op_types / exclude."
        if self.mode == "dynamic" and {"Conv", "ConvTranspose"} & set(present):
            hint = "Dynamic quantization covers MatMul/Attention/LSTM; use quantize_onnx_static for Conv."
        ctx.warn(
            f"0 of {sum(histogram.values())} ops quantized (op types tried: "
            f"{op_types or 'quantizer default'}; the model has {present}). {hint}"
        )

    def _result(
        self, model: LoadedModel, out: Path, counts: dict[str, int], ctx: PassContext
    ) -> LoadedModel:
        from accel.models import load_model

        ctx.add_artifact(out, "onnx")
        ctx.progress(0.95, "loading the quantized model")
        q = load_model(str(out), model.input_spec, device=model.device)
        ctx.metrics["size_bytes_before"] = float(model.size_bytes or 0) or None
        ctx.metrics["size_bytes_after"] = float(q.size_bytes)
        metadata = {**model.metadata, "quantization": {"mode": self.mode, "ops": counts}}
        return model.replace(
            onnx_path=out,
            num_params=q.num_params,
            size_bytes=q.size_bytes,
            content_hash=q.content_hash,
            metadata=metadata,
        )

    # -- script export -----------------------------------------------------------------------
    def to_script(self, config: Any) -> ScriptStep:
        imports = [
            "from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType"
        ]
        helpers = [inspect.getsource(f) for f in _script_helpers()]
        lines = ["src_path = onnx_path"]
        if config.preprocess:
            imports += _PREPROCESS_IMPORTS
            lines += _PREPROCESS_LINES
        lines.append(
            f"exclude = onnx_nodes_matching(src_path, {list(config.exclude)!r}, onnx_path)[0]  # kept in float"
        )
        if self.mode == "dynamic":
            lines.append(
                'exclude += [f"{n}_MatMul" for n in exclude]  # quantize_dynamic renames Gemm to <name>_MatMul'
            )
        else:
            lines.append(
                "exclude += [n for n in index_computing_nodes(src_path) if n not in set(exclude)]"
            )
        op_types = _op_types(config, self.mode)
        out = self._out_name(config)
        common = [
            f"op_types_to_quantize={op_types!r}",
            f"per_channel={config.per_channel!r}",
            f"reduce_range={reduce_range(config)!r}",
            f"weight_type=QuantType.{_QTYPES[config.weight_type]}",
            "nodes_to_exclude=exclude",
            f"extra_options={dict(config.extra_options)!r}",
        ]
        if self.mode == "dynamic":
            imports.append("from onnxruntime.quantization import quantize_dynamic")
            args = ["str(path)", f'str(step_dir / "{out}")', *common]
            call = "quantize_dynamic(\n" + "".join(f"    {a},\n" for a in args) + ")"
        else:
            imports.append("from onnxruntime.quantization import quantize_static")
            n = config.calibration_batches
            fmt = "QDQ" if config.quant_format == "qdq" else "QOperator"
            args = [
                "str(path)",
                f'str(step_dir / "{out}")',
                f"BatchCalibrationReader(path, calibration_batches({n}))",
                f"quant_format=QuantFormat.{fmt}",
                f"activation_type=QuantType.{_QTYPES[config.activation_type]}",
                f"calibrate_method=CalibrationMethod.{_CALIB[config.calibration_method]}",
                *common,
            ]
            call = "quantize_static(\n" + "".join(f"    {a},\n" for a in args) + ")"
        lines += [*_retried_without_value_info(call), f'onnx_path = step_dir / "{out}"']
        lines.append("session = make_session(onnx_path)")
        code = "\n".join(lines) + "\n"
        return ScriptStep(code=code, imports=imports, helpers=[textwrap.dedent(x) for x in helpers])


def _retried_without_value_info(call: str) -> list[str]:
    """The script's quantizer ``call`` on ``path``, run on src_path and, where it fails in shape
    inference against the model's value_info, once more without it (as ``_quantize`` does)."""
    return [
        "def quantize(path):",
        textwrap.indent(call, "    "),
        "",
        "try:",
        "    quantize(src_path)",
        "except Exception as exc:  # shape annotations the quantizer's rewrite contradicts",
        f'    bare = without_value_info(src_path, step_dir / "{BARE}", exc)',
        "    if bare is None:",
        "        raise",
        "    quantize(bare)",
    ]


# The script's preprocessing, as the pass does it (``_QuantizeOnnx.to_script``).
_PREPROCESS_IMPORTS = [
    "import os",
    "import tempfile",
    "from onnxruntime.quantization.shape_inference import quant_pre_process",
]
_PREPROCESS_LINES = [
    "# Shape inference and graph cleanup, as ONNX Runtime recommends before quantizing.",
    "# ORT may write temporary files to the working directory: run it in a scratch folder.",
    'pre_path = (step_dir / "model_preprocessed.onnx").resolve()',
    "src_abs = str(Path(src_path).resolve())  # before the chdir below",
    "cwd = os.getcwd()",
    "with tempfile.TemporaryDirectory(dir=step_dir) as scratch:",
    "    os.chdir(scratch)",
    "    try:",
    "        quant_pre_process(src_abs, str(pre_path))",
    "    except Exception as exc:",
    '        if "Incomplete symbolic shape inference" not in str(exc):',
    "            raise",
    "        quant_pre_process(src_abs, str(pre_path), skip_symbolic_shape=True)",
    "    finally:",
    "        os.chdir(cwd)",
    "src_path = pre_path",
]


@register_pass
class QuantizeOnnxDynamic(_QuantizeOnnx):
    name = "quantize_onnx_dynamic"
    search = SearchSpec(
        stage=STAGE_RUNTIME_NUMERIC,
        params={"per_channel": Choice((False, True)), "reduce_range": Choice((False, True))},
    )
    summary = "ONNX Runtime dynamic int8 quantization: int8 weights, activations quantized on the fly (MatMul, LSTM)."
    Config = QuantizeOnnxDynamicConfig
    mode = "dynamic"
    # torch layers whose nodes it quantizes; its exclude takes their module names (search)
    module_layer_types = ("Linear", "LSTM")


@register_pass
class QuantizeOnnxStatic(_QuantizeOnnx):
    name = "quantize_onnx_static"
    search = SearchSpec(
        stage=STAGE_RUNTIME_NUMERIC,
        params={
            "per_channel": Choice((True, False)),
            "quant_format": Choice(("qdq", "qoperator")),
            "calibration_method": Choice(("minmax", "percentile", "entropy")),
        },
    )
    summary = "ONNX Runtime static int8 quantization (QDQ or QOperator) with activation ranges calibrated on data."
    Config = QuantizeOnnxStaticConfig
    mode = "static"
    # torch layers whose nodes it quantizes; its exclude takes their module names (search)
    module_layer_types = ("Linear", "Conv1d", "Conv2d", "Conv3d")
