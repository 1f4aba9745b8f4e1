"""Export a torch model to ONNX (dynamo or TorchScript exporter).

The exported file is what later steps run: the pass returns an onnx-kind
LoadedModel whose ``onnx_path`` points at ``work_dir/model.onnx``. Symbolic dims
of the InputSpec (``batch``, ``seq``...) stay dynamic in the graph under the same
names, so the model runs at other batch sizes / sequence lengths.
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from accel.models import calls
from accel.models.calls import bind_dynamic_shapes, bind_inputs, call_module
from accel.models.forms import COMPILED, EAGER, EXPORTED, SCRIPTED
from accel.passes._global_pool import SCRIPT_FIXED_MAPS, exact_global_pools
from accel.passes._global_pool import script_helpers as global_pool_script_helpers
from accel.passes.base import (
    STAGE_LOWER,
    Pass,
    PassConfig,
    PassContext,
    Requirements,
    ScriptStep,
    SearchSpec,
    recipe_threads,
    register_pass,
)
from accel.runtimes.onnxruntime.onnx_io import EXTERNAL_DATA_THRESHOLD, save_onnx

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)

# Opset ranges each exporter can write (torch.onnx._constants in torch 2.6+); the dynamo
# exporter translates at opset 18 and converts upwards, lower opsets are not reliable.
TORCHSCRIPT_OPSETS = (7, 20)
DYNAMO_OPSETS = (18, 23)
DEFAULT_OPSET = {"dynamo": 18, "torchscript": 17}


class ExportOnnxConfig(PassConfig):
    exporter: Literal["dynamo", "torchscript"] = Field(
        "dynamo",
        description="dynamo: torch.export + onnxscript (recommended by PyTorch); "
        "torchscript: the older tracing exporter (faster to run, opsets 7-20)",
    )
    opset: int | None = Field(
        None, description="ONNX opset version (default: 18 for dynamo, 17 for torchscript)"
    )
    dynamic: bool = Field(
        True,
        description="keep the input spec's symbolic dims (batch, seq, ...) dynamic in the graph",
    )
    simplify: bool = Field(
        False,
        description="simplify the graph with onnxslim (constant folding, dead nodes, fusions)",
    )
    external_data: bool | None = Field(
        None,
        description="store weights in model.onnx.data next to the .onnx file "
        "(default: only when the weights are over 1.8 GB, the protobuf limit)",
    )

    @field_validator("opset")
    @classmethod
    def _opset_the_exporter_writes(cls, opset: int | None, info: ValidationInfo) -> int | None:
        """An opset the chosen exporter cannot write is refused where it is typed (the GUI's
        form, a recipe file), not when the run reaches the step."""
        if opset is not None:
            problem = opset_problem(info.data.get("exporter", "dynamo"), opset)
            if problem:
                raise ValueError(problem)
        return opset


def opset_problem(exporter: str, opset: int) -> str | None:
    """Why ``exporter`` cannot write ``opset`` (None: it can), naming both ranges."""
    lo, hi = opset_range(exporter)
    if lo <= opset <= hi:
        return None
    other = "torchscript" if exporter == "dynamo" else "dynamo"
    olo, ohi = opset_range(other)
    return (
        f"opset {opset} is not possible with the {exporter} exporter: it writes opsets "
        f"{lo} to {hi} (the {other} exporter: {olo} to {ohi}). Set opset in that range."
    )


def opset_range(exporter: str) -> tuple[int, int]:
    return DYNAMO_OPSETS if exporter == "dynamo" else TORCHSCRIPT_OPSETS


def dynamic_axes(spec: Any) -> dict[str, dict[int, str]]:
    """{input name: {axis: symbolic dim name}} from an InputSpec (inputs with no symbolic dim left out)."""
    out: dict[str, dict[int, str]] = {}
    for t in spec.inputs:
        axes = {i: d for i, d in enumerate(t.shape) if isinstance(d, str)}
        if axes:
            out[t.name] = axes
    return out


def _output_names(outputs: Any) -> list[str]:
    import torch

    n = 0

    def count(o: Any) -> None:
        nonlocal n
        if isinstance(o, torch.Tensor):
            n += 1
        elif isinstance(o, (list, tuple)):
            for x in o:
                count(x)
        elif isinstance(o, dict):
            for x in o.values():
                count(x)

    count(outputs)
    return ["output"] if n == 1 else [f"output_{i}" for i in range(n)]


def _unwrap(module: Any) -> Any:
    # torch.compile wraps the module; export the original.
    return getattr(module, "_orig_mod", module)


_OP_PATTERNS = (
    re.compile(r"Exporting the operator '([^']+)'"),
    re.compile(r"unrecognized namespace ([\w:.]+)"),
    re.compile(r"No ONNX function found for <OpOverload\(op='([^']+)'"),
    re.compile(r"OpOverload\(op='([^']+)'"),
    re.compile(r"target=torch\.ops\.([\w.]+)"),
    re.compile(r"operator ([\w]+::[\w.]+)"),
)


def explain_export_error(exc: BaseException, exporter: str, opset: int) -> str:
    """A PassError message for an exporter failure: which op, and the ways out."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    where = re.search(
        r"The following call raised this error:\s*\n\s*File \"([^\"]+)\", line (\d+), in (\w+)\n\s*(.+)",
        text,
    )
    if "data-dependent" in text or "GuardOnDataDependent" in text:
        at = (
            f" at {Path(where.group(1)).name}:{where.group(2)} (`{where.group(4).strip()}`)"
            if where
            else ""
        )
        return (
            f"the {exporter} ONNX exporter cannot capture data-dependent control flow{at}: a Python "
            "branch or size that depends on tensor values. Ways out: rewrite it with torch.where / "
            "torch.cond, or use exporter: torchscript, which traces only the path the example "
            "inputs take (check parity on other inputs)."
        )
    summary = re.search(r"Exception summary\s*\n\s*<class '([\w.]+)'>: (.+)", text)
    op = next((m.group(1) for p in _OP_PATTERNS if (m := p.search(text))), None)
    added = re.search(r"added in version (\d+)", text)
    other = "torchscript" if exporter == "dynamo" else "dynamo"
    if op is None:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
        if summary:
            first = f"{summary.group(1).rsplit('.', 1)[-1]}: {summary.group(2).strip()}"
        return (
            f"the {exporter} ONNX exporter failed at opset {opset}: {type(exc).__name__}: {first[:400]}. "
            f"Try exporter: {other}, a higher opset, or rewrite the part of forward() it cannot trace."
        )
    ways = []
    if added:
        need = int(added.group(1))
        lo, hi = opset_range(exporter)
        if need <= hi:
            ways.append(f"set opset: {need} or higher (ONNX added it in opset {need})")
        else:
            ways.append(
                f"it needs opset {need}, beyond the {exporter} exporter's {hi}; use exporter: {other}"
            )
    else:
        ways.append(f"a higher opset (now {opset}) if a newer ONNX version has it")
    ways.append(f"the other exporter (exporter: {other})")
    ways.append(
        "rewrite that part of the model with ops ONNX has, or register a symbolic / onnxscript "
        "function for the op (torch.onnx.register_custom_op_symbolic, custom_translation_table)"
    )
    return (
        f"the {exporter} ONNX exporter has no ONNX mapping for op {op} at opset {opset}. "
        f"Ways out: {'; '.join(ways)}."
    )


