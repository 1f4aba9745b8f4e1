"""Per-module and per-operator profile of a torch module.

Passes:

1. plain forwards (no hooks) alternating with hooked forwards, after a warm-up,
   so both see the same machine state: the plain ones give the reference
   latency, the hooked ones the per-module times. On CPU the hooks read
   ``perf_counter_ns``; the measured cost of the hooks themselves is removed
   from each parent (see ``hooks.estimate_hook_cost_ns``). On CUDA the hooks
   record CUDA events and the stream is synchronised once per iteration, never
   per layer, so the GPU keeps running ahead of the CPU;
2. one forward under ``FlopCounterMode`` that also sums input/output bytes
   and, on CUDA, the peak memory allocated inside each module;
3. (``ops=True``) a few forwards under ``torch.profiler`` with each module
   wrapped in a ``record_function`` scope named after its path, which
   attributes every operator to the innermost module it ran in and gives the
   Chrome/Perfetto trace.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accel.errors import Cancelled
from accel.profile.results import (
    LayerProfile,
    ModelProfile,
    OpRow,
    add_unattributed,
    median,
    middle_half,
)
from accel.runtimes.torch.hooks import (
    CallTree,
    CudaEventPool,
    aggregate,
    estimate_hook_cost_ns,
    install_hooks,
    module_paths,
    perf_ns,
    tensor_bytes,
)

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, str], None]
CancelFn = Callable[[], bool]


class _Steps:
    """Maps each phase's own 0..1 progress onto a slice of the caller's bar."""

    def __init__(self, progress: ProgressFn | None, cancel: CancelFn | None):
        self.progress = progress
        self.cancel = cancel
        self.lo, self.hi = 0.0, 1.0

    def phase(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, hi

    def report(self, fraction: float, message: str) -> None:
        if self.progress is not None:
            self.progress(self.lo + (self.hi - self.lo) * min(1.0, max(0.0, fraction)), message)

    def check(self) -> None:
        if self.cancel is not None and self.cancel():
            raise Cancelled("profiling cancelled")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _time_call(call: Callable[[], Any], cuda: bool) -> float:
    """Latency (ms) of one call; on CUDA timed with events and one synchronisation."""
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = perf_ns()
    call()
    return (perf_ns() - t0) / 1e6


def _pair_ratio(num: list[float], den: list[float]) -> float:
    """Median of ``num[i] / den[i]`` (NaN without data)."""
    ratios = [a / b for a, b in zip(num, den) if b > 0]
    return median(ratios) if ratios else math.nan


def _rnn_flops(mod: nn.Module, args: tuple) -> int | None:
    """Matmul FLOPs of an nn.LSTM / GRU / RNN call (FlopCounterMode counts none for them)."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None  # PackedSequence: lengths vary, leave unknown
    x = args[0]
    if x.dim() == 2:
        steps, batch = x.shape[0], 1
    else:
        steps, batch = (x.shape[1], x.shape[0]) if mod.batch_first else (x.shape[0], x.shape[1])
    gates = {"LSTM": 4, "GRU": 3}.get(mod.mode, 1)
    dirs = 2 if mod.bidirectional else 1
    h = mod.hidden_size
    out_h = (mod.proj_size or h) if isinstance(mod, nn.LSTM) else h
    total = 0
    for layer in range(mod.num_layers):
        n_in = mod.input_size if layer == 0 else out_h * dirs
        total += dirs * 2 * gates * h * (n_in + out_h)
        if isinstance(mod, nn.LSTM) and mod.proj_size:
            total += dirs * 2 * h * mod.proj_size
    return int(total * steps * batch)


