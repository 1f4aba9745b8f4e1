"""The OpenVINO handler: IR files (.xml + .bin) compiled by the OpenVINO runtime.

A model of this kind keeps its IR path in ``LoadedModel.ir_path`` and how to compile it in
``session_options``: ``device`` (CPU / GPU / AUTO), ``precision`` (f32 / bf16 / f16, the
inference precision hint), ``performance_hint`` (latency / throughput), ``threads`` and
``streams``. Its session is the compiled model with one infer request.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

from accel.backends.base import Backend, BenchTarget, ScriptRuntime
from accel.errors import ModelLoadError

if TYPE_CHECKING:
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)

_OV_DTYPES = {
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "f64": "float64",
    "i64": "int64",
    "i32": "int32",
    "i8": "int8",
    "u8": "uint8",
    "boolean": "bool",
}
PRECISIONS = {"f32": "f32", "bf16": "bf16", "f16": "f16"}


def module_path_of(name: str) -> str:
    """Torch module path encoded in an OpenVINO op name ("" when none).

    ``ov.convert_model`` on a torch module names ops ``__module.layer1.0.conv1/aten::...``;
    on an ONNX file from the TorchScript exporter ``/layer1/layer1.0/conv1/Conv``.
    """
    from accel.graph.from_onnx import scope_to_module_path

    head = name.split("/", 1)[0]
    if head.startswith("__module."):
        return head[len("__module.") :]
    if name.startswith("/"):
        parts = [p for p in name.split("/") if p]
        return scope_to_module_path(parts[:-1])
    return ""


def compile_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """OpenVINO compile properties from a model's ``session_options``."""
    cfg: dict[str, Any] = {
        "PERFORMANCE_HINT": str(options.get("performance_hint", "latency")).upper(),
    }
    precision = options.get("precision")
    if precision:
        cfg["INFERENCE_PRECISION_HINT"] = PRECISIONS[str(precision)]
    if options.get("threads"):
        cfg["INFERENCE_NUM_THREADS"] = int(options["threads"])
    if options.get("streams"):
        cfg["NUM_STREAMS"] = int(options["streams"])
    if options.get("perf_count"):
        cfg["PERF_COUNT"] = True
    return cfg


def read_ir(path: Path) -> Any:
    """Read an IR (.xml) with a clear error for a missing or broken file pair."""
    import openvino as ov

    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"OpenVINO IR file not found: {path}")
    weights = path.with_suffix(".bin")
    if not weights.is_file():
        raise ModelLoadError(
            f"{path} has no weights file {weights.name} next to it; an OpenVINO IR is a pair "
            "of files (.xml + .bin) with the same name: copy both"
        )
    try:
        return ov.Core().read_model(str(path), str(weights))
    except Exception as exc:  # OpenVINO raises RuntimeError with the parser's message
        raise ModelLoadError(
            f"OpenVINO cannot read {path}: {str(exc).strip().splitlines()[0][:300]}. "
            "Check that the .xml and .bin belong together and are complete."
        ) from None


def spec_from_ov(ov_model: Any) -> InputSpec:
    """An InputSpec from an OpenVINO model's inputs (dynamic dims become symbolic)."""
    from accel.models.inputs import InputSpec

    parts = []
    for i, inp in enumerate(ov_model.inputs):
        names = inp.get_names()
        name = inp.get_any_name() if names else f"input_{i}"
        dtype = _OV_DTYPES.get(inp.get_element_type().get_type_name(), "float32")
        dims = []
        for j, d in enumerate(inp.get_partial_shape()):
            dims.append(
                str(d.get_length()) if d.is_static else ("batch" if j == 0 else f"d{i}_{j}")
            )
        parts.append(f"{name}:{dtype}[{','.join(dims)}]")
    return InputSpec.parse("; ".join(parts))


def ov_stats(ov_model: Any, files: list[Path]) -> tuple[int, int, str]:
    """(parameter count, bytes of the files, sha256 of the files)."""
    n = 0
    for op in ov_model.get_ordered_ops():
        if op.get_type_name() == "Constant":
            shape = op.get_output_partial_shape(0)
            if shape.is_static and op.get_output_element_type(0).is_real():
                size = 1
                for d in shape.to_shape():
                    size *= int(d)
                if size > 1:
                    n += size
    h = hashlib.sha256()
    total = 0
    for f in files:
        total += f.stat().st_size
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return n, total, h.hexdigest()


