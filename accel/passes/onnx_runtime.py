"""ONNX Runtime passes: session tuning (``onnxruntime``) and fp16 conversion (``onnx_fp16``)."""

from __future__ import annotations

import inspect
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.passes.base import (
    STAGE_RUNTIME_NUMERIC,
    STAGE_SESSION,
    Choice,
    Pass,
    PassConfig,
    PassContext,
    Requirements,
    ScriptStep,
    SearchSpec,
    recipe_threads,
    register_pass,
)

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)

PROVIDER_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
# Fallback order: the first that starts runs the model, nodes it lacks go to the next.
FALLBACK_ORDER = ("tensorrt", "cuda", "cpu")
ORT_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


class OnnxRuntimeConfig(PassConfig):
    graph_optimization_level: Literal["disabled", "basic", "extended", "all"] = Field(
        "all",
        description="ORT graph optimizations: basic (constant folding, redundant nodes), "
        "extended (fusions: GELU, LayerNorm, attention), all (+ layout optimizations)",
    )
    intra_op_threads: int | None = Field(
        None, ge=1, description="threads inside one op (default: ORT's choice, the physical cores)"
    )
    inter_op_threads: int | None = Field(
        None, ge=1, description="threads across independent ops (parallel execution mode only)"
    )
    execution_mode: Literal["sequential", "parallel"] = Field(
        "sequential", description="run independent branches of the graph in parallel"
    )
    providers: list[Literal["tensorrt", "cuda", "cpu"]] | None = Field(
        None,
        description="execution providers in fallback order; only those available are used "
        "(default: tensorrt, cuda, cpu on a GPU device; cpu otherwise)",
    )
    io_binding: bool = Field(
        True, description="on a GPU, bind inputs and outputs on the device (IOBinding)"
    )
    save_optimized: bool = Field(
        True, description="save the graph ORT optimized as an artifact (model.optimized.onnx)"
    )


def requested_providers(config_providers: list[str] | None, device: str) -> list[str]:
    """The ORT provider names asked for, in fallback order."""
    names = config_providers
    if not names:
        names = list(FALLBACK_ORDER) if str(device).startswith("cuda") else ["cpu"]
    return [PROVIDER_NAMES[n] for n in names]


def session_options(
    config: OnnxRuntimeConfig, default_threads: int | None = None
) -> dict[str, Any]:
    """The LoadedModel.session_options dict (read by accel.runtimes.onnxruntime.onnx_io.create_session)."""
    opts: dict[str, Any] = {"graph_optimization_level": config.graph_optimization_level}
    threads = config.intra_op_threads or default_threads
    if threads:
        opts["intra_op_threads"] = threads
    if config.inter_op_threads:
        opts["inter_op_threads"] = config.inter_op_threads
    if config.execution_mode == "parallel":
        opts["execution_mode"] = "parallel"
    opts["io_binding"] = config.io_binding
    return opts


def _check_providers(
    config: OnnxRuntimeConfig, requested: list[str], usable: list[str], ctx: PassContext
) -> None:
    """Refuse when none of the providers asked for runs here; warn about the missing ones."""
    from accel.errors import PassError

    missing = [p for p in requested if p not in usable]
    if config.providers and len(missing) == len(requested):
        raise PassError(
            f"none of the execution providers asked for can run here: "
            f"{', '.join(missing)} (available: {', '.join(usable)}). GPU providers need "
            "onnxruntime-gpu built for this machine's CUDA (and TensorRT's libraries for "
            "the TensorRT provider) and a cuda device; add 'cpu' to the list to fall back "
            "to the CPU instead"
        )
    if missing and config.providers:
        ctx.warn(
            f"providers not available here: {', '.join(missing)} "
            f"(available: {', '.join(usable)}); using the rest of the list"
        )


def _keep_optimized(optimized: Path, ctx: PassContext) -> None:
    """The graph ORT optimized, as an artifact, and its node count."""
    ctx.add_artifact(optimized, "onnx_optimized")
    try:
        import onnx

        model = onnx.load(str(optimized), load_external_data=False)
        ctx.details["optimized_nodes"] = len(model.graph.node)
    except Exception as exc:  # noqa: BLE001 - a count for humans only
        log.debug("cannot read the optimized model: %s", exc)