def _export(
    module: Any,
    args: tuple,
    path: Path,
    names: list[str],
    out_names: list[str],
    axes: dict[str, dict[int, str]],
    config: ExportOnnxConfig,
    opset: int,
    external: bool,
) -> list[str]:
    """Run the chosen exporter; the file lands at ``path`` (external data may follow).

    Returns the tracer's warnings about Python values frozen into the graph (data-dependent
    control flow the TorchScript exporter traced along one path)."""
    import warnings

    import torch

    with warnings.catch_warnings(record=True) as caught:
        # Recorded, not shown: the TorchScript exporter's deprecation is not actionable here;
        # tracer warnings come back to the user through ctx.warn.
        warnings.simplefilter("always")
        # Bound to forward's signature: *args wrappers nest, keyword-only parameters go by name.
        call_args, call_kwargs = bind_inputs(module, dict(zip(names, args)))
        if call_kwargs and config.exporter == "torchscript":
            _refuse_keyword_only(call_kwargs)
        with torch.inference_mode(False), torch.no_grad():
            if config.exporter == "torchscript":
                torch.onnx.export(
                    module,
                    call_args,
                    str(path),
                    input_names=names,
                    output_names=out_names,
                    dynamic_axes=axes or None,
                    opset_version=opset,
                    do_constant_folding=True,
                    dynamo=False,
                )
            else:
                dims = _dynamic_shapes(module, names, axes)
                program = torch.onnx.export(
                    module,
                    call_args,
                    kwargs=call_kwargs or None,
                    input_names=names,
                    output_names=out_names,
                    dynamic_shapes=dims,
                    opset_version=opset,
                    dynamo=True,
                    verbose=False,
                    optimize=True,
                )
                program.save(str(path), external_data=external)
    return _tracer_warnings(caught)