def to_numpy_feed(compiled: Any, inputs: Mapping[str, Any]) -> dict[int, Any]:
    """Inputs by port index as numpy arrays (matched by name, else by position)."""
    import numpy as np
    import torch

    values = list(inputs.values())
    feed = {}
    for i, port in enumerate(compiled.inputs):
        names = port.get_names()
        x = next((inputs[n] for n in names if n in inputs), None)
        if x is None:
            x = values[i]
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            if x.dtype == torch.bfloat16 or x.dtype == torch.float16:
                x = x.float()
            x = x.numpy()
        x = np.ascontiguousarray(x)
        want = _OV_DTYPES.get(port.get_element_type().get_type_name())
        if want in ("float32", "float16") and x.dtype != np.dtype(want) and x.dtype.kind == "f":
            x = x.astype(want)
        feed[i] = x
    return feed


def outputs_as_torch(compiled: Any, result: Any) -> tuple:
    import numpy as np
    import torch

    return tuple(torch.from_numpy(np.array(result[o])) for o in compiled.outputs)


@dataclass
class _CounterRuns:
    """Timed runs of the plain and the counting request, and the counters of each run."""

    plain: list[float] = field(default_factory=list)  # ms per plain infer
    walls: list[float] = field(default_factory=list)  # ms per infer with counters
    per_run: list[dict[str, float]] = field(default_factory=list)  # op -> ms, per run
    meta: dict[str, tuple[str, str]] = field(default_factory=dict)  # op -> (type, kernel)
    order: dict[str, int] = field(default_factory=dict)  # op -> first-seen position


def _counter_runs(
    plain_c: Any,
    prof_c: Any,
    fed: Mapping[str, Any],
    warmup: int,
    n: int,
    progress: Callable[[float, str], None] | None,
    cancel: Callable[[], bool] | None,
) -> _CounterRuns:
    """Warm up both compiled models, then ``n`` alternating runs: plain, then with counters
    (the executed ops' real times)."""
    from accel.errors import Cancelled

    plain_r, prof_r = plain_c.create_infer_request(), prof_c.create_infer_request()
    plain_f, prof_f = to_numpy_feed(plain_c, fed), to_numpy_feed(prof_c, fed)
    for _ in range(max(1, warmup)):
        plain_r.infer(plain_f)
        prof_r.infer(prof_f)
    out = _CounterRuns()
    for i in range(n):
        if cancel is not None and cancel():
            raise Cancelled("profile cancelled")
        t0 = time.perf_counter()
        plain_r.infer(plain_f)
        out.plain.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        prof_r.infer(prof_f)
        out.walls.append((time.perf_counter() - t0) * 1e3)
        run: dict[str, float] = {}
        for info in prof_r.get_profiling_info():
            if info.status != info.Status.EXECUTED:
                continue
            ms = info.real_time.total_seconds() * 1e3
            run[info.node_name] = run.get(info.node_name, 0.0) + ms
            out.meta.setdefault(info.node_name, (info.node_type, info.exec_type))
            out.order.setdefault(info.node_name, len(out.order))
        out.per_run.append(run)
        if progress is not None:
            progress((i + 1) / n, f"profiled {i + 1}/{n}")
    return out


def _counter_rows(runs: _CounterRuns) -> tuple[list[Any], float]:
    """One row per executed op (median over the runs) under a root row whose self time is
    the infer call's overhead; shares of the whole. Returns the rows and the ops' sum."""
    from accel.profile.results import LayerProfile

    rows: list[LayerProfile] = []
    for name in sorted(runs.meta, key=runs.order.__getitem__):
        ms = median([r.get(name, 0.0) for r in runs.per_run])
        rows.append(
            LayerProfile(
                name=name,
                type=runs.meta[name][0],
                depth=1,
                parent="",
                inclusive_ms=ms,
                self_ms=ms,
                calls=1,
            )
        )
    node_sum = sum(r.self_ms for r in rows)
    root = LayerProfile(
        name="",
        type="Model",
        depth=0,
        parent=None,
        inclusive_ms=median(runs.walls),
        self_ms=max(0.0, median(runs.walls) - node_sum),  # infer call overhead
        calls=1,
    )
    rows.insert(0, root)
    sum_self = sum(r.self_ms for r in rows)
    for r in rows:
        r.share = r.self_ms / sum_self if sum_self > 0 else 0.0
        r.inclusive_share = r.inclusive_ms / sum_self if sum_self > 0 else 0.0
    return rows, node_sum