def _sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of the fused ``aten.scaled_dot_product_attention`` (QK^T and AV matmuls).

    FlopCounterMode only knows the CUDA kernels (flash, efficient, cudnn); on CPU
    the fused op decomposes to ``_scaled_dot_product_flash_attention_for_cpu``.
    """
    batch = math.prod(query_shape[:-2])
    s_q, d = query_shape[-2], query_shape[-1]
    s_k, d_v = key_shape[-2], value_shape[-1]
    return 2 * batch * s_q * s_k * d + 2 * batch * s_q * s_k * d_v


def _sdpa_mapping() -> dict[Any, Any]:
    aten = torch.ops.aten
    names = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu")
    return {getattr(aten, n): _sdpa_flops for n in names if hasattr(aten, n)}


class _InfoPass:
    """FLOPs, bytes in/out and (CUDA) peak memory per module, from one forward."""

    def __init__(self, root: nn.Module, device: str):
        from torch.utils.flop_counter import FlopCounterMode

        self.root = root
        self.device = device
        self.cuda = device.startswith("cuda")
        self.counter = FlopCounterMode(display=False, custom_mapping=_sdpa_mapping())
        self.stack: list[dict[str, Any]] = []
        self.flops: dict[str, int] = {}
        self.self_flops: dict[str, int] = {}
        self.in_bytes: dict[str, int] = {}
        self.out_bytes: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.estimated: set[str] = set()

    def pre(self, path: str) -> Callable:
        def hook(mod, args):
            frame = {
                "path": path,
                "flops0": self.counter.get_total_flops(),
                "children": 0,
                "extra": 0,
            }
            self.in_bytes[path] = self.in_bytes.get(path, 0) + tensor_bytes(args)
            if self.cuda:
                cur = torch.cuda.max_memory_allocated(self.device)
                if self.stack:
                    self.stack[-1]["running"] = max(self.stack[-1]["running"], cur)
                torch.cuda.reset_peak_memory_stats(self.device)
                frame["entry"] = frame["running"] = torch.cuda.memory_allocated(self.device)
            self.stack.append(frame)

        return hook

    def post(self, path: str) -> Callable:
        def hook(mod, args, out):
            frame = self.stack.pop()
            incl = self.counter.get_total_flops() - frame["flops0"] + frame["extra"]
            if incl == frame["extra"] and isinstance(mod, nn.RNNBase):
                est = _rnn_flops(mod, args)
                if est is not None:
                    incl += est
                    self.estimated.add(path)
                    for f in self.stack:  # parents would not see it through the counter
                        f["extra"] += est
            self.flops[path] = self.flops.get(path, 0) + incl
            self.self_flops[path] = self.self_flops.get(path, 0) + incl - frame["children"]
            if self.stack:
                self.stack[-1]["children"] += incl
            self.out_bytes[path] = self.out_bytes.get(path, 0) + tensor_bytes(out)
            if self.cuda:
                peak = max(frame["running"], torch.cuda.max_memory_allocated(self.device))
                self.peak[path] = max(self.peak.get(path, 0), peak - frame["entry"])
                if self.stack:
                    self.stack[-1]["running"] = max(self.stack[-1]["running"], peak)
                torch.cuda.reset_peak_memory_stats(self.device)

        return hook

    def run(self, call: Callable[[], Any]) -> None:
        with install_hooks(self.root, self.pre, self.post), self.counter:
            call()
        _sync(self.device)


def _type_name(mod: nn.Module) -> str:
    # A scripted module's class is RecursiveScriptModule; original_name is the user's class.
    return getattr(mod, "original_name", None) or type(mod).__name__


def _scope_names(root: nn.Module) -> dict[nn.Module, str]:
    return {m: f"{p or '<root>'} [{_type_name(m)}]" for m, p in module_paths(root).items()}


def _op_rows_by_scope(
    events: Any, scope_to_path: dict[str, str], iters: int
) -> tuple[list[OpRow], dict[str, float]]:
    """Profiler events summed per (op, innermost module, input shapes), and each module
    scope's self time outside its ops and child scopes (ms per forward)."""
    rows: dict[tuple[str, str | None, str], OpRow] = {}
    scope_self: dict[str, float] = {}
    for evt in events:
        if evt.name in scope_to_path and evt.device_type == torch.autograd.DeviceType.CPU:
            path = scope_to_path[evt.name]
            scope_self[path] = scope_self.get(path, 0.0) + evt.self_cpu_time_total / 1e3 / iters
        if (
            evt.name in scope_to_path
            or evt.name.startswith("ProfilerStep")
            or evt.device_type != torch.autograd.DeviceType.CPU
        ):
            continue  # scopes are modules / steps, not ops; kernels count in their launching op
        parent = evt.cpu_parent
        while parent is not None and parent.name not in scope_to_path:
            parent = parent.cpu_parent
        module = None if parent is None else scope_to_path[parent.name]
        shapes = str(evt.input_shapes) if evt.input_shapes else ""
        key = (evt.name, module, shapes)
        row = rows.get(key)
        if row is None:
            row = rows[key] = OpRow(name=evt.name, module=module, input_shapes=shapes)
        row.calls += evt.count
        row.cpu_ms += evt.cpu_time_total / 1e3
        row.self_cpu_ms += evt.self_cpu_time_total / 1e3
        row.device_ms += getattr(evt, "device_time_total", 0.0) / 1e3
        row.self_device_ms += getattr(evt, "self_device_time_total", 0.0) / 1e3
    out = list(rows.values())
    return out, scope_self


