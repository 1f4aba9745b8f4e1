"""Per-node profile of an ONNX model from ONNX Runtime's own profiler.

ORT writes a Chrome-trace JSON (``SessionOptions.enable_profiling``): one
``model_run`` event per ``run`` and one ``<node>_kernel_time`` event per node
execution. Nodes are assigned to the run whose window contains them, warm-up
runs are dropped, and each node's time is its mean over the measured runs in
the middle half by duration (so the nodes add up to the run). The headline is the
plain run (no profiling); ``(unattributed)`` holds the difference.
Node names are those of the graph ORT executes (after its graph optimizations:
fused nodes are called ``fused <first node>``); ``graph_optimization_level``
"disabled" keeps the file's own node names.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.errors import Cancelled
from accel.profile.results import (
    UNATTRIBUTED,
    LayerProfile,
    ModelProfile,
    OpRow,
    add_unattributed,
    median,
    middle_half,
)

log = logging.getLogger(__name__)

_NP_BYTES = {
    "float": 4,
    "float16": 2,
    "double": 8,
    "int64": 8,
    "int32": 4,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def _feed(session: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    feed = {}
    for meta in session.get_inputs():
        if meta.name not in inputs:
            raise KeyError(
                f"input {meta.name!r} missing; the model takes {[i.name for i in session.get_inputs()]}"
            )
        x = inputs[meta.name]
        x = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        if meta.type == "tensor(float16)" and x.dtype != np.float16:
            x = x.astype(np.float16)
        feed[meta.name] = x
    return feed


def _graph_info(
    onnx_path: Path, input_shapes: dict[str, tuple[int, ...]]
) -> dict[str, dict[str, Any]]:
    """Per node name of the ONNX file: op type, parameter count and (MatMul/Gemm/Conv) FLOPs."""
    import onnx
    from onnx import helper, shape_inference

    model = onnx.load(str(onnx_path), load_external_data=False)
    g = model.graph
    for inp in g.input:  # concrete shapes, so inference yields numbers rather than symbols
        if inp.name in input_shapes and inp.type.HasField("tensor_type"):
            dims = inp.type.tensor_type.shape.dim
            for d, n in zip(dims, input_shapes[inp.name]):
                d.ClearField("dim_param")
                d.dim_value = int(n)
    try:
        model = shape_inference.infer_shapes(model)
        g = model.graph
    except Exception as exc:  # inference is best effort: FLOPs just stay unknown
        log.debug("ONNX shape inference failed: %s", exc)
    shapes: dict[str, list[int]] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = [
                d.dim_value if d.HasField("dim_value") else -1
                for d in vi.type.tensor_type.shape.dim
            ]
            shapes[vi.name] = dims
    inits = {t.name: list(t.dims) for t in g.initializer}
    init_bytes = {}
    for t in g.initializer:
        try:
            size = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except Exception:  # exotic dtypes (float8, 4-bit): count as one byte
            size = 1
        init_bytes[t.name] = math.prod(t.dims) * size
    for name, dims in inits.items():
        shapes.setdefault(name, dims)
    info: dict[str, dict[str, Any]] = {}
    for node in g.node:
        params = sum(math.prod(inits[i]) for i in node.input if i in inits)
        info[node.name] = {
            "op": node.op_type,
            "params": params,
            "param_bytes": sum(init_bytes[i] for i in node.input if i in init_bytes),
            "flops": _node_flops(node, shapes),
        }
    return info


def _node_flops(node: Any, shapes: dict[str, list[int]]) -> int | None:
    def shp(i: int) -> list[int] | None:
        if i >= len(node.input) or node.input[i] not in shapes:
            return None
        s = shapes[node.input[i]]
        return None if any(d < 0 for d in s) else s

    out = shapes.get(node.output[0]) if node.output else None
    if out is not None and any(d < 0 for d in out):
        out = None
    if node.op_type in ("MatMul", "Gemm"):
        a, b = shp(0), shp(1)
        if a is None or b is None or out is None:
            return None
        if node.op_type == "Gemm":
            trans_a = any(at.name == "transA" and at.i for at in node.attribute)
            k = a[0] if trans_a else a[-1]
        else:
            k = a[-1]
        return 2 * math.prod(out) * k
    if node.op_type == "Conv":
        w = shp(1)
        if w is None or out is None:
            return None
        # each output element: C_in/groups * kH * kW multiply-adds
        return 2 * math.prod(out) * math.prod(w[1:])
    return None


def _event_flops(args: dict[str, Any]) -> int | None:
    """FLOPs of a Conv / FusedConv from the shapes ORT logged (its weight is not pre-packed)."""
    op = str(args.get("op_name", ""))
    ins, outs = args.get("input_type_shape") or [], args.get("output_type_shape") or []
    if op not in ("Conv", "FusedConv", "NchwcConv") or len(ins) < 2 or not outs:
        return None
    w = next(iter(ins[1].values()), None)
    out = next(iter(outs[0].values()), None)
    if not w or not out or len(w) < 3:
        return None
    return 2 * math.prod(out) * math.prod(w[1:])


def _strip_fused(name: str) -> str:
    return name[len("fused ") :] if name.startswith("fused ") else name


def _bytes_of(type_shapes: list[dict[str, list[int]]]) -> int:
    total = 0
    for ts in type_shapes or []:
        for dtype, dims in ts.items():
            total += _NP_BYTES.get(dtype, 4) * math.prod(dims)
    return total


def profile_onnx(
    onnx_path: Path,
    inputs: Mapping[str, Any],
    *,
    device: str = "cpu",
    providers: list[str] | None = None,
    session_options: dict[str, Any] | None = None,
    iters: int = 20,
    warmup: int = 5,
    ops: bool = True,
    trace_path: str | Path | None = None,
    progress: Callable[[float, str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> ModelProfile:
    """Profile an ONNX model per node with ONNX Runtime's profiler."""
    import onnxruntime as ort

    iters, warmup = max(1, int(iters)), max(0, int(warmup))

    report = _reporter(progress)
    timed = _time_sessions(
        Path(onnx_path), inputs, device, providers, session_options, iters, warmup, report, cancel
    )
    runs, per_run, meta, counts = _node_times(timed.events, warmup)
    graph = _graph_info_or_none(Path(onnx_path), timed.shapes)
    # Means over the middle half of the runs (by duration): parts that add up to a whole.
    keep = middle_half([r["dur"] / 1e3 for r in runs])
    total_ms = sum(runs[i]["dur"] / 1e3 for i in keep) / len(keep) if keep else 0.0
    rows = _node_rows(meta, per_run, counts, keep, graph)
    node_sum = sum(r.self_ms for r in rows)
    root = _graph_row(rows, total_ms, node_sum)
    rows.insert(0, root)
    plain, walls = timed.plain, timed.walls
    plain_ms = median(plain)
    add_unattributed(rows, plain_ms)  # the headline is the plain run
    op_rows = _op_rows(rows, node_sum) if ops else []
    written = _write_trace(trace_path, timed.events) if trace_path is not None else None
    report(1.0, "done")
    return ModelProfile(
        kind="onnx",
        device=device,
        rows=rows,
        ops=op_rows,
        total_ms=plain_ms,
        plain_forward_ms=plain_ms,
        hooked_forward_ms=median(walls),
        overhead_ratio=_overhead_ratio(walls, plain),
        coverage=total_ms / plain_ms if plain_ms > 0 else math.nan,
        total_flops=root.flops,
        iters=len(runs),
        warmup=warmup,
        op_iters=len(runs),
        timing="onnxruntime",
        trace_path=written,
        notes=_provider_notes(timed.providers),
        versions={"onnxruntime": ort.__version__},
        plain_samples_ms=plain,
        hooked_samples_ms=walls,
        total_samples_ms=[r["dur"] / 1e3 for r in runs],
    )