def _op_rows_by_type(rows: list[Any], node_sum: float) -> list[Any]:
    """The op rows summed per op type, largest first."""
    from accel.profile.results import OpRow

    by_op: dict[str, OpRow] = {}
    for r in rows[1:]:
        o = by_op.setdefault(r.type, OpRow(name=r.type))
        o.calls += 1
        o.cpu_ms += r.self_ms
        o.self_cpu_ms += r.self_ms
    op_rows = sorted(by_op.values(), key=lambda o: o.self_cpu_ms, reverse=True)
    for o in op_rows:
        o.share = o.self_cpu_ms / node_sum if node_sum > 0 else 0.0
    return op_rows


class OpenVinoBackend(Backend):
    kind = "openvino"
    label = "OpenVINO"
    file_suffixes = (".xml",)
    libraries = ("openvino",)
    reached_by = "openvino"
    capabilities = frozenset({"graph", "profile", "layer_parity", "netron"})

    # -- loading and saving --------------------------------------------------------------
    def load(self, path: Path, spec: InputSpec | None, source: str) -> LoadedModel:
        from accel.models.loaded import LoadedModel

        ov_model = read_ir(path)
        inferred = spec_from_ov(ov_model)
        if spec is None:
            spec = inferred
        elif len(spec.inputs) != len(inferred.inputs):
            raise ModelLoadError(
                f"input spec has {len(spec.inputs)} inputs, the OpenVINO model "
                f"{len(inferred.inputs)} ({inferred.names})"
            )
        n, size, digest = ov_stats(ov_model, [Path(path), Path(path).with_suffix(".bin")])
        return LoadedModel(
            source=source,
            kind=self.kind,
            input_spec=spec,
            ir_path=Path(path),
            num_params=n,
            size_bytes=size,
            content_hash=digest,
            format="openvino_ir",
            # f32 unless a step says otherwise: OpenVINO's CPU default is bf16 where the
            # CPU has AMX, which would change a loaded model's outputs silently.
            session_options={"device": "CPU", "precision": "f32", "performance_hint": "latency"},
        )

    def finish_load(self, model: LoadedModel, device: str, validate: bool) -> None:
        if str(device).startswith("cuda"):
            raise ModelLoadError(
                "OpenVINO models run on OpenVINO devices (CPU, GPU = Intel GPU); use device 'cpu'"
            )
        model.device = device

    def save(self, model: LoadedModel, path: Path) -> Path:
        import openvino as ov

        path = Path(path).with_suffix(".xml")
        save_ir(ov.Core().read_model(str(model.ir_path)), path)
        return path

    def model_file(self, model: LoadedModel) -> Path | None:
        return Path(model.ir_path) if model.ir_path else None

    def with_threads(self, model: LoadedModel, threads: int) -> LoadedModel:
        if model.session_options.get("threads") == threads:
            return model
        return model.replace(session_options={**model.session_options, "threads": threads})

    # -- running -------------------------------------------------------------------------
    def compile(self, model: LoadedModel, **overrides: Any) -> Any:
        """A fresh compiled model of ``model`` (``overrides`` change session_options)."""
        import openvino as ov

        options = {**model.session_options, **overrides}
        core = ov.Core()
        ov_model = core.read_model(str(model.ir_path))
        return core.compile_model(
            ov_model, str(options.get("device", "CPU")).upper(), compile_config(options)
        )

    def session(self, model: LoadedModel) -> Any:
        if model._session is None:
            compiled = self.compile(model)
            model._session = (compiled, compiled.create_infer_request())
        return model._session

    def forward(self, model: LoadedModel, inputs: Mapping[str, Any]) -> Any:
        compiled, request = self.session(model)
        feed = to_numpy_feed(compiled, self.prepare_inputs(model, inputs))
        return outputs_as_torch(compiled, request.infer(feed))

    def bench_target(
        self, model: LoadedModel, inputs: Any, device: str, threads: int | None
    ) -> BenchTarget:
        if not isinstance(inputs, Mapping):
            inputs = dict(zip(model.input_spec.names, inputs))
        fed = self.prepare_inputs(model, inputs)
        state: dict[str, Any] = {}
        size = model.size_bytes or None

        def first() -> Any:
            want = threads or model.session_options.get("threads")
            if threads and threads != model.session_options.get("threads"):
                compiled = self.compile(model, threads=int(want))
            else:
                compiled = self.session(model)[0]
            # A request of its own: its input tensors wrap the timing inputs' memory, which
            # the model's shared request must not keep (later inputs may be larger).
            request = compiled.create_infer_request()
            state["compiled"] = compiled
            feed = to_numpy_feed(compiled, fed)
            for i, x in feed.items():
                request.set_input_tensor(i, _ov_tensor(x))
            state["request"] = request
            request.infer()
            return request

        def call() -> Any:
            state["request"].infer()
            return state["request"]

        def used_threads() -> int | None:
            c = state.get("compiled")
            return int(c.get_property("INFERENCE_NUM_THREADS")) if c is not None else None

        return BenchTarget(first, call, "openvino", size, uses_torch=False, threads=used_threads)

    # -- insight -------------------------------------------------------------------------
    def profile(
        self,
        model: LoadedModel,
        inputs: Mapping[str, Any],
        *,
        iters: int,
        warmup: int,
        ops: bool,
        trace_path: str | Path | None,
        device: str,
        threads: int | None,
        progress: Callable[[float, str], None] | None,
        cancel: Callable[[], bool] | None,
    ) -> Any:
        """Per-op times from OpenVINO's performance counters (PERF_COUNT), alternating
        with plain runs of the same compiled model without counters."""
        import openvino as ov

        from accel.profile.results import ModelProfile

        over = {"threads": int(threads)} if threads else {}
        plain_c = self.compile(model, **over)
        prof_c = self.compile(model, perf_count=True, **over)
        fed = self.prepare_inputs(model, inputs)
        n = max(1, iters)
        runs = _counter_runs(plain_c, prof_c, fed, warmup, n, progress, cancel)
        plain, walls, per_run = runs.plain, runs.walls, runs.per_run
        rows, node_sum = _counter_rows(runs)
        plain_ms = median(plain)
        hint = prof_c.get_property("INFERENCE_PRECISION_HINT")
        precision = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
        kernels = sorted({m[1] for m in runs.meta.values()})[:8]
        return ModelProfile(
            kind=self.kind,
            device=device,
            rows=rows,
            ops=_op_rows_by_type(rows, node_sum) if ops else [],
            total_ms=median([sum(r.values()) for r in per_run]) if per_run else 0.0,
            plain_forward_ms=plain_ms,
            hooked_forward_ms=median(walls),
            overhead_ratio=median([w / p for w, p in zip(walls, plain) if p > 0]),
            coverage=node_sum / plain_ms if plain_ms > 0 else 0.0,
            iters=n,
            warmup=warmup,
            op_iters=n,
            timing="openvino_perf_counters",
            threads=threads,
            notes=[
                f"OpenVINO performance counters; inference precision {precision}; "
                f"rows are the compiled (fused) ops; kernels: {', '.join(kernels)}"
            ],
            versions={"openvino": ov.__version__},
            plain_samples_ms=plain,
            hooked_samples_ms=walls,
            total_samples_ms=[sum(r.values()) for r in per_run],
        )

    def graph(self, model: LoadedModel, inputs: Mapping[str, Any] | None, **kwargs: Any) -> Any:
        return graph_from_ov(read_ir(model.ir_path), name=Path(model.ir_path).stem)

    def layer_outputs(
        self, model: LoadedModel, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], set[str]]:
        """The last floating output of each torch module's ops, exposed as extra model
        outputs (the compiled model keeps the model's precision hint)."""
        import openvino as ov

        from accel.graph.model import ancestors

        core = ov.Core()
        ov_model = read_ir(model.ir_path)
        last: dict[str, Any] = {}
        for op in ov_model.get_ordered_ops():
            if op.get_type_name() in ("Constant", "Parameter", "Result") or not op.outputs():
                continue
            out = op.output(0)
            if not out.get_element_type().is_real() or op.get_type_name() == "FakeQuantize":
                continue
            mp = module_path_of(op.get_friendly_name())
            if not mp:
                continue
            for p in ancestors(mp)[1:]:
                last.pop(p, None)  # re-insert: order becomes completion order
                last[p] = out
        if not last:
            return {}, set()
        existing = len(ov_model.outputs)
        ports = list(dict.fromkeys(last.values()))
        ov_model.add_outputs(ports)
        options = dict(model.session_options)
        compiled = core.compile_model(
            ov_model, str(options.get("device", "CPU")).upper(), compile_config(options)
        )
        feed = to_numpy_feed(compiled, self.prepare_inputs(model, inputs))
        result = compiled.create_infer_request().infer(feed)
        import numpy as np
        import torch

        values = [torch.from_numpy(np.array(result[o])) for o in compiled.outputs[existing:]]
        by_port = dict(zip(ports, values))
        return {p: by_port[port] for p, port in last.items() if port in by_port}, set()

    def script_runtime(self) -> ScriptRuntime:
        return ScriptRuntime(
            run_branch=(
                "ov_feed = {}\n"
                "for i, port in enumerate(compiled.inputs):\n"
                "    x = list(feed.values())[i].detach().cpu()\n"
                "    ov_feed[i] = (x.float() if x.is_floating_point() else x).numpy()\n"
                "result = request.infer(ov_feed)\n"
                "return tuple(torch.from_numpy(np.array(result[o])) for o in compiled.outputs)"
            ),
            load=(
                "ov_model = ov.Core().read_model(str(model_file))\n"
                "compiled = ov.Core().compile_model(ov_model, 'CPU')\n"
                "request = compiled.create_infer_request()\n"
                'kind = "openvino"\n'
                "model = session = None"
            ),
            imports=("import openvino as ov",),
        )

    def info(self, model: LoadedModel) -> dict[str, Any]:
        return {
            "file": str(model.ir_path) if model.ir_path else None,
            "compile": dict(model.session_options),
        }