def _op_table(
    root: nn.Module,
    call: Callable[[], Any],
    device: str,
    iters: int,
    trace_path: str | Path | None,
    steps: _Steps,
) -> tuple[list[OpRow], str | None, dict[str, float]]:
    """Operators per forward from torch.profiler, each attributed to its innermost module;
    also each module scope's own time outside its ops and child scopes (ms per forward)."""
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    cuda = device.startswith("cuda")
    scopes = _scope_names(root)
    scope_to_path = {scopes[m]: p for m, p in module_paths(root).items()}
    open_scopes: list[Any] = []

    def pre(path: str) -> Callable:
        def hook(mod, args):
            rf = record_function(scopes[mod])
            rf.__enter__()
            open_scopes.append(rf)

        return hook

    def post(path: str) -> Callable:
        def hook(mod, args, out):
            if open_scopes:
                open_scopes.pop().__exit__(None, None, None)

        return hook

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with install_hooks(root, pre, post):
        call()  # warm the scope path outside the profiler
        _sync(device)
        # One profiled warm-up step: the profiler's own start-up cost lands there, not in the table.
        sched = schedule(wait=0, warmup=1, active=iters, repeat=1)
        with profile(activities=activities, record_shapes=True, schedule=sched) as prof:
            for i in range(iters + 1):
                steps.check()
                call()
                _sync(device)
                prof.step()
                steps.report((i + 1) / (iters + 1), "operator profile")
    out, scope_self = _op_rows_by_scope(prof.events(), scope_to_path, iters)
    _per_forward(out, iters, cuda)
    written = _write_trace(prof, trace_path) if trace_path is not None else None
    return out, written, scope_self


def _per_forward(out: list[OpRow], iters: int, cuda: bool) -> None:
    """Totals over ``iters`` forwards -> per forward; shares; the costliest first."""
    for r in out:
        r.calls = max(1, round(r.calls / iters))
        r.cpu_ms /= iters
        r.self_cpu_ms /= iters
        r.device_ms /= iters
        r.self_device_ms /= iters
    sk = "self_device_ms" if cuda else "self_cpu_ms"
    total = sum(getattr(r, sk) for r in out) or 1.0
    for r in out:
        r.share = getattr(r, sk) / total
    out.sort(key=lambda r: getattr(r, sk), reverse=True)


def _write_trace(prof: Any, trace_path: str | Path) -> str:
    Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
    # Kineto writes "<path>.tmp" and renames it: that needs the right to create files
    # beside the trace, which a confined job lacks (it may write the trace file only).
    with tempfile.TemporaryDirectory(prefix="accel-trace-") as tmp:
        staged = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(staged))
        shutil.copyfile(staged, trace_path)
    return str(trace_path)


MODULE_CODE = "(module code)"  # an op row for a module's own Python between its operators


def _fit_ops_to_layers(
    ops: list[OpRow], rows: list[LayerProfile], scope_self: dict[str, float], cuda: bool
) -> list[OpRow]:
    """Scale each module's operator times so they add up to the module's self time.

    The operator pass runs under torch.profiler, whose per-op bookkeeping inflates every
    op by its own cost; its proportions within a module are right, its absolute times are
    not. The layer pass measured each module's self time without that cost, so each
    module's ops are scaled to it (``raw_*`` keep the profiler's own numbers), and the
    module's time outside any op (its Python, the record_function scope) is an op row
    of its own, ``(module code)``."""
    key = "self_device_ms" if cuda else "self_cpu_ms"
    layer_self = {r.name: r.self_ms for r in rows}
    by_module: dict[str | None, list[OpRow]] = {}
    for o in ops:
        by_module.setdefault(o.module, []).append(o)
    out: list[OpRow] = []
    for module, rows in by_module.items():
        target = layer_self.get(module) if module is not None else None
        for o in rows:
            o.raw_self_ms = getattr(o, key)
        measured = sum(getattr(o, key) for o in rows)
        if target is None or measured <= 0:
            out.extend(rows)
            continue
        scope = 0.0 if cuda else scope_self.get(module, 0.0)
        denom = measured + scope
        factor = target / denom if denom > 0 else 1.0
        for o in rows:
            o.cpu_ms *= factor
            o.self_cpu_ms *= factor
            o.device_ms *= factor
            o.self_device_ms *= factor
        out.extend(rows)
        if scope > 0:
            out.append(
                OpRow(
                    name=MODULE_CODE,
                    module=module,
                    calls=1,
                    cpu_ms=scope * factor,
                    self_cpu_ms=scope * factor,
                    raw_self_ms=scope,
                )
            )
    total = sum(getattr(o, key) for o in out) or 1.0
    for o in out:
        o.share = getattr(o, key) / total
    out.sort(key=lambda o: getattr(o, key), reverse=True)
    return out


