"""One model's latency / throughput / memory, for torch modules, runtimes and callables.

``benchmark(model, inputs)`` times one model on one set of inputs, for the benchmark job
(latency percentiles, throughput, peak memory). It calls the model through the same
``accel.timing.harness.prepare`` as every comparison and batches tiny models by the same rule
(``accel.timing.batching``); speedups are never computed from it (see ``compare_interleaved``).


* The very first call (torch.compile, ORT session creation, lazy initialisation) is timed on
  its own and reported as ``first_call_ms``; it is never part of the statistics.
* ``warmup`` further calls are made and discarded, then ``iters`` timed calls (more when
  ``min_time_s`` asks for a minimum measured time).
* Torch models run under ``torch.inference_mode()`` with a fixed thread count
  (``torch.set_num_threads``), restored afterwards.
* On CUDA each torch iteration is timed with CUDA events and synchronised. On CPU nothing
  touches ``torch.cuda`` so no CUDA context is ever created.

Peak memory (``peak_mem_bytes``, see ``peak_mem_kind``):

* ``"cuda_max_allocated"``: ``torch.cuda.max_memory_allocated`` after
  ``reset_peak_memory_stats`` -- everything torch held on the device at the peak, weights
  included.
* ``"rss_hwm_growth"`` (Linux): the process's peak resident set (VmHWM, reset through
  ``/proc/self/clear_refs`` before the run) minus the resident set at the start. It is the
  extra host memory the run needed (activations, workspaces, lazily created sessions); memory
  that was resident before the run, such as already-loaded weights, is not counted.
* ``"ru_maxrss_growth"`` (fallback when the peak cannot be reset): growth of the process's
  lifetime peak RSS; a lower bound, 0 when an earlier phase had a higher peak.
* ``None``: not measured (ONNX Runtime on CUDA, whose allocations torch cannot see).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from accel.errors import AccelError
from accel.timing.batching import calls_per_sample
from accel.timing.environment import environment_info
from accel.timing.harness import Prepared, batch_size, prepare
from accel.timing.stats import percentile

# Upper bound on timed samples when ``min_time_s`` keeps the loop going (a very fast model
# with a long min_time_s would otherwise collect millions of samples).
MAX_ITERS = 100_000


@dataclass(frozen=True)
class BenchResult:
    """Timing statistics of one benchmark. Latencies in milliseconds, first call excluded."""

    device: str
    iters: int
    warmup: int
    threads: int | None
    batch_size: int
    median_ms: float
    mean_ms: float
    p90_ms: float
    p99_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    throughput: float  # samples per second = batch_size / median
    first_call_ms: float
    peak_mem_bytes: int | None
    peak_mem_kind: str | None
    size_bytes: int | None
    runner: str  # "torch" | "onnxruntime" | "callable"
    samples_ms: tuple[float, ...] = ()
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def p50_ms(self) -> float:
        return self.median_ms

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["samples_ms"] = list(self.samples_ms)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchResult:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown BenchResult fields: {sorted(unknown)}")
        kwargs = dict(d)
        kwargs["samples_ms"] = tuple(kwargs.get("samples_ms", ()))
        kwargs["environment"] = dict(kwargs.get("environment", {}))
        return cls(**kwargs)

    def summary(self) -> str:
        return (
            f"{self.runner} on {self.device}: p50 {self.median_ms:.3f} ms, "
            f"p90 {self.p90_ms:.3f} ms, p99 {self.p99_ms:.3f} ms, "
            f"{self.throughput:.1f} samples/s (first call {self.first_call_ms:.1f} ms, "
            f"{self.iters} iters)"
        )


# --------------------------------------------------------------------------- memory


class _HostPeak:
    """Peak RSS growth of this process over a block (see the module docstring)."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self._start_rss = 0
        self._start_maxrss = 0

    @staticmethod
    def _status_kb(key: str) -> int | None:
        try:
            with open("/proc/self/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None

    @staticmethod
    def _rss_bytes() -> int:
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except Exception:
            kb = _HostPeak._status_kb("VmRSS")
            return (kb or 0) * 1024

    @staticmethod
    def _maxrss_bytes() -> int:
        try:
            import resource
        except ImportError:  # Windows
            return 0
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(maxrss if sys.platform == "darwin" else maxrss * 1024)

    def start(self) -> None:
        try:
            # "5" resets the VmHWM peak to the current RSS (Linux >= 4.0).
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")
            self.kind = "rss_hwm_growth" if self._status_kb("VmHWM") is not None else None
        except OSError:
            self.kind = None
        self._start_rss = self._rss_bytes()
        self._start_maxrss = self._maxrss_bytes()
        if self.kind is None:
            self.kind = "ru_maxrss_growth"

    def stop(self) -> int:
        if self.kind == "rss_hwm_growth":
            hwm = (self._status_kb("VmHWM") or 0) * 1024
            return max(0, hwm - self._start_rss)
        return max(0, self._maxrss_bytes() - self._start_maxrss)


# --------------------------------------------------------------------------- benchmark


def benchmark(
    model: Any,
    inputs: Any,
    device: str = "cpu",
    warmup: int = 10,
    iters: int = 50,
    threads: int | None = None,
    min_time_s: float | None = None,
) -> BenchResult:
    """Time ``model`` on ``inputs`` and return latency statistics (first call kept apart).

    ``model``: a torch module or any callable (called as ``model(*inputs.values())`` for a
    dict, ``model(*inputs)`` for a tuple), an ``onnxruntime.InferenceSession`` (fed by input
    name; torch tensors are converted to numpy once, before timing), a path to a ``.onnx``
    file (its session creation is the first call), or a ``LoadedModel``. Inputs are moved to
    ``device`` once, before timing. ``threads`` fixes ``torch.set_num_threads`` for the run
    (and ``intra_op_num_threads`` of sessions created here). ``min_time_s`` keeps timing past
    ``iters`` until that many seconds of measured time have accumulated.
    """
    _check_counts(warmup, iters, threads)
    device = str(device)
    on_cuda = device.startswith("cuda")
    if on_cuda:
        _require_cuda(device)  # before anything is moved to the device
    prepared = prepare(model, inputs, device, threads)
    torch = sys.modules.get("torch") if prepared.uses_torch or on_cuda else None
    cuda_timing = on_cuda and prepared.runner != "onnxruntime"

    old_threads = None
    if torch is not None and threads is not None:
        old_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
    grad_ctx = torch.inference_mode() if torch is not None else contextlib.nullcontext()
    gc_was_enabled = gc.isenabled()
    try:
        with grad_ctx:
            run = _timed_run(
                prepared,
                device,
                warmup,
                iters,
                min_time_s,
                cuda_torch=torch if cuda_timing else None,
                host_memory=not on_cuda,
            )
    finally:
        if gc_was_enabled:
            gc.enable()
        if old_threads is not None:
            torch.set_num_threads(old_threads)
    used_threads = _used_threads(prepared, torch, threads)
    return _result(run, prepared, inputs, device, warmup, used_threads)


def _check_counts(warmup: int, iters: int, threads: int | None) -> None:
    """Reject settings no run can honour."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1 or None, got {threads}")


def _require_cuda(device: str) -> None:
    """Fail with a clear message when ``device`` is CUDA and this machine has none."""
    import torch

    if not torch.cuda.is_available():
        raise AccelError(
            f"device {device!r} was requested but CUDA is not available on this machine; "
            "benchmark on device='cpu' instead"
        )


@dataclass
class _TimedRun:
    samples: list[float]  # ms per timed call
    first_call_ms: float
    peak_mem: int | None
    peak_kind: str | None


def _timed_run(
    prepared: Prepared,
    device: str,
    warmup: int,
    iters: int,
    min_time_s: float | None,
    *,
    cuda_torch: Any,
    host_memory: bool,
) -> _TimedRun:
    """The first call (timed apart), the warm-up, the timed calls (garbage collection off:
    a collection inside the loop would land in one random sample) and the memory peak.
    ``cuda_torch``: torch when the calls are timed with CUDA events, else None; the caller
    turns garbage collection back on."""
    host_peak = _HostPeak()
    peak_mem: int | None = None
    peak_kind: str | None = None
    if cuda_torch is not None:
        cuda_torch.cuda.synchronize(device)
        cuda_torch.cuda.reset_peak_memory_stats(device)
    elif host_memory:
        host_peak.start()

    t0 = time.perf_counter()
    prepared.first()
    if cuda_torch is not None:
        cuda_torch.cuda.synchronize(device)
    first_call_ms = (time.perf_counter() - t0) * 1000.0

    fastest = math.inf
    for _ in range(max(warmup, 1)):  # timed one by one: the fastest decides the batching
        t = time.perf_counter()
        prepared.call()
        if cuda_torch is not None:
            cuda_torch.cuda.synchronize(device)
        fastest = min(fastest, time.perf_counter() - t)
    batch = 1 if cuda_torch is not None else calls_per_sample(fastest)

    gc.collect()
    gc.disable()
    samples = _samples(prepared.call, iters, min_time_s, cuda_torch, batch)

    if cuda_torch is not None:
        peak_mem = int(cuda_torch.cuda.max_memory_allocated(device))
        peak_kind = "cuda_max_allocated"
    elif host_memory:
        peak_mem = host_peak.stop()
        peak_kind = host_peak.kind
    return _TimedRun(samples, first_call_ms, peak_mem, peak_kind)


def _samples(
    call: Callable[[], Any],
    iters: int,
    min_time_s: float | None,
    cuda_torch: Any,
    batch: int = 1,
) -> list[float]:
    """ms per call: at least ``iters`` samples and ``min_time_s`` seconds (capped at
    MAX_ITERS samples); CUDA events when ``cuda_torch`` is given, else perf_counter over
    ``batch`` calls per sample (accel.timing.batching)."""
    samples: list[float] = []
    measured_s = 0.0
    while True:
        if cuda_torch is not None:
            start = cuda_torch.cuda.Event(enable_timing=True)
            end = cuda_torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            ms = float(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            for _ in range(batch):
                call()
            ms = (time.perf_counter() - t) * 1000.0 / batch
        samples.append(ms)
        measured_s += ms * batch / 1000.0
        if len(samples) >= iters and (
            min_time_s is None or measured_s >= min_time_s or len(samples) >= MAX_ITERS
        ):
            break
    return samples


def _used_threads(prepared: Prepared, torch: Any, threads: int | None) -> int | None:
    """The intra-op threads the timed calls ran with."""
    if prepared.runner == "onnxruntime":
        return prepared.threads()
    if torch is not None:
        return threads if threads is not None else torch.get_num_threads()
    return threads


def _result(
    run: _TimedRun,
    prepared: Prepared,
    inputs: Any,
    device: str,
    warmup: int,
    used_threads: int | None,
) -> BenchResult:
    """Latency statistics of the timed calls."""
    samples = run.samples
    ordered = sorted(samples)
    median = percentile(ordered, 50)
    batch = batch_size(inputs)
    return BenchResult(
        device=device,
        iters=len(samples),
        warmup=warmup,
        threads=used_threads,
        batch_size=batch,
        median_ms=median,
        mean_ms=statistics.fmean(samples),
        p90_ms=percentile(ordered, 90),
        p99_ms=percentile(ordered, 99),
        std_ms=statistics.stdev(samples) if len(samples) > 1 else 0.0,
        min_ms=ordered[0],
        max_ms=ordered[-1],
        throughput=batch / (median / 1000.0) if median > 0 else math.inf,
        first_call_ms=run.first_call_ms,
        peak_mem_bytes=run.peak_mem,
        peak_mem_kind=run.peak_kind,
        size_bytes=prepared.size_bytes,
        runner=prepared.runner,
        samples_ms=tuple(samples),
        environment=environment_info(device),
    )