def _overhead_ratio(walls: list[float], plain: list[float]) -> float:
    """The profiling session's cost over the plain one, run by run."""
    return median([w / p for w, p in zip(walls, plain) if p > 0]) if plain else math.nan


@dataclass
class _Timed:
    """What the interleaved runs of the plain and the profiling session produced."""

    events: list[dict[str, Any]]  # the profiler's trace events
    providers: list[str]  # the providers the profiling session used
    plain: list[float]  # ms per timed run of the plain session
    walls: list[float]  # ms per timed run of the profiling session
    shapes: dict[str, tuple[int, ...]]  # input name -> shape fed


def _reporter(progress: Callable[[float, str], None] | None) -> Callable[[float, str], None]:
    def report(f: float, msg: str) -> None:
        if progress is not None:
            progress(min(1.0, f), msg)

    return report


def _graph_info_or_none(onnx_path: Path, shapes: dict[str, tuple[int, ...]]) -> dict:
    try:
        return _graph_info(onnx_path, shapes)
    except Exception as exc:  # a file ORT runs but onnx cannot parse is rare; FLOPs stay unknown
        log.debug("could not read ONNX graph info: %s", exc)
        return {}


def _time_sessions(
    onnx_path: Path,
    inputs: Mapping[str, Any],
    device: str,
    providers: list[str] | None,
    session_options: dict[str, Any] | None,
    iters: int,
    warmup: int,
    report: Callable[[float, str], None],
    cancel: Callable[[], bool] | None,
) -> _Timed:
    """Run a plain and a profiling session alternately (like the torch profiler: both see
    the same machine state); the profiler's events and both sessions' run times."""
    from accel.runtimes.onnxruntime.onnx_io import create_session

    options = dict(session_options or {})
    with tempfile.TemporaryDirectory(prefix="accel-ortprof-") as tmp:
        plain_sess = create_session(onnx_path, providers, options, device)
        prof_sess = create_session(
            onnx_path,
            providers,
            {**options, "enable_profiling": True, "profile_prefix": str(Path(tmp) / "ort")},
            device,
        )
        feed = _feed(plain_sess, inputs)
        plain: list[float] = []
        walls: list[float] = []
        for i in range(warmup + iters):
            if cancel is not None and cancel():
                raise Cancelled("profiling cancelled")
            first, second = (plain_sess, prof_sess) if i % 2 == 0 else (prof_sess, plain_sess)
            t0 = time.perf_counter_ns()
            first.run(None, feed)
            t1 = time.perf_counter_ns()
            second.run(None, feed)
            t2 = time.perf_counter_ns()
            p_ms, w_ms = ((t1 - t0) / 1e6, (t2 - t1) / 1e6)
            if i % 2 == 1:
                p_ms, w_ms = w_ms, p_ms
            if i >= warmup:
                plain.append(p_ms)
                walls.append(w_ms)
            report(0.9 * (i + 1) / (warmup + iters), "ONNX Runtime profile")
        events = json.loads(Path(prof_sess.end_profiling()).read_text())
        used_providers = prof_sess.get_providers()
    shapes = {k: tuple(v.shape) for k, v in feed.items()}
    return _Timed(events, used_providers, plain, walls, shapes)


