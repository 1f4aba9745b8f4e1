"""A real serving test: PyTriton (which ships the Triton server) serves a model on loopback
and concurrent clients load it, with and without dynamic batching.

``serve_test(runtime, spec, ...)`` first measures a batch sweep of the model called directly,
picks ``dynamic_batching`` from it (``accel.deploy.triton.choose_batching``), then for each
mode starts the Triton server bound to 127.0.0.1, sends single-sample requests from
``clients`` threads (each request count and the whole test bounded in time), and stops the
server, also on Ctrl-C. Results: p50/p99 latency and throughput per client count and mode,
and the served path's overhead over a direct call at one client.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.deploy.triton import (
    DeployError,
    batch_spec,
    batch_sweep,
    choose_batching,
    default_batches,
    tensor_configs,
)


@dataclass(frozen=True)
class LoadPoint:
    mode: str  # "dynamic batching" | "no batching"
    clients: int
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    throughput: float  # requests (= samples) per second

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

    def point(self, mode: str, clients: int) -> LoadPoint | None:
        return next((p for p in self.load if p.mode == mode and p.clients == clients), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep": [p.to_dict() for p in self.sweep],
            "preferred_batch_sizes": self.preferred_batch_sizes,
            "max_queue_delay_us": self.max_queue_delay_us,
            "max_batch_size": self.max_batch_size,
            "direct_p50_ms": self.direct_p50_ms,
            "load": [p.to_dict() for p in self.load],
        }


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


def _python_lib_env() -> None:
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


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    k = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[k]


def load_test(
    infer: Callable[[], Any], clients: int, *, duration_s: float, max_requests: int
) -> tuple[list[float], int, float]:
    """``clients`` threads call ``infer()`` until ``duration_s`` passed or each sent
    ``max_requests``; returns (latencies in s, errors, wall time)."""
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + duration_s

    def client() -> None:
        mine: list[float] = []
        for _ in range(max_requests):
            if time.monotonic() >= stop_at:
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


def serve_test(
    runtime: Any,
    spec: Any,
    *,
    clients: Sequence[int] = (1, 4, 16),
    batches: Sequence[int] | None = None,
    duration_s: float = 5.0,
    max_requests: int = 2000,
    port: int | None = None,
    modes: Sequence[str] = ("no batching", "dynamic batching"),
    log: Callable[[str], None] = lambda s: None,
) -> ServeReport:
    check_pytriton()
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
    max_batch = max(batches)
    one = spec.sample(dims={batch_dim: 1})
    direct = [p for p in sweep if p.batch == 1]  # the sweep's batch-1 median: a direct call
    direct_ms = direct[0].latency_ms if direct else float("nan")
    inputs, outputs = tensor_configs(runtime, spec, max_batch, one)
    report = ServeReport(sweep, preferred, delay, max_batch, direct_ms)

    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    out_names = [t.name for t in outputs]

    @batch
    def infer_func(**arrays: Any) -> dict[str, Any]:
        res = runtime.run(
            {t.name: arrays[name] for t, name in zip(spec.inputs, arrays, strict=False)}
        )
        return {n: np.asarray(r) for n, r in zip(out_names, res, strict=False)}

    _python_lib_env()
    if port is not None:
        for p in (port, port + 1, port + 2):
            check_port(p)
    feeds = {n.name: one[t.name].numpy() for n, t in zip(inputs, spec.inputs, strict=False)}
    sample_feeds = {k: v[0] for k, v in feeds.items()}
    for mode in modes:
        batching = mode == "dynamic batching"
        ports = (port, port + 1, port + 2) if port else (free_port(), free_port(), free_port())
        cfg = TritonConfig(
            http_address="127.0.0.1",
            http_port=ports[0],
            grpc_address="127.0.0.1",
            grpc_port=ports[1],
            metrics_address="127.0.0.1",
            metrics_port=ports[2],
            log_verbose=0,
        )

        def shape(t: Any, batching: bool = batching) -> tuple[int, ...]:
            return tuple(t.dims) if batching else (-1, *t.dims)

        model_cfg = (
            ModelConfig(
                max_batch_size=max_batch,
                batcher=DynamicBatcher(
                    max_queue_delay_microseconds=delay, preferred_batch_size=preferred or None
                ),
            )
            if batching
            else ModelConfig(batching=False)
        )
        log(f"starting Triton ({mode}) on 127.0.0.1:{ports[1]}")
        with Triton(config=cfg) as triton:
            triton.bind(
                model_name="model",
                infer_func=infer_func,
                inputs=[
                    Tensor(name=t.name, dtype=np.dtype(t.dtype), shape=shape(t)) for t in inputs
                ],
                outputs=[
                    Tensor(name=t.name, dtype=np.dtype(t.dtype), shape=shape(t)) for t in outputs
                ],
                config=model_cfg,
                strict=False,
            )
            triton.run()
            from pytriton.client import ModelClient

            for n in clients:
                local = threading.local()
                opened: list[Any] = []

                url = f"grpc://127.0.0.1:{ports[1]}"
                request = sample_feeds if batching else feeds

                def infer(
                    local: Any = local, opened: list[Any] = opened, url: str = url, request=request
                ) -> Any:
                    c = getattr(local, "client", None)
                    if c is None:
                        c = local.client = ModelClient(url, "model", init_timeout_s=60)
                        opened.append(c)
                    # A batching model takes one sample (Triton adds the batch dim);
                    # without batching the request is the whole batch-1 tensor.
                    return c.infer_sample(**request)

                try:
                    infer()  # connect and warm up once
                    lat, errors, wall = load_test(
                        infer, n, duration_s=duration_s, max_requests=max_requests
                    )
                finally:
                    for c in opened:
                        with contextlib.suppress(Exception):
                            c.close()
                point = LoadPoint(
                    mode=mode,
                    clients=n,
                    requests=len(lat),
                    errors=errors,
                    p50_ms=statistics.median(lat) * 1e3 if lat else float("nan"),
                    p99_ms=_percentile(lat, 0.99) * 1e3,
                    throughput=len(lat) / wall if wall > 0 else 0.0,
                )
                report.load.append(point)
                log(
                    f"{mode:16s} {n:3d} clients: {point.throughput:9.1f} req/s, "
                    f"p50 {point.p50_ms:7.2f} ms, p99 {point.p99_ms:7.2f} ms"
                    + (f", {errors} errors" if errors else "")
                )
    return report