def _refuse_keyword_only(call_kwargs: dict[str, Any]) -> None:
    from accel.errors import PassError

    raise PassError(
        "the torchscript ONNX exporter traces forward() with positional arguments, and this "
        f"forward takes {', '.join(call_kwargs)} as keyword-only parameters; use exporter: "
        "dynamo (it passes them by name)"
    )


def _dynamic_shapes(module: Any, names: list[str], axes: dict[str, dict[int, str]]) -> Any:
    """The dynamo exporter's dynamic_shapes for the spec's symbolic dims (None: static)."""
    import torch

    if not axes:
        return None
    per_input = [{i: torch.export.Dim.DYNAMIC for i in axes.get(n, {})} for n in names]
    return bind_dynamic_shapes(module, names, per_input)


def _tracer_warnings(caught: list[Any]) -> list[str]:
    """The tracer's warnings about Python values frozen into the graph, once each."""
    import torch

    found = []
    torch_dir = str(Path(torch.__file__).parent)
    for w in caught:
        # torch's own modules (nn.LSTM...) warn about values that are safe to freeze
        if w.category.__name__ == "TracerWarning" and not w.filename.startswith(torch_dir):
            msg = f"{Path(w.filename).name}:{w.lineno}: {str(w.message).split('. ')[0]}"
            if msg not in found:
                found.append(msg)
    return found


def rename_dims(proto: Any, axes: dict[str, dict[int, str]]) -> int:
    """Give the graph's symbolic dims the InputSpec's names (dynamo writes s0, s1...).

    Returns how many dim_params were renamed."""
    mapping: dict[str, str] = {}
    for inp in proto.graph.input:
        for i, d in enumerate(inp.type.tensor_type.shape.dim):
            want = axes.get(inp.name, {}).get(i)
            if want and d.HasField("dim_param") and d.dim_param != want:
                mapping.setdefault(d.dim_param, want)
    if not mapping:
        return 0
    n = 0
    for vi in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in mapping:
                d.dim_param = mapping[d.dim_param]
                n += 1
    return n


def _checked_opset(config: ExportOnnxConfig) -> int:
    """The opset to write; one the chosen exporter cannot write is an error saying the range."""
    from accel.errors import PassError

    opset = config.opset or DEFAULT_OPSET[config.exporter]
    problem = opset_problem(config.exporter, opset)  # a config built without validation
    if problem:
        raise PassError(problem)
    return opset