def _node_times(
    events: list[dict[str, Any]], warmup: int
) -> tuple[list[dict[str, Any]], list[dict[str, float]], dict[str, dict[str, Any]], dict[str, int]]:
    """The timed runs (warm-up runs dropped), each node's kernel ms per run, each node's
    event args, and how often each node ran in the last run."""
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
        key=lambda e: e["ts"],
    )
    runs = runs[warmup:]
    n = len(runs)
    node_events = [
        e
        for e in events
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")
    ]
    per_run: list[dict[str, float]] = [{} for _ in runs]
    meta: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    starts = [r["ts"] for r in runs]
    for e in node_events:
        k = bisect.bisect_right(starts, e["ts"]) - 1
        if k < 0 or e["ts"] > runs[k]["ts"] + runs[k]["dur"]:
            continue  # a warm-up run
        name = e["name"][: -len("_kernel_time")]
        per_run[k][name] = per_run[k].get(name, 0.0) + e["dur"] / 1e3
        if k == n - 1:
            counts[name] = counts.get(name, 0) + 1
        meta.setdefault(name, e.get("args", {}))
    return runs, per_run, meta, counts


def _node_rows(
    meta: dict[str, dict[str, Any]],
    per_run: list[dict[str, float]],
    counts: dict[str, int],
    keep: list[int],
    graph: dict[str, dict[str, Any]],
) -> list[LayerProfile]:
    """One row per node in graph order: mean time over the kept runs, FLOPs, bytes, params."""
    rows: list[LayerProfile] = []
    node_order = sorted(meta, key=lambda nm: int(meta[nm].get("node_index", 0) or 0))
    for name in node_order:
        args = meta[name]
        ms = sum(per_run[i].get(name, 0.0) for i in keep) / len(keep) if keep else 0.0
        g = graph.get(name) or graph.get(_strip_fused(name)) or {}
        flops = g.get("flops")
        if flops is None:  # a node ORT created (layout transforms, fusions): its own shapes
            flops = _event_flops(args)
        in_b = _bytes_of(args.get("input_type_shape"))
        out_b = int(args.get("output_size", 0) or 0) or _bytes_of(args.get("output_type_shape"))
        p_count = int(g.get("params", 0))
        # ORT's parameter_size misses pre-packed weights; the file's initializers do not.
        p_bytes = int(g.get("param_bytes", 0)) or int(args.get("parameter_size", 0) or 0)
        row = LayerProfile(
            name=name,
            type=str(args.get("op_name", g.get("op", ""))),
            depth=1,
            parent="",
            inclusive_ms=ms,
            self_ms=ms,
            calls=counts.get(name, 1),
            flops=flops,
            self_flops=flops,
            params=p_count,
            param_bytes=p_bytes,
            input_bytes=in_b,
            output_bytes=out_b,
        )
        if flops is not None and ms > 0:
            row.flops_per_s = flops / (ms / 1e3)
        if flops is not None and row.bytes_moved > 0:
            row.intensity = flops / row.bytes_moved
        rows.append(row)
    return rows


