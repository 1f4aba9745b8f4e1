"""A real serving test: PyTriton (which ships the Triton server) serves a model on loopback
and concurrent clients load it, with and without dynamic batching.

``serve_test(runtime, spec, ...)`` first measures a batch sweep of the model called directly,
picks ``dynamic_batching`` from it (``accel.deploy.triton.choose_batching``), then for each
mode starts the Triton server bound to 127.0.0.1, sends single-sample requests from
``clients`` threads (each request count and the whole test bounded in time), and stops the
server, also on Ctrl-C and when ``cancel()`` turns true. Results: p50/p99 latency,
throughput and the batches Triton formed (requests per model execution, read from its metrics
endpoint) per client count and mode, and the served path's overhead over a direct call at one
client (both timed in alternation while the server is up).

The clients run in a separate process by default: PyTriton runs the model in this process,
and client threads here would compete with it for the GIL — more so with dynamic batching,
where each model call does more work while the clients wait.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.deploy.triton import (
    WAIT_GAIN,
    DeployError,
    batch_spec,
    batch_sweep,
    choose_batching,
    default_batches,
    tensor_configs,
)
from accel.errors import Cancelled

MODES = ("no batching", "dynamic batching")


@dataclass(frozen=True)
class LoadPoint:
    mode: str  # "dynamic batching" | "no batching"
    clients: int
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    throughput: float  # requests (= samples) per second
    # Requests per model execution, from Triton's metrics (None where they could not be read):
    # the batches the dynamic batcher actually formed (1.0 without batching).
    avg_batch: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ServeReport:
    sweep: list[Any]
    preferred_batch_sizes: list[int]
    max_queue_delay_us: int
    max_batch_size: int
    direct_p50_ms: float
    load: list[LoadPoint] = field(default_factory=list)
    # One served request at a time, timed in alternation with ``direct_p50_ms``'s direct calls
    # while the server (no batching) was up: the served path's overhead is the difference.
    served_p50_ms: float = float("nan")

    def point(self, mode: str, clients: int) -> LoadPoint | None:
        return next((p for p in self.load if p.mode == mode and p.clients == clients), None)

    @property
    def sweep_gain(self) -> float:
        """Best throughput of the direct sweep over its batch-1 throughput: what batching can
        gain on the model itself (the served path's per-request cost can add to it)."""
        one = next((p.throughput for p in self.sweep if p.batch == 1), 0.0)
        best = max((p.throughput for p in self.sweep), default=0.0)
        return best / one if one > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep": [p.to_dict() for p in self.sweep],
            "preferred_batch_sizes": self.preferred_batch_sizes,
            "max_queue_delay_us": self.max_queue_delay_us,
            "max_batch_size": self.max_batch_size,
            "direct_p50_ms": self.direct_p50_ms,
            "served_p50_ms": self.served_p50_ms,
            "sweep_gain": self.sweep_gain,
            "load": [p.to_dict() for p in self.load],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServeReport:
        """The report a worker sent back as JSON (``to_dict``)."""
        from accel.deploy.triton import SweepPoint

        return cls(
            sweep=[SweepPoint(**p) for p in d.get("sweep", [])],
            preferred_batch_sizes=list(d.get("preferred_batch_sizes", [])),
            max_queue_delay_us=int(d.get("max_queue_delay_us", 0)),
            max_batch_size=int(d.get("max_batch_size", 0)),
            direct_p50_ms=_number(d.get("direct_p50_ms")),
            load=[LoadPoint(**p) for p in d.get("load", [])],
            served_p50_ms=_number(d.get("served_p50_ms")),
        )


def _number(value: Any) -> float:
    """A float from JSON, where the protocol sends NaN as null."""
    return float("nan") if value is None else float(value)


def check_pytriton() -> None:
    """Raise DeployError with the reason when PyTriton cannot run here."""
    if not sys.platform.startswith("linux"):
        raise DeployError(
            "PyTriton (the Triton server it ships) runs on Linux only; on this platform "
            "use `studio deploy --triton` and a Triton server on a Linux machine"
        )
    try:
        import pytriton.triton  # noqa: F401
        import tritonclient.grpc  # noqa: F401
    except ImportError as exc:
        raise DeployError(
            f"serving needs nvidia-pytriton and tritonclient ({exc}): "
            "pip install 'accel-studio[serve]'"
        ) from exc


def python_lib_env() -> None:
    """Triton's Python backend stub links libpython3.X; make it load this interpreter's (a
    system libpython of another patch release fails with this interpreter's stdlib)."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    name = sysconfig.get_config_var("LDLIBRARY") or ""
    if libdir and name and (Path(libdir) / name).exists():
        paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        if libdir not in paths:
            os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, *paths])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_port(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise DeployError(
                f"port {port} on 127.0.0.1 is taken ({exc.strerror}): pick another with --port"
            ) from None


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    k = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[k]


def _never() -> bool:
    return False


def load_test(
    infer: Callable[[], Any],
    clients: int,
    *,
    duration_s: float,
    max_requests: int,
    cancel: Callable[[], bool] = _never,
) -> tuple[list[float], int, float]:
    """``clients`` threads call ``infer()`` until ``duration_s`` passed, each sent
    ``max_requests`` or ``cancel()`` is true; returns (latencies in s, errors, wall time)."""
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + duration_s

    def client() -> None:
        mine: list[float] = []
        for _ in range(max_requests):
            if time.monotonic() >= stop_at or cancel():
                break
            t0 = time.perf_counter()
            try:
                infer()
            except Exception:  # noqa: BLE001 - counted and reported
                with lock:
                    errors[0] += 1
                continue
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration_s + 60)
    return lat, errors[0], time.perf_counter() - t0


def _client_infer(url: str, request: dict[str, Any]) -> tuple[Callable[[], Any], list[Any]]:
    """An ``infer()`` whose every thread keeps its own gRPC ModelClient, and the list of the
    clients it opened (to close)."""
    from pytriton.client import ModelClient

    local = threading.local()
    opened: list[Any] = []

    def infer() -> Any:
        c = getattr(local, "client", None)
        if c is None:
            c = local.client = ModelClient(url, "model", init_timeout_s=60)
            opened.append(c)
        return c.infer_sample(**request)

    return infer, opened


def _close(opened: list[Any]) -> None:
    for c in opened:
        with contextlib.suppress(Exception):
            c.close()


def client_load(
    url: str,
    request: dict[str, Any],
    clients: int,
    duration_s: float,
    max_requests: int,
    cancel: Callable[[], bool] = _never,
) -> tuple[list[float], int, float]:
    """``clients`` threads of gRPC clients load the served model (``load_test``)."""
    infer, opened = _client_infer(url, request)
    try:
        infer()  # connect and warm up once
        return load_test(
            infer, clients, duration_s=duration_s, max_requests=max_requests, cancel=cancel
        )
    finally:
        _close(opened)


def _client_process_main(conn: Any, load: Callable[..., Any], *args: Any) -> None:
    try:
        conn.send(("ok", load(*args)))
    except BaseException as exc:  # noqa: BLE001 - handed to the parent as text
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def in_client_process(
    load: Callable[..., Any],
    args: tuple[Any, ...],
    cancel: Callable[[], bool],
    wait_s: float,
    tick: Callable[[float], None] | None = None,
) -> Any:
    """``load(*args)`` (a module-level function) in a spawned process, its result sent back;
    the process is terminated when ``cancel()`` turns true or ``wait_s`` passed. ``tick``:
    called with the seconds since the start while it waits (about ten times a second)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_client_process_main, args=(child, load, *args), daemon=True)
    proc.start()
    child.close()
    started = time.monotonic()
    deadline = started + wait_s
    try:
        while not parent.poll(0.1):
            if tick is not None:
                tick(time.monotonic() - started)
            if cancel():
                raise Cancelled("serve test cancelled")
            if not proc.is_alive() and not parent.poll(0):
                raise DeployError(f"the client process died (exit code {proc.exitcode})")
            if time.monotonic() > deadline:
                raise DeployError(f"the clients did not finish within {wait_s:.0f} s")
        try:
            status, value = parent.recv()
        except EOFError:  # it died before it could answer
            proc.join(5)
            raise DeployError(f"the client process died (exit code {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join(5)
        parent.close()
    if status != "ok":
        raise DeployError(f"the client process failed: {value}")
    return value


def _overhead(
    runtime: Any, one: dict[str, Any], url: str, request: dict[str, Any], rounds: int
) -> tuple[float, float]:
    """Medians (ms) of direct batch-1 calls and single served requests, timed in alternation
    (a reference timed minutes apart is not one on a shared machine)."""
    infer, opened = _client_infer(url, request)
    direct, served = [], []
    try:
        infer()
        for _ in range(rounds):
            t0 = time.perf_counter()
            runtime.run(one)
            t1 = time.perf_counter()
            infer()
            served.append(time.perf_counter() - t1)
            direct.append(t1 - t0)
    finally:
        _close(opened)
    return statistics.median(direct) * 1e3, statistics.median(served) * 1e3


@dataclass
class _Plan:
    """What the served modes share: the sweep's choice and the tensors."""

    report: ServeReport
    one: dict[str, Any]  # a batch-1 sample of the spec
    inputs: list[Any]
    outputs: list[Any]
    feeds: dict[str, Any]  # batch-1 arrays by served input name


def _plan(runtime: Any, spec: Any, batches: Sequence[int] | None, log: Callable) -> _Plan:
    batch_dim, spec_max = batch_spec(spec)
    if not batch_dim:
        raise DeployError(
            "the input spec has no symbolic first (batch) dim, so requests cannot be batched: "
            "give the model's input spec a batch dim, e.g. x:float32[batch,...]; batch=1..16"
        )
    batches = [b for b in (batches or default_batches(spec_max)) if b <= spec_max] or [1]
    samples = {b: spec.sample(dims={batch_dim: b}) for b in batches}
    log(f"batch sweep of the model called directly: {batches}")
    sweep = batch_sweep(lambda b: runtime.run(samples[b]), batches)
    preferred, delay = choose_batching(sweep)
    direct = [p for p in sweep if p.batch == 1]  # until timed beside the server: the sweep's
    direct_ms = direct[0].latency_ms if direct else float("nan")
    one = spec.sample(dims={batch_dim: 1})
    inputs, outputs = tensor_configs(runtime, spec, max(batches), one)
    report = ServeReport(sweep, preferred, delay, max(batches), direct_ms)
    feeds = {n.name: one[t.name].numpy() for n, t in zip(inputs, spec.inputs, strict=False)}
    return _Plan(report, one, inputs, outputs, feeds)


def _infer_func(runtime: Any, spec: Any, out_names: list[str]) -> Callable[..., Any]:
    import numpy as np
    from pytriton.decorators import batch

    @batch
    def infer_func(**arrays: Any) -> dict[str, Any]:
        res = runtime.run(
            {t.name: arrays[name] for t, name in zip(spec.inputs, arrays, strict=False)}
        )
        return {n: np.asarray(r) for n, r in zip(out_names, res, strict=False)}

    return infer_func


def triton_config(port: int | None, log_dir: str) -> tuple[Any, tuple[int, int, int]]:
    """PyTriton's server config bound to 127.0.0.1 only: HTTP ``port``, gRPC +1, metrics +2
    (free ports where ``port`` is None); the server's log in ``log_dir``. Returns (config,
    ports)."""
    from pytriton.triton import TritonConfig

    ports = (port, port + 1, port + 2) if port else (free_port(), free_port(), free_port())
    cfg = TritonConfig(
        http_address="127.0.0.1",
        http_port=ports[0],
        grpc_address="127.0.0.1",
        grpc_port=ports[1],
        metrics_address="127.0.0.1",
        metrics_port=ports[2],
        log_verbose=0,
        # PyTriton prints the server's log on stdout otherwise (and `--json` output with it)
        log_file=Path(log_dir) / "tritonserver.log",
    )
    return cfg, ports


def check_ports(port: int | None) -> None:
    """DeployError when ``port`` (and +1, +2) is given and taken on 127.0.0.1."""
    if port is not None:
        for p in (port, port + 1, port + 2):
            check_port(p)


def server_log_tail(cfg: Any, lines: int = 15) -> str:
    """The last lines of the Triton server's log (for a server that did not start)."""
    return "".join(_read(cfg.log_file).splitlines(keepends=True)[-lines:])


@contextlib.contextmanager
def _serving(
    runtime: Any,
    spec: Any,
    plan: _Plan,
    mode: str,
    port: int | None,
    instances: int,
    log_dir: str,
) -> Iterator[tuple[str, dict[str, Any], str]]:
    """Triton serving the model in ``mode`` on 127.0.0.1; yields (gRPC url, one request,
    metrics url).
    The server stops when the block ends, whatever ends it."""
    import numpy as np
    from pytriton.model_config import Tensor
    from pytriton.triton import Triton

    batching = mode == "dynamic batching"
    cfg, ports = triton_config(port, log_dir)
    model_cfg = _model_config(plan.report, batching)

    def tensors(ts: list[Any]) -> list[Any]:
        # A batching model's tensors leave out the batch dim (Triton adds it).
        return [
            Tensor(
                name=t.name, dtype=np.dtype(t.dtype), shape=t.dims if batching else (-1, *t.dims)
            )
            for t in ts
        ]

    funcs = [_infer_func(runtime, spec, [t.name for t in plan.outputs]) for _ in range(instances)]
    with Triton(config=cfg) as triton:
        try:
            triton.bind(
                model_name="model",
                infer_func=funcs if instances > 1 else funcs[0],
                inputs=tensors(plan.inputs),
                outputs=tensors(plan.outputs),
                config=model_cfg,
                strict=False,
            )
            triton.run()
        except Exception as exc:
            tail = server_log_tail(cfg)
            raise DeployError(f"Triton did not start: {type(exc).__name__}: {exc}\n{tail}") from exc
        # A batching model takes one sample; without batching the whole batch-1 tensor.
        request = {k: v[0] for k, v in plan.feeds.items()} if batching else plan.feeds
        yield f"grpc://127.0.0.1:{ports[1]}", request, f"http://127.0.0.1:{ports[2]}/metrics"


def _model_config(rep: ServeReport, batching: bool) -> Any:
    """PyTriton's model config: the dynamic batcher the sweep chose, or no batching."""
    from pytriton.model_config import DynamicBatcher, ModelConfig

    if not batching:
        return ModelConfig(batching=False)
    return ModelConfig(
        max_batch_size=rep.max_batch_size,
        batcher=DynamicBatcher(
            max_queue_delay_microseconds=rep.max_queue_delay_us,
            preferred_batch_size=rep.preferred_batch_sizes or None,
        ),
    )


def batch_counts(metrics_text: str, model: str = "model") -> tuple[float, float] | None:
    """(requests, model executions) of ``model`` from Triton's Prometheus metrics text (its
    ``nv_inference_count`` and ``nv_inference_exec_count`` counters), None when absent."""
    found: dict[str, float] = {}
    for line in metrics_text.splitlines():
        name, _, rest = line.partition("{")
        if name not in ("nv_inference_count", "nv_inference_exec_count"):
            continue
        labels, _, value = rest.partition("}")
        if f'model="{model}"' not in labels.split(","):
            continue
        with contextlib.suppress(ValueError):
            found[name] = found.get(name, 0.0) + float(value.strip())
    if len(found) < 2:
        return None
    return found["nv_inference_count"], found["nv_inference_exec_count"]


def _batch_counts(metrics_url: str) -> tuple[float, float] | None:
    import urllib.request

    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as resp:  # noqa: S310 - loopback
            return batch_counts(resp.read().decode("utf-8", "replace"))
    except OSError:
        return None


def _avg_batch(
    before: tuple[float, float] | None, after: tuple[float, float] | None
) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def _read(path: Path | None) -> str:
    try:
        return path.read_text(errors="replace") if path else ""
    except OSError:
        return ""


def _point(
    mode: str,
    clients: int,
    lat: list[float],
    errors: int,
    wall: float,
    avg_batch: float | None = None,
) -> LoadPoint:
    return LoadPoint(
        mode=mode,
        clients=clients,
        requests=len(lat),
        errors=errors,
        p50_ms=statistics.median(lat) * 1e3 if lat else float("nan"),
        p99_ms=percentile(lat, 0.99) * 1e3,
        throughput=len(lat) / wall if wall > 0 else 0.0,
        avg_batch=avg_batch,
    )


def serve_test(
    runtime: Any,
    spec: Any,
    *,
    clients: Sequence[int] = (1, 4, 16),
    batches: Sequence[int] | None = None,
    duration_s: float = 5.0,
    max_requests: int = 2000,
    port: int | None = None,
    modes: Sequence[str] = MODES,
    log: Callable[[str], None] = lambda s: None,
    progress: Callable[[float, str], None] = lambda f, m: None,
    cancel: Callable[[], bool] = _never,
    instances: int = 1,
    client_process: bool = True,
) -> ServeReport:
    """Batch sweep, then the served load per mode and client count (see the module doc).
    ``instances``: model instances in the server (each one thread running ``runtime``);
    ``client_process``: run the clients in a spawned process (else threads here)."""
    check_pytriton()
    if cancel():
        raise Cancelled("serve test cancelled")
    progress(0.0, "batch sweep")
    plan = _plan(runtime, spec, batches, log)
    _say_no_wait(plan, log)
    python_lib_env()
    check_ports(port)
    steps, done = len(modes) * len(clients), 0
    for mode in modes:
        log(f"starting Triton ({mode}) on 127.0.0.1")
        progress(0.1 + 0.9 * done / steps, f"starting Triton ({mode})")
        with (
            tempfile.TemporaryDirectory(prefix="accel-triton-") as logs,
            _serving(runtime, spec, plan, mode, port, instances, logs) as (url, request, metrics),
        ):
            for n in clients:
                if cancel():
                    raise Cancelled("serve test cancelled")
                progress(0.1 + 0.9 * done / steps, f"{mode}: {n} client(s)")
                args = (url, request, n, duration_s, max_requests)
                point = _loaded(mode, args, metrics, client_process, cancel)
                plan.report.load.append(point)
                done += 1
                log(_point_line(point))
            if mode == "no batching" and not cancel():
                rep = plan.report
                rounds = max(5, min(50, int(duration_s * 1e3 / max(rep.direct_p50_ms, 1.0))))
                rep.direct_p50_ms, rep.served_p50_ms = _overhead(
                    runtime, plan.one, url, request, rounds
                )
    if cancel():
        raise Cancelled("serve test cancelled")
    progress(1.0, "done")
    return plan.report


def _say_no_wait(plan: _Plan, log: Callable[[str], None]) -> None:
    if plan.report.sweep_gain < WAIT_GAIN:  # choose_batching's own threshold
        log(
            f"the direct sweep gains {plan.report.sweep_gain:.2f}x at best over batch 1: "
            "the dynamic batcher batches the requests already queued and holds none back "
            "(no preferred sizes, max queue delay 0)"
        )


def _loaded(
    mode: str, args: tuple, metrics: str, client_process: bool, cancel: Callable[[], bool]
) -> Any:
    """One load test of ``args`` (url, request, clients, duration, max requests) and the
    server's batches meanwhile (from its metrics)."""
    url, request, n, duration_s, max_requests = args
    counts = _batch_counts(metrics)
    if client_process:
        lat, errors, wall = in_client_process(client_load, args, cancel, duration_s + 120)
    else:
        lat, errors, wall = client_load(*args, cancel=cancel)
    batch = _avg_batch(counts, _batch_counts(metrics))
    return _point(mode, n, lat, errors, wall, batch)


def _point_line(point: Any) -> str:
    return (
        f"{point.mode:16s} {point.clients:3d} clients: {point.throughput:9.1f} req/s, "
        f"p50 {point.p50_ms:7.2f} ms, p99 {point.p99_ms:7.2f} ms"
        + (f", {point.avg_batch:.2f} requests per batch" if point.avg_batch is not None else "")
        + (f", {point.errors} errors" if point.errors else "")
    )


def serve_run(
    job: Any, emit: Callable[[dict], None], cancel: Callable[[], bool] = _never
) -> ServeReport:
    """The use case behind the ``serve_test`` job (``accel.job_specs.ServeTestJob``): load the
    model file, serve it, report progress and log lines as runner event dicts."""
    from accel.deploy.triton import load_runtime
    from accel.events import Log, Progress
    from accel.models import InputSpec

    runtime = load_runtime(job.artifact_kind, job.artifact_path)

    def progress(fraction: float, message: str) -> None:
        emit(Progress(-1, fraction, message).to_dict())

    def log(message: str) -> None:
        emit(Log("info", message).to_dict())

    return serve_test(
        runtime,
        InputSpec.parse(job.input_spec),
        clients=job.clients,
        batches=job.batches,
        duration_s=job.duration_s,
        max_requests=job.max_requests,
        port=job.port,
        log=log,
        progress=progress,
        cancel=cancel,
    )