def _float_for_ort(model: LoadedModel, module: Any, ctx: PassContext) -> tuple[LoadedModel, Any]:
    """The model and module to export: a float32 copy when the weights are in a precision
    ONNX Runtime cannot run on the device (bf16 anywhere, fp16 on CPU), else unchanged."""
    import torch

    low = {
        p.dtype
        for p in module.parameters()
        if p.is_floating_point() and p.dtype in (torch.bfloat16, torch.float16)
    }
    upcast = torch.bfloat16 in low or (low and not str(ctx.device).startswith("cuda"))
    if not upcast:
        return model, module
    # ONNX Runtime has no bf16 (and on CPU hardly any fp16) kernels for Gemm/Conv/MatMul.
    # Export in float32: the weights keep their low-precision rounding (the upcast is
    # exact), the compute is fp32. onnx_fp16 is the way to fp16 in ONNX Runtime.
    import copy

    names_low = ", ".join(sorted(str(d).replace("torch.", "") for d in low))
    ctx.warn(
        f"the model has {names_low} weights, which ONNX Runtime cannot run on {ctx.device}; "
        "exported in float32 (weights keep their rounding). Use onnx_fp16 after export for fp16 in ONNX Runtime."
    )
    ctx.details["upcast_to_float32"] = names_low
    return model.replace(input_casts={}), copy.deepcopy(module).float()


def _run_exporter(
    module: Any,
    args: tuple[Any, ...],
    path: Path,
    names: list[str],
    out_names: list[str],
    axes: dict[str, dict[int, str]],
    config: ExportOnnxConfig,
    opset: int,
    external: bool,
    ctx: PassContext,
) -> None:
    """Write ``path`` with the chosen exporter; its failures become a PassError that
    explains them, values the tracer froze become warnings."""
    from accel.errors import PassError

    t0 = time.perf_counter()
    try:
        traced = _export(module, args, path, names, out_names, axes, config, opset, external)
    except PassError:
        raise
    except Exception as exc:  # the exporters raise many types; all mean "cannot export"
        log.debug("ONNX export failed", exc_info=True)
        raise PassError(explain_export_error(exc, config.exporter, opset)) from None
    ctx.metrics["export_time_s"] = time.perf_counter() - t0
    for msg in traced[:3]:
        ctx.warn(
            f"the tracer froze a Python value computed from a tensor ({msg}); the graph follows "
            "the example inputs' path there. Check parity on other inputs or use exporter: dynamo."
        )


def _checked_graph(
    path: Path,
    axes: dict[str, dict[int, str]],
    config: ExportOnnxConfig,
    external: bool,
    before: set[Path],
    ctx: PassContext,
) -> tuple[Any, bool, int, int]:
    """The exported graph with named dynamic dims, simplified (``simplify``), saved again
    (one external data file at most) and passed through onnx.checker. Returns the graph,
    whether its weights are in external data, its node count before simplifying and the
    number of dims renamed."""
    import onnx

    from accel.errors import PassError

    proto = onnx.load(str(path))
    nodes_before = len(proto.graph.node)
    renamed = rename_dims(proto, axes)
    if config.simplify:
        ctx.progress(0.7, "simplifying with onnxslim")
        import onnxslim

        try:
            proto = onnxslim.slim(proto)
        except Exception as exc:  # noqa: BLE001 - keep the unsimplified graph
            ctx.warn(
                f"onnxslim could not simplify the graph ({type(exc).__name__}: {exc}); kept it as exported"
            )
    external = save_onnx(proto, path, True if external else config.external_data)
    # Exporters may write big weights as one file per tensor; they now live in model.onnx.data.
    for f in set(ctx.work_dir.iterdir()) - before:
        if f.name not in (path.name, path.name + ".data") and f.is_file():
            f.unlink()
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # onnx raises ValidationError / InferenceError
        raise PassError(
            f"the exported ONNX model does not pass onnx.checker: {str(exc).splitlines()[0][:400]}. "
            f"Try the other exporter or another opset."
        ) from None
    return proto, external, nodes_before, renamed