def _ov_tensor(x: Any) -> Any:
    import openvino as ov

    return ov.Tensor(x, shared_memory=True)


def save_ir(ov_model: Any, path: Path) -> Path:
    """Write ``path`` (.xml) and its .bin atomically: under temporary names, then renamed,
    so an interrupted save leaves no IR that looks complete."""
    import openvino as ov

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.partial.xml")
    ov.save_model(ov_model, str(tmp), compress_to_fp16=False)
    tmp.with_suffix(".bin").replace(path.with_suffix(".bin"))
    tmp.replace(path)
    return path


def graph_from_ov(ov_model: Any, *, name: str = "") -> Any:
    """Graph of an ``ov.Model``: its ops (constant subgraphs folded into their consumers as
    parameters), module paths from the op names (ops without one join the module of the
    op they feed)."""
    from accel.graph.model import Graph

    graph = Graph(name=name or ov_model.get_friendly_name() or "openvino", source="openvino")
    ops = list(ov_model.get_ordered_ops())
    const, numel = _ov_constants(ops)
    paths = _ov_module_paths(ops, const)
    for op in ops:
        nm = op.get_friendly_name()
        if nm in const:
            continue
        if op.get_type_name() == "Parameter":
            node = _ov_input_node(op)
            graph.nodes.append(node)
            graph.inputs.append(node.id)
        else:
            _add_ov_op(graph, op, const, numel, paths)
    graph.build_groups()
    return graph