@register_pass
class OnnxRuntime(Pass):
    name = "onnxruntime"
    search = SearchSpec(
        stage=STAGE_SESSION,
        params={
            "graph_optimization_level": Choice(("all", "extended", "basic")),
            "execution_mode": Choice(("sequential", "parallel")),
        },
    )
    summary = "Run the ONNX model with tuned ONNX Runtime settings: graph optimization level, threads, execution providers (TensorRT, CUDA, CPU)."
    category = "runtime"
    Config = OnnxRuntimeConfig
    requires = Requirements(model_kinds=("onnx",), libraries=("onnxruntime",))

    def apply(self, model: LoadedModel, config: OnnxRuntimeConfig, ctx: PassContext) -> LoadedModel:
        from accel.errors import ModelLoadError, PassError
        from accel.runtimes.onnxruntime.onnx_io import create_session, usable_providers

        if config.inter_op_threads and config.execution_mode != "parallel":
            ctx.warn("inter_op_threads only matters with execution_mode: parallel; it is ignored")
        requested = requested_providers(config.providers, ctx.device)
        usable = usable_providers(ctx.device)
        _check_providers(config, requested, usable, ctx)
        opts = session_options(config, recipe_threads(ctx))
        create_opts = dict(opts)
        optimized = ctx.work_dir / "model.optimized.onnx"
        if config.save_optimized and config.graph_optimization_level != "disabled":
            ctx.work_dir.mkdir(parents=True, exist_ok=True)
            create_opts["optimized_model_path"] = optimized
        ctx.progress(0.2, "creating the ONNX Runtime session")
        t0 = time.perf_counter()
        try:
            session = create_session(model.onnx_path, requested, create_opts, ctx.device)
        except ModelLoadError as exc:
            raise PassError(
                f"{exc} (graph_optimization_level={config.graph_optimization_level}; "
                "try a lower level or another provider)"
            ) from None
        ctx.metrics["session_create_s"] = time.perf_counter() - t0
        active = list(session.get_providers())
        ctx.details.update(
            {
                "providers_requested": requested,
                "providers_available": usable,
                "providers_active": active,
                "provider": active[0],
                "graph_optimization_level": config.graph_optimization_level,
                "intra_op_threads": opts.get("intra_op_threads"),
                "inter_op_threads": config.inter_op_threads,
                "execution_mode": config.execution_mode,
                "io_binding": bool(config.io_binding and active[0] != "CPUExecutionProvider"),
            }
        )
        if requested[0] != active[0]:
            ctx.warn(f"{requested[0]} is not running this model; {active[0]} is")
        if "optimized_model_path" in create_opts and optimized.is_file():
            _keep_optimized(optimized, ctx)
        return model.replace(
            providers=active, session_options=opts, device=ctx.device, _session=session
        )

    def to_script(self, config: OnnxRuntimeConfig) -> ScriptStep:
        level = ORT_LEVELS[config.graph_optimization_level]
        opts = [f"'graph_optimization_level': ort.GraphOptimizationLevel.{level}"]
        if config.intra_op_threads:
            opts.append(f"'intra_op_num_threads': {config.intra_op_threads}")
        if config.inter_op_threads:
            opts.append(f"'inter_op_num_threads': {config.inter_op_threads}")
        if config.execution_mode == "parallel":
            opts.append("'execution_mode': ort.ExecutionMode.ORT_PARALLEL")
        if config.save_optimized and config.graph_optimization_level != "disabled":
            opts.append("'optimized_model_filepath': str(step_dir / 'model.optimized.onnx')")
        imports = ["import onnxruntime as ort"]
        if config.providers:
            prov = f"ort_providers = {[PROVIDER_NAMES[p] for p in config.providers]!r}\n"
        else:
            imports.append("import importlib.util")
            prov = (
                "ort_providers = ['CPUExecutionProvider']\n"
                "if device.startswith('cuda'):\n"
                "    ort_providers = ['CUDAExecutionProvider', 'CPUExecutionProvider']\n"
                "    if importlib.util.find_spec('tensorrt'):  # TensorRT first where it is installed\n"
                "        ort_providers.insert(0, 'TensorrtExecutionProvider')\n"
            )
        code = (
            "ort_options = {\n    "
            + ",\n    ".join(opts)
            + ",\n}\n"
            + prov
            + "session = make_session(onnx_path, ort_providers, ort_options)\n"
            + "ort_options.pop('optimized_model_filepath', None)  # later sessions: same options, no re-save\n"
            + "print('     onnxruntime providers:', session.get_providers())\n"
        )
        return ScriptStep(code=code, imports=imports)


# -- fp16 -----------------------------------------------------------------------------------


class OnnxFp16Config(PassConfig):
    keep_io_types: bool = Field(
        True, description="keep float32 inputs and outputs (casts inside the graph)"
    )
    op_block_list: list[str] | None = Field(
        None,
        description="op types kept in float32. Default: ONNX Runtime's list of ops unsafe in "
        "fp16, plus on CPU the ops of this model ORT has no fp16 CPU kernel for (found by a "
        "trial session), so the graph does not cast back and forth around them",
    )
    node_block_list: list[str] = Field(
        default_factory=list, description="node names kept in float32 (e.g. a sensitive last layer)"
    )