def profile_torch(
    module: nn.Module,
    call: Callable[[], Any],
    *,
    device: str = "cpu",
    iters: int = 20,
    warmup: int = 5,
    ops: bool = True,
    op_iters: int | None = None,
    trace_path: str | Path | None = None,
    compensate: bool = True,
    progress: ProgressFn | None = None,
    cancel: CancelFn | None = None,
) -> ModelProfile:
    """Profile ``call()`` (a forward of ``module``, already on ``device``) per module.

    ``compensate`` removes the measured cost of the timing hooks from parent
    modules on CPU, so self times add up to the plain forward latency.
    """
    iters = max(1, int(iters))
    # The first hooked forward pays one-time costs (lazy init, the hooks' first dispatch,
    # caches of the first layers): it is always warm-up, never counted.
    warmup = max(1, int(warmup))
    steps = _Steps(progress, cancel)
    cuda = device.startswith("cuda")
    notes: list[str] = []

    steps.phase(0.0, 0.6)  # 1. plain and hooked forwards
    hook_cost_ns = estimate_hook_cost_ns() if not cuda and compensate else 0.0
    timed = _time_modules(module, call, cuda, warmup, iters, hook_cost_ns, steps, notes)

    steps.phase(0.6, 0.7)  # 2. FLOPs, bytes, memory
    info = _flops_and_memory(module, call, device, steps, notes)
    # 3. operators (torch.profiler), also for the trace file
    op_rows: list[OpRow] = []
    scope_self: dict[str, float] = {}
    written = None
    # On CUDA the operator pass is what attributes GPU time to modules (see kernel_times).
    n_op = max(1, min(iters, op_iters or 5)) if ops or trace_path is not None or cuda else 0
    if n_op:
        steps.phase(0.7, 1.0)
        op_rows, written, scope_self = _op_table(module, call, device, n_op, trace_path, steps)

    # 4. rows, fitted to the plain forward
    plain_ms = median(timed.plain)
    rows = _module_rows(module, timed, plain_ms, info, cuda)
    if cuda and op_rows:
        kernel_times(rows, op_rows)
    measured_sum = sum(r.self_ms for r in rows)
    notes.extend(_sum_notes(measured_sum, plain_ms, cuda, compensate, hook_cost_ns))
    add_unattributed(rows, plain_ms)  # what the layers do not explain is a row of its own
    op_rows = _fit_ops_to_layers(op_rows, rows, scope_self, cuda) if ops and op_rows else []
    steps.phase(0.0, 1.0)
    steps.report(1.0, "done")
    run = {"iters": iters, "warmup": warmup, "op_iters": n_op, "trace_path": written}
    return _model_profile(
        device, timed, info, rows, op_rows, measured_sum, hook_cost_ns, notes, run
    )