def _op_rows(rows: list[LayerProfile], node_sum: float) -> list[OpRow]:
    """Node rows summed per operator type, largest first."""
    by_op: dict[str, OpRow] = {}
    for r in rows[1:]:
        if r.name == UNATTRIBUTED:
            continue
        o = by_op.setdefault(r.type, OpRow(name=r.type))
        o.calls += r.calls
        o.cpu_ms += r.self_ms
        o.self_cpu_ms += r.self_ms
    op_rows = sorted(by_op.values(), key=lambda o: o.self_cpu_ms, reverse=True)
    for o in op_rows:
        o.share = o.self_cpu_ms / node_sum if node_sum > 0 else 0.0
    return op_rows


def _graph_row(rows: list[LayerProfile], total_ms: float, node_sum: float) -> LayerProfile:
    """The whole graph's row: the run's time; its self time is the session's overhead."""
    known = [r.flops for r in rows if r.flops is not None]
    return LayerProfile(
        name="",
        type="Graph",
        depth=0,
        parent=None,
        inclusive_ms=total_ms,
        self_ms=max(0.0, total_ms - node_sum),  # session overhead: feeds, fetches, scheduling
        calls=1,
        flops=sum(known) if known else None,
        params=sum(r.params for r in rows),
    )


def _write_trace(trace_path: str | Path, events: list[dict[str, Any]]) -> str:
    """The profiler's events as a Chrome trace file; its path."""
    Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
    Path(trace_path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    return str(trace_path)


def _provider_notes(providers: list[str]) -> list[str]:
    notes = [f"ONNX Runtime providers: {', '.join(providers)}"]
    if any(p != "CPUExecutionProvider" for p in providers[:1]):
        notes.append(
            "node times on GPU providers are host-side kernel times (launch + sync), not GPU time"
        )
    return notes