def default_block_list() -> list[str]:
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    return list(DEFAULT_OP_BLOCK_LIST)


def convert_fp16(
    proto: Any, keep_io_types: bool, op_block_list: list[str], node_block_list: list[str]
) -> Any:
    """onnxruntime's fp16 converter, quiet."""
    import warnings

    from onnxruntime.transformers.float16 import convert_float_to_float16

    with warnings.catch_warnings():
        # It warns for every constant clipped to the fp16 range; the parity check reports the effect.
        warnings.simplefilter("ignore")
        return convert_float_to_float16(
            proto,
            keep_io_types=keep_io_types,
            op_block_list=op_block_list,
            node_block_list=node_block_list or None,
        )


# tidy_graph and ops_without_fp16_cpu_kernel are also written into exported scripts
# (inspect.getsource), so they carry no annotations and import what they use.
def tidy_graph(proto):
    """Sort the main graph's nodes so each comes after its producers, dropping exact
    duplicates (the fp16 converter appends its Cast nodes at the end, and adds the same
    Cast twice when a value feeds two blocked nodes; onnx.checker rejects both)."""
    graph = proto.graph
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    seen = set()
    pending = []
    for node in graph.node:
        key = node.SerializeToString(deterministic=True)
        if key not in seen:
            seen.add(key)
            pending.append(node)
    ordered = []
    while pending:
        rest = []
        for node in pending:
            if all(i in known for i in node.input):
                ordered.append(node)
                known.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):  # a cycle or a missing producer: leave the rest as is
            ordered += rest
            break
        pending = rest
    nodes = [type(n)() for n in ordered]
    for dst, src in zip(nodes, ordered):
        dst.CopyFrom(src)
    del graph.node[:]
    graph.node.extend(nodes)
    return proto


def ops_without_fp16_cpu_kernel(proto, work_dir):
    """Op types of an fp16 model that ORT's CPU provider runs through inserted fp32 casts.

    ORT's InsertCastTransformer wraps nodes with no fp16 CPU kernel in Cast nodes named
    ``InsertedPrecisionFreeCast_*``; the nodes fed by the casts to float are those ops."""
    import onnx
    import onnxruntime as ort

    probe = work_dir / "fp16_probe.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.optimized_model_filepath = str(probe)
    so.log_severity_level = 3
    try:
        ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        graph = onnx.load(str(probe)).graph
    finally:
        probe.unlink(missing_ok=True)
    to_float = {
        n.output[0]
        for n in graph.node
        if n.op_type == "Cast"
        and n.name.startswith("InsertedPrecisionFreeCast")
        and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in n.attribute)
    }
    return sorted({n.op_type for n in graph.node if any(i in to_float for i in n.input)})


def _convert_for_device(
    model: LoadedModel, proto: Any, config: OnnxFp16Config, ctx: PassContext, on_cpu: bool
) -> tuple[Any, list[str]]:
    """The float16 graph and the op types kept in float32: the block list asked for, or the
    default one plus (on CPU) the ops ONNX Runtime has no fp16 CPU kernel for."""
    import onnx

    from accel.errors import PassError

    block = default_block_list() if config.op_block_list is None else list(config.op_block_list)
    ctx.progress(0.2, "converting to float16")
    try:
        fp16 = convert_fp16(proto, config.keep_io_types, block, config.node_block_list)
        if config.op_block_list is None and on_cpu:
            ctx.progress(0.5, "finding ops with no fp16 CPU kernel")
            ctx.work_dir.mkdir(parents=True, exist_ok=True)
            # The converter's duplicate Casts (one value feeding two blocked nodes) must go
            # before ORT loads the graph to probe it (it rejects two nodes of one name).
            probed = ops_without_fp16_cpu_kernel(tidy_graph(fp16), ctx.work_dir)
            extra = [op for op in probed if op not in block]
            if extra:
                ctx.details["blocked_for_cpu"] = extra
                ctx.warn(
                    f"kept in float32 on CPU, as ONNX Runtime has no fp16 CPU kernel for them: "
                    f"{', '.join(extra)}. Set op_block_list (e.g. []) to convert them too; "
                    "ORT then casts around them at run time"
                )
                block += extra
                fp16 = convert_fp16(
                    onnx.load(str(model.onnx_path)),
                    config.keep_io_types,
                    block,
                    config.node_block_list,
                )
    except PassError:
        raise
    except Exception as exc:  # converter / ORT errors
        raise PassError(
            f"fp16 conversion failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}. "
            "Add the op named there to op_block_list, or skip this step."
        ) from None
    return fp16, block