def _ov_shape(port: Any) -> list[int | str]:
    return [d.get_length() if d.is_static else "?" for d in port.get_partial_shape()]


def _ov_dtype(port: Any) -> str:
    return _OV_DTYPES.get(port.get_element_type().get_type_name(), str(port.get_element_type()))


def _ov_constants(ops: list[Any]) -> tuple[set[str], dict[str, int]]:
    """Names of the constant ops (constants and ops computed from constants only, such as
    weight decompression) and their element counts (0 for non-float constants)."""
    const: set[str] = set()
    numel: dict[str, int] = {}
    for op in ops:
        t = op.get_type_name()
        nm = op.get_friendly_name()
        if t == "Constant":
            const.add(nm)
            shape = op.get_output_partial_shape(0)
            size = 1
            if shape.is_static:
                for d in shape.to_shape():
                    size *= int(d)
            numel[nm] = size if op.get_output_element_type(0).is_real() else 0
        elif (
            t != "Parameter"
            and op.inputs()
            and all(
                i.get_source_output().get_node().get_friendly_name() in const for i in op.inputs()
            )
        ):
            const.add(nm)  # weight decompression (Convert, Multiply of constants)
            numel[nm] = max(
                numel.get(i.get_source_output().get_node().get_friendly_name(), 0)
                for i in op.inputs()
            )
    return const, numel