def _weight_bytes(module: Any) -> int:
    import torch

    tensors = module.state_dict().values()
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _record_export(
    ctx: PassContext,
    proto: Any,
    config: ExportOnnxConfig,
    opset: int,
    axes: dict[str, dict[int, str]],
    out_names: list[str],
    external: bool,
) -> None:
    """The step's details and metrics: how it was exported and what the graph holds."""
    op_types: dict[str, int] = {}
    for n in proto.graph.node:
        op_types[n.op_type] = op_types.get(n.op_type, 0) + 1
    ctx.details.update(
        {
            "exporter": config.exporter,
            "opset": opset,
            "dynamic_axes": {k: {str(i): d for i, d in v.items()} for k, v in axes.items()},
            "output_names": out_names,
            "external_data": external,
            "onnx_nodes": len(proto.graph.node),
            "op_types": dict(sorted(op_types.items(), key=lambda kv: -kv[1])),
        }
    )
    ctx.metrics["onnx_nodes"] = float(len(proto.graph.node))


@register_pass
class ExportOnnx(Pass):
    name = "export_onnx"
    search = SearchSpec(stage=STAGE_LOWER)
    summary = "Export the model to ONNX (dynamo or TorchScript exporter), checked, optionally simplified; later steps run the ONNX file."
    category = "export"
    Config = ExportOnnxConfig
    requires = Requirements(
        model_kinds=("torch",),
        libraries=("onnx", "onnxscript", "onnxslim"),
        accepts=(EAGER, COMPILED, SCRIPTED, EXPORTED),
    )
    output_kind = "onnx"

    def apply(self, model: LoadedModel, config: ExportOnnxConfig, ctx: PassContext) -> LoadedModel:
        import torch

        from accel.models import load_model

        opset = _checked_opset(config)
        model, module = _float_for_ort(model, _unwrap(model.module), ctx)
        inputs = model.prepare_inputs(ctx.inputs)
        names = list(inputs)
        args = tuple(inputs.values())
        with torch.no_grad():
            out_names = _output_names(call_module(module, inputs))
        axes = dynamic_axes(model.input_spec) if config.dynamic else {}
        ctx.work_dir.mkdir(parents=True, exist_ok=True)
        path = ctx.work_dir / "model.onnx"
        ctx.progress(0.1, f"exporting with the {config.exporter} exporter (opset {opset})")
        before = set(ctx.work_dir.iterdir())
        external = config.external_data
        if external is None:  # one protobuf cannot hold more than 2 GiB
            external = _weight_bytes(module) > EXTERNAL_DATA_THRESHOLD
        fixed_maps = not any(a >= 2 for dims in axes.values() for a in dims)
        with exact_global_pools(module, lambda: call_module(module, inputs), fixed_maps) as pools:
            if pools:
                ctx.details["global_pools_as_mean"] = pools
            _run_exporter(module, args, path, names, out_names, axes, config, opset, external, ctx)
        ctx.check_cancelled()

        ctx.progress(0.6, "checking the ONNX graph")
        proto, external, nodes_before, renamed = _checked_graph(
            path, axes, config, external, before, ctx
        )
        loaded = load_model(str(path), model.input_spec, device=model.device)
        ctx.add_artifact(path, "onnx")
        if external:
            ctx.add_artifact(path.with_name(path.name + ".data"), "onnx_external_data")
        _record_export(ctx, proto, config, opset, axes, out_names, external)
        if config.simplify:
            ctx.details["nodes_before_simplify"] = nodes_before
        if renamed:
            ctx.details["renamed_dims"] = renamed
        metadata = {**model.metadata, "opset": opset, "exporter": config.exporter}
        threads = recipe_threads(ctx)  # time ORT with the recipe's thread count, as eager
        return model.replace(
            kind="onnx",
            module=None,
            onnx_path=path,
            num_params=loaded.num_params,
            size_bytes=loaded.size_bytes,
            content_hash=loaded.content_hash,
            format="onnx",
            providers=None,
            session_options={"intra_op_threads": threads} if threads else {},
            metadata=metadata,
        )

    def to_script(self, config: ExportOnnxConfig) -> ScriptStep:
        opset = config.opset or DEFAULT_OPSET[config.exporter]
        lines = [
            "# ONNX Runtime lacks bf16 (and on CPU most fp16) kernels: export such a model in fp32.",
            "_low = {p.dtype for p in model.parameters() if p.dtype in (torch.bfloat16, torch.float16)}",
            'if torch.bfloat16 in _low or (_low and not device.startswith("cuda")):',
            "    model = model.float()",
            "    input_casts = {}",
            'onnx_path = step_dir / "model.onnx"',
            "export_args = tuple((x.to(input_casts[k]) if k in input_casts and x.is_floating_point() else x).to(device)",
            "                    for k, x in inputs.items())",
            "# Bound to forward's signature: *args wrappers nest, keyword-only parameters go by name.",
            "call_args, call_kwargs = bind_inputs(model, dict(zip(inputs, export_args)))",
            "with torch.no_grad():",
            "    _out = model(*call_args, **call_kwargs)",
            "    _n = len(_out) if isinstance(_out, (tuple, list)) else 1",
            'output_names = ["output"] if _n == 1 else [f"output_{i}" for i in range(_n)]',
        ]
        fixed = SCRIPT_FIXED_MAPS if config.dynamic else "True"
        lines += [
            "# Average pools whose window covers the whole map export as a mean (ONNX Runtime's",
            "# int8 pool gave wrong outputs on them), while the spatial sizes are fixed.",
            "with exact_global_pools(model, lambda: model(*call_args, **call_kwargs),",
            f"                        {fixed}):",
            *(f"    {line}" for line in _script_export_call(config, opset)),
        ]
        imports = ["import contextlib", "import onnx"]
        if config.simplify:
            imports.append("import onnxslim")
            lines += ["onnx.save(onnxslim.slim(onnx.load(str(onnx_path))), str(onnx_path))"]
        if config.external_data:
            lines += [
                "# Weights in one file next to the model (the folder travels as a whole).",
                "onnx_model = onnx.load(str(onnx_path))",
                '(step_dir / "model.onnx.data").unlink(missing_ok=True)  # onnx.save appends to it',
                "onnx.save(onnx_model, str(onnx_path), save_as_external_data=True,",
                '          all_tensors_to_one_file=True, location="model.onnx.data")',
            ]
        lines += [
            "onnx.checker.check_model(str(onnx_path), full_check=True)",
            'kind, model, session = "onnx", None, make_session(onnx_path)',
        ]
        helpers = [
            inspect.getsource(f)
            for f in (
                calls.forward_signature,
                calls._exported_keywords,
                calls.bind_inputs,
                calls.bind_dynamic_shapes,
            )
        ] + global_pool_script_helpers()
        return ScriptStep(code="\n".join(lines) + "\n", imports=imports, helpers=helpers)