def _model_profile(
    device: str,
    timed: _ModuleTimes,
    info: _InfoPass,
    rows: list[LayerProfile],
    op_rows: list[OpRow],
    measured_sum: float,
    hook_cost_ns: float,
    notes: list[str],
    run: dict[str, Any],
) -> ModelProfile:
    """The profile of the plain forward's median, its rows and how they were taken
    (``run``: iters, warmup, op_iters, trace_path)."""
    plain, hooked_wall, plain_ms = timed.plain, timed.hooked_wall, median(timed.plain)
    root_flops = info.flops.get("")
    return ModelProfile(
        kind="torch",
        device=device,
        rows=rows,
        ops=op_rows,
        total_ms=plain_ms,
        plain_forward_ms=plain_ms,
        hooked_forward_ms=median(hooked_wall) if hooked_wall else plain_ms,
        # Ratios of interleaved pairs, so drift and load cancel out as much as they can.
        overhead_ratio=_pair_ratio(hooked_wall, plain),
        coverage=measured_sum / plain_ms if timed.hooked and plain_ms > 0 else 1.0,
        hook_cost_us=hook_cost_ns / 1e3,
        total_flops=root_flops if root_flops is not None else info.counter.get_total_flops(),
        timing="cuda_events" if device.startswith("cuda") else "perf_counter",
        threads=torch.get_num_threads(),
        notes=notes,
        versions={"torch": torch.__version__},
        plain_samples_ms=plain,
        hooked_samples_ms=hooked_wall,
        total_samples_ms=[a.top for a in timed.per_iter],
        **run,
    )


def _flops_and_memory(
    module: nn.Module, call: Callable[[], Any], device: str, steps: _Steps, notes: list[str]
) -> _InfoPass:
    """One forward counting FLOPs, activation bytes and (CUDA) peak memory per module."""
    steps.check()
    info = _InfoPass(module, device)
    info.run(call)
    if info.estimated:
        notes.append(
            "FLOPs of recurrent layers are estimated from their shapes (matmuls only): "
            + ", ".join(sorted(info.estimated))
        )
    steps.report(1.0, "FLOPs and memory")
    return info


@dataclass
class _ModuleTimes:
    """The timed (not warm-up) iterations of the plain and the hooked forward."""

    plain: list[float]  # ms per plain forward
    hooked_wall: list[float]  # ms per hooked forward
    per_iter: list[Any]  # per hooked forward: the call tree's aggregate (inclusive/self ms)
    hooked: bool  # whether the hooks could be installed (TorchScript roots refuse them)


def _time_modules(
    module: nn.Module,
    call: Callable[[], Any],
    cuda: bool,
    warmup: int,
    iters: int,
    hook_cost_ns: float,
    steps: _Steps,
    notes: list[str],
) -> _ModuleTimes:
    """Plain and hooked forwards, interleaved so that both see the same machine state
    (turbo, caches, other processes) and their ratio is fair."""
    pool = CudaEventPool() if cuda else None
    tree = CallTree(pool.record if pool else perf_ns)
    per_iter = []
    plain: list[float] = []
    hooked_wall: list[float] = []
    hooked: list[str] = []  # the loop runs at least once (warmup >= 1)
    for i in range(warmup + iters):
        steps.check()
        if i % 2 == 0:  # alternate the order: neither kind always runs on the other's caches
            p_ms = _time_call(call, cuda)
        tree.reset()
        if pool:
            pool.reset()
        with install_hooks(module, tree.pre, tree.post, notes if i == 0 else None) as paths:
            wall = _time_call(call, cuda)  # CUDA: synchronises once, at the end
        hooked = paths
        if i % 2 == 1:
            p_ms = _time_call(call, cuda)
        if cuda:
            values = [c[1].elapsed_time(c[2]) for c in tree.calls]
            agg = aggregate(tree.calls, values)
        else:
            values = [(c[2] - c[1]) / 1e6 for c in tree.calls]
            agg = aggregate(tree.calls, values, hook_cost_ns / 1e6)
        if i >= warmup:
            plain.append(p_ms)
            per_iter.append(agg)
            hooked_wall.append(wall)
        steps.report((i + 1) / (warmup + iters), "per-module timing")
    return _ModuleTimes(plain, hooked_wall, per_iter, bool(hooked))