@register_pass
class OnnxFp16(Pass):
    name = "onnx_fp16"
    search = SearchSpec(stage=STAGE_RUNTIME_NUMERIC, devices=("cuda",))
    summary = "Convert the ONNX model's weights and math to float16 (float32 inputs/outputs kept); halves its size, fast on GPUs."
    category = "precision"
    Config = OnnxFp16Config
    requires = Requirements(model_kinds=("onnx",), libraries=("onnx", "onnxruntime"))

    def apply(self, model: LoadedModel, config: OnnxFp16Config, ctx: PassContext) -> LoadedModel:
        import onnx

        from accel.errors import PassError
        from accel.models import load_model
        from accel.runtimes.onnxruntime.onnx_io import save_onnx

        proto = onnx.load(str(model.onnx_path))
        floats = [t for t in proto.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16]
        if floats and not any(
            t.data_type == onnx.TensorProto.FLOAT for t in proto.graph.initializer
        ):
            raise PassError("the ONNX model is already float16; remove the onnx_fp16 step")
        on_cpu = not str(ctx.device).startswith("cuda")
        fp16, block = _convert_for_device(model, proto, config, ctx, on_cpu)
        if on_cpu:
            ctx.warn(
                "fp16 on CPU: ONNX Runtime has few fp16 CPU kernels and runs the rest through "
                "casts, so it is usually slower than fp32 on CPU; measure it on the GPU it is meant for"
            )
        ctx.work_dir.mkdir(parents=True, exist_ok=True)
        path = ctx.work_dir / "model_fp16.onnx"
        fp16 = tidy_graph(fp16)
        external = save_onnx(fp16, path, None)
        try:
            onnx.checker.check_model(str(path))
        except Exception as exc:  # noqa: BLE001
            raise PassError(
                f"the fp16 model does not pass onnx.checker: {str(exc).splitlines()[0][:300]}"
            ) from None
        loaded = load_model(str(path), model.input_spec, device=model.device)
        ctx.add_artifact(path, "onnx")
        if external:
            ctx.add_artifact(path.with_name(path.name + ".data"), "onnx_external_data")
        n16 = sum(1 for t in fp16.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16)
        ctx.details.update(
            {
                "op_block_list": block,
                "node_block_list": list(config.node_block_list),
                "keep_io_types": config.keep_io_types,
                "fp16_initializers": n16,
                "fp32_initializers": sum(
                    1 for t in fp16.graph.initializer if t.data_type == onnx.TensorProto.FLOAT
                ),
            }
        )
        if model.size_bytes:
            ctx.metrics["size_ratio"] = loaded.size_bytes / model.size_bytes
        return model.replace(
            onnx_path=path,
            num_params=loaded.num_params,
            size_bytes=loaded.size_bytes,
            content_hash=loaded.content_hash,
            metadata={**model.metadata, "precision": "float16"},
        )

    def to_script(self, config: OnnxFp16Config) -> ScriptStep:
        imports = [
            "import warnings",
            "import onnx",
            "from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16",
        ]
        helpers: list[str] = [inspect.getsource(tidy_graph)]
        lines = []
        if config.op_block_list is None:
            lines.append("op_block_list = list(DEFAULT_OP_BLOCK_LIST)")
        else:
            lines.append(f"op_block_list = {list(config.op_block_list)!r}")
        lines += [
            "def to_fp16(blocked):",
            "    with warnings.catch_warnings():",
            "        warnings.simplefilter('ignore')  # one warning per constant clipped to the fp16 range",
            "        return convert_float_to_float16(",
            f"            onnx.load(str(onnx_path)), keep_io_types={config.keep_io_types!r},",
            f"            op_block_list=blocked, node_block_list={list(config.node_block_list) or None!r})",
            "fp16_model = to_fp16(op_block_list)",
        ]
        if config.op_block_list is None:
            helpers.append(inspect.getsource(ops_without_fp16_cpu_kernel))
            lines += [
                "if not device.startswith('cuda'):",
                "    # Keep in fp32 the ops ORT's CPU provider has no fp16 kernel for (no cast ping-pong).",
                "    probed = ops_without_fp16_cpu_kernel(tidy_graph(fp16_model), step_dir)  # no duplicate Casts",
                "    extra = [op for op in probed if op not in op_block_list]",
                "    if extra:",
                "        op_block_list += extra",
                "        fp16_model = to_fp16(op_block_list)",
            ]
        lines += [
            'onnx_path = step_dir / "model_fp16.onnx"',
            "onnx.save(tidy_graph(fp16_model), str(onnx_path))",
            "# Same providers and options as an earlier onnxruntime step, if any.",
            'session = make_session(onnx_path, globals().get("ort_providers"), globals().get("ort_options"))',
        ]
        return ScriptStep(code="\n".join(lines) + "\n", imports=imports, helpers=helpers)