def _ov_module_paths(ops: list[Any], const: set[str]) -> dict[str, str]:
    """Module paths: named ops carry one; unnamed ones take the module of their first named
    consumer's parent (a fused conv feeding "layer1.0.bn1" belongs in "layer1.0")."""
    from accel.graph.model import parent_path

    paths = {op.get_friendly_name(): module_path_of(op.get_friendly_name()) for op in ops}
    for op in reversed(ops):
        nm = op.get_friendly_name()
        if paths[nm] or nm in const:
            continue
        for out in op.outputs():
            for tgt in out.get_target_inputs():
                p = paths.get(tgt.get_node().get_friendly_name(), "")
                if p:
                    own = module_path_of(tgt.get_node().get_friendly_name())
                    paths[nm] = parent_path(p) if own else p
                    break
            if paths[nm]:
                break
    return paths


def _ov_input_node(op: Any) -> Any:
    """The graph's input node for a Parameter op."""
    from accel.graph.model import Node

    out = op.output(0)
    label = out.get_any_name() if out.get_names() else op.get_friendly_name()
    return Node(
        f"input:{label}",
        "input",
        label,
        outputs=[f"{op.get_friendly_name()}:0"],
        output_shapes=[_ov_shape(out)],
        output_dtypes=[_ov_dtype(out)],
    )


def _add_ov_op(
    graph: Any, op: Any, const: set[str], numel: dict[str, int], paths: dict[str, str]
) -> None:
    """An op's node (a Result: an output node) and its incoming edges; constant inputs
    become the node's parameters."""
    from accel.graph.model import Edge, Node

    nm = op.get_friendly_name()
    is_result = op.get_type_name() == "Result"
    node = Node(
        f"output:{nm}" if is_result else nm, "output" if is_result else op.get_type_name(), nm
    )
    node.module_path = "" if is_result else paths.get(nm, "")
    for inp in op.inputs():
        src = inp.get_source_output()
        sname = src.get_node().get_friendly_name()
        if sname in const:
            node.params.append(sname)
            node.num_params += numel.get(sname, 0)
            continue
        tensor = f"{sname}:{src.get_index()}"
        node.inputs.append(tensor)
        node.input_shapes.append(_ov_shape(src))
        node.input_dtypes.append(_ov_dtype(src))
        src_node = src.get_node()
        src_id = (
            f"input:{src.get_any_name() if src.get_names() else sname}"
            if src_node.get_type_name() == "Parameter"
            else sname
        )
        graph.edges.append(Edge(src_id, node.id, tensor, _ov_shape(src), _ov_dtype(src)))
    if not is_result:
        for out in op.outputs():
            node.outputs.append(f"{nm}:{out.get_index()}")
            node.output_shapes.append(_ov_shape(out))
            node.output_dtypes.append(_ov_dtype(out))
    graph.nodes.append(node)
    if is_result:
        graph.outputs.append(node.id)


def bf16_supported(device: str = "CPU") -> bool:
    import openvino as ov

    try:
        caps = ov.Core().get_property(device.upper(), "OPTIMIZATION_CAPABILITIES")
    except Exception:  # noqa: BLE001 - an unknown device has no capabilities
        return False
    return "BF16" in caps