def _script_export_call(config: ExportOnnxConfig, opset: int) -> list[str]:
    """The script's lines that run the chosen exporter into ``onnx_path``."""
    if config.exporter == "torchscript":
        axes = "DYNAMIC_AXES or None" if config.dynamic else "None"
        return [
            "torch.onnx.export(",
            "    model, call_args, str(onnx_path), input_names=list(inputs), output_names=output_names,",
            f"    dynamic_axes={axes}, opset_version={opset}, do_constant_folding=True, dynamo=False,",
            ")",
        ]
    lines: list[str] = []
    shapes = "None"
    if config.dynamic:
        lines += [
            "# The symbolic dims stay dynamic (ONNX names them s0, s1...); one entry per input, in order.",
            "dynamic_shapes = bind_dynamic_shapes(model, list(inputs),",
            "    [{i: torch.export.Dim.DYNAMIC for i in DYNAMIC_AXES.get(n, {})} for n in inputs])",
        ]
        shapes = "dynamic_shapes if DYNAMIC_AXES else None"
    return lines + [
        "program = torch.onnx.export(",
        "    model, call_args, kwargs=call_kwargs or None, input_names=list(inputs),",
        "    output_names=output_names,",
        f"    dynamic_shapes={shapes}, opset_version={opset}, dynamo=True, verbose=False, optimize=True,",
        ")",
        f"program.save(str(onnx_path), external_data={bool(config.external_data)!r})",
    ]