def _module_rows(
    module: nn.Module, timed: _ModuleTimes, plain_ms: float, info: _InfoPass, cuda: bool
) -> list[LayerProfile]:
    """Rows in module order (parents before children). Means over the middle half of the
    iterations (by profiled total): the rows add up to their total, outliers stay out."""
    per_iter = timed.per_iter
    keep = [per_iter[i] for i in middle_half([a.top for a in per_iter])] if per_iter else []

    def mean_of(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    rows: list[LayerProfile] = []
    for mod, path in module_paths(module).items():
        incl = mean_of([a.inclusive.get(path, 0.0) for a in keep])
        slf = mean_of([a.self.get(path, 0.0) for a in keep])
        calls = per_iter[-1].calls.get(path, 0) if per_iter else 0
        if path == "" and not timed.hooked:
            incl = slf = plain_ms
            calls = 1
        rows.append(_module_row(mod, path, incl, slf, calls, info, cuda))
    return rows


def _module_row(
    mod: nn.Module,
    path: str,
    incl: float,
    slf: float,
    calls: int,
    info: _InfoPass,
    cuda: bool,
) -> LayerProfile:
    """One module's row: times, FLOPs, parameter and activation bytes, throughput."""
    n_params = sum(p.numel() for p in mod.parameters())
    p_bytes = sum(p.numel() * p.element_size() for p in mod.parameters())
    p_bytes += sum(b.numel() * b.element_size() for b in mod.buffers())
    flops = info.flops.get(path)
    if path == "" and flops is None:  # root refused hooks (TorchScript): the whole count
        flops = info.counter.get_total_flops()
    in_b = info.in_bytes.get(path, 0)
    out_b = info.out_bytes.get(path, 0)
    moved = p_bytes * max(1, calls) + in_b + out_b
    row = LayerProfile(
        name=path,
        type=_type_name(mod),
        depth=0 if path == "" else path.count(".") + 1,
        parent=None if path == "" else (path.rsplit(".", 1)[0] if "." in path else ""),
        inclusive_ms=incl,
        self_ms=slf,
        calls=calls,
        flops=flops,
        self_flops=info.self_flops.get(path),
        params=n_params,
        param_bytes=p_bytes,
        input_bytes=in_b,
        output_bytes=out_b,
        peak_mem_bytes=info.peak.get(path) if cuda else None,
    )
    if flops is not None and incl > 0:
        row.flops_per_s = flops / (incl / 1e3)
    if flops is not None and moved > 0:
        row.intensity = flops / moved
    return row


def kernel_times(rows: list[LayerProfile], ops: list[OpRow]) -> None:
    """CUDA: each module's self time becomes the GPU time of the kernels its own operators
    launched (torch.profiler's CUPTI times, ``OpRow.self_device_ms``; operators outside any
    module count to the root), and inclusive times their sums over the subtree.

    CUDA events recorded in the timing hooks measure the stretch between two hooks, which on
    a launch-bound model (small batches, many small kernels) is mostly the GPU waiting for
    the hooks themselves: on an H200 the layers of zoo:resnet added up to 2.2x the plain
    forward. Kernel times add up to what the GPU did; the rest of the forward is the GPU
    waiting for the CPU, the (unattributed) row."""
    own: dict[str, float] = {}
    for o in ops:
        path = o.module if o.module is not None else ""
        own[path] = own.get(path, 0.0) + o.self_device_ms
    inclusive = {r.name: own.get(r.name, 0.0) for r in rows}
    for r in reversed(rows):  # children come after their parents
        if r.parent is not None and r.parent in inclusive:
            inclusive[r.parent] += inclusive[r.name]
    for r in rows:
        r.self_ms = own.get(r.name, 0.0)
        r.inclusive_ms = inclusive[r.name]


def _sum_notes(
    measured_sum: float, plain_ms: float, cuda: bool, compensate: bool, hook_cost_ns: float
) -> list[str]:
    """Notes on how the layer times were taken and how well they add up."""
    notes = []
    if cuda and plain_ms > 0 and measured_sum < 0.9 * plain_ms:
        idle = 1.0 - measured_sum / plain_ms
        notes.append(
            f"the GPU ran kernels for {measured_sum:.3f} ms of a {plain_ms:.3f} ms forward: "
            f"{idle:.0%} of the time it waited for the CPU to launch work (the "
            "(unattributed) row); CUDA graphs or torch.compile mode=reduce-overhead remove "
            "most of that wait"
        )
    elif plain_ms > 0 and abs(measured_sum - plain_ms) > 0.1 * plain_ms:
        notes.append(
            f"the layers add up to {measured_sum:.3f} ms against a plain forward of "
            f"{plain_ms:.3f} ms; the difference is the (unattributed) row (a busy machine "
            "makes the two disagree: profile again when it is quiet)"
        )
    if cuda:
        notes.append("layer times are the GPU kernel times of each module's own operators")
    elif compensate:
        notes.append(
            f"hook cost of {hook_cost_ns / 1e3:.2f} us per module call removed from parents"
        )
    return notes
