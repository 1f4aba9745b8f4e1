"""Speedups you can trust: a reference and a candidate timed in alternating rounds.

``compare_interleaved(reference, candidate, inputs, settings)`` times both models in one
process, round by round (A B, then B A, ...: the order alternates so neither always runs on
the other's caches), each round ``iters`` samples of each. A change of machine load during
the measurement hits both sides of a round alike, so the per-round ratio
``reference / candidate`` stays put. The speedup is the median of those ratios, with a
bootstrap confidence interval (``ratio_interval``).

* Tiny models (under ``TINY_CALL_S`` a call) are called several times per sample, so the
  timer's own cost and resolution do not dominate; a sample is the mean of its calls.
* ``settings.min_time_s`` adds rounds (up to ``MAX_ROUNDS``) until both models together were
  timed that long: fast models get more rounds and a tighter interval for little wall time.
* ``NoiseMonitor`` records what else used the machine while timing (other processes' CPU,
  load average, CPU frequency/governor, NVML GPU clocks and other GPU processes where
  present). A comparison timed while other processes kept more than a quarter of the
  cores busy, or whose interval is wider than +-10 %, is ``noisy``, with the reason.
* One thread count (``settings.threads``, default: the physical cores) drives torch and
  ONNX Runtime alike and is recorded with the result.

Nothing here asserts on wall time; the tests drive it with a fake clock.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from accel.errors import AccelError

log = logging.getLogger(__name__)

# A model faster than this per call is batched: several calls per sample.
TINY_CALL_S = 50e-6
# A batched sample lasts about this long.
TARGET_SAMPLE_S = 500e-6
MAX_BATCH = 10_000
# ``min_time_s`` never adds rounds beyond this.
MAX_ROUNDS = 200
# Noisy when the interval's half width exceeds this fraction of the speedup ...
NOISY_HALF_WIDTH = 0.10
# ... or when other processes kept more than this fraction of the cores busy.
NOISY_OTHER_CORES = 0.25
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000

# The clock every sample is read from (seconds). Tests replace it with a fake one.
CLOCK: Callable[[], float] = time.perf_counter


class MeasureError(AccelError, ValueError):
    """Timing could not give a trustworthy number; the message says which setting to change."""


# --------------------------------------------------------------------------- settings


def physical_cores() -> int:
    """Physical cores of this machine (logical ones when that is all we can find)."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001 - psutil missing or the platform hides it
        n = None
    return max(1, int(n or os.cpu_count() or 1))


@dataclass(frozen=True)
class TimingSettings:
    """How a comparison is timed (the recipe's ``benchmark`` section).

    ``rounds``: A/B rounds (at least, but never more than ``iters``: a round takes at least
    one sample of each model); ``iters``: timed samples per model, spread over the rounds
    (``per_round`` = iters / rounds, rounded up); ``warmup``: untimed calls
    of each model before the first round; ``threads``: intra-op threads for torch and ONNX
    Runtime (None: the physical cores); ``min_time_s``: add rounds until both models together
    were timed this long (0: exactly ``rounds``).
    """

    rounds: int = 12
    iters: int = 48
    warmup: int = 3
    threads: int | None = None
    min_time_s: float = 0.5

    def __post_init__(self) -> None:
        check_settings(
            rounds=self.rounds,
            iters=self.iters,
            warmup=self.warmup,
            threads=self.threads,
            min_time_s=self.min_time_s,
        )

    @property
    def base_rounds(self) -> int:
        return min(self.rounds, self.iters)

    @property
    def per_round(self) -> int:
        return max(1, math.ceil(self.iters / self.base_rounds))

    @property
    def resolved_threads(self) -> int:
        return self.threads or physical_cores()

    @classmethod
    def from_any(cls, obj: Any) -> TimingSettings:
        """From a recipe's BenchSettings, a mapping or a TimingSettings."""
        if isinstance(obj, TimingSettings):
            return obj
        if obj is None:
            return cls()
        get = obj.get if isinstance(obj, Mapping) else lambda k, d=None: getattr(obj, k, d)
        defaults = cls.__dataclass_fields__
        kwargs = {}
        for name in ("rounds", "iters", "warmup", "threads", "min_time_s"):
            value = get(name, None)
            kwargs[name] = defaults[name].default if value is None else value
        return cls(**kwargs)


def check_settings(*, rounds: Any, iters: Any, warmup: Any, threads: Any, min_time_s: Any) -> None:
    """Raise MeasureError naming the first bad benchmark setting."""

    def whole(name: str, value: Any, low: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MeasureError(f"benchmark.{name} must be a whole number, got {value!r}")
        if value < low:
            raise MeasureError(f"benchmark.{name} must be >= {low}, got {value}")

    whole("rounds", rounds, 1)
    whole("iters", iters, 1)
    whole("warmup", warmup, 0)
    if threads is not None:
        whole("threads", threads, 1)
    if isinstance(min_time_s, bool) or not isinstance(min_time_s, int | float):
        raise MeasureError(f"benchmark.min_time_s must be a number of seconds, got {min_time_s!r}")
    if not math.isfinite(min_time_s) or min_time_s < 0:
        raise MeasureError(f"benchmark.min_time_s must be >= 0 seconds, got {min_time_s}")


# --------------------------------------------------------------------------- interval math


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval (``low <= value <= high``)."""

    value: float
    low: float
    high: float
    confidence: float = CONFIDENCE

    @property
    def half_width(self) -> float:
        """Largest distance from the value to an end, relative to the value (0.05 = +-5 %)."""
        if self.value <= 0:
            return math.inf
        return max(self.value - self.low, self.high - self.value) / self.value

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def ratio_interval(
    reference: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Median of the per-round ratios ``reference[i] / candidate[i]`` with a percentile
    bootstrap interval (rounds resampled with replacement; seeded, so reproducible).

    Each entry is one round's time of one model; pairing them by round is what cancels a
    load that changes between rounds."""
    import numpy as np

    if len(reference) != len(candidate):
        raise MeasureError(
            f"{len(reference)} reference rounds but {len(candidate)} candidate rounds"
        )
    if not reference:
        raise MeasureError("no timing rounds: benchmark.rounds must be >= 1")
    ref = np.asarray(reference, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    for name, arr in (("reference", ref), ("candidate", cand)):
        if not np.all(np.isfinite(arr)):
            raise MeasureError(f"the {name} timings contain NaN or infinity")
        if np.any(arr <= 0):
            raise MeasureError(
                f"the {name} model timed at 0 s (below the timer's resolution); "
                "raise benchmark.iters or benchmark.min_time_s"
            )
    ratios = ref / cand
    value = float(np.median(ratios))
    if len(ratios) == 1:
        return Interval(value, value, value, confidence)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ratios), size=(resamples, len(ratios)))
    medians = np.median(ratios[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return Interval(value, min(float(low), value), max(float(high), value), confidence)


def median_interval(
    values: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Median of ``values`` with a percentile bootstrap interval (e.g. a latency's rounds)."""
    import numpy as np

    if not values:
        raise MeasureError("no values to summarise")
    v = np.asarray(values, dtype=float)
    value = float(np.median(v))
    if len(v) == 1:
        return Interval(value, value, value, confidence)
    rng = np.random.default_rng(seed)
    medians = np.median(v[rng.integers(0, len(v), size=(resamples, len(v)))], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return Interval(value, min(float(low), value), max(float(high), value), confidence)


# --------------------------------------------------------------------------- noise guard


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


@dataclass
class NoiseReport:
    """What else used the machine while a comparison was timed."""

    cores: int  # logical cores
    wall_s: float = 0.0
    own_cores: float = 0.0  # this process's average CPU use, in cores
    other_cores: float = 0.0  # every other process's average CPU use, in cores
    other_cores_max: float = 0.0  # the busiest round
    load_avg_1m: float | None = None
    cpu_mhz: float | None = None
    governor: str | None = None
    gpu: dict[str, Any] | None = None  # NVML: clocks, utilisation, other processes

    @property
    def busy(self) -> bool:
        return self.other_cores > NOISY_OTHER_CORES * self.cores

    def reason(self) -> str:
        return f"{self.cores} cores, {self.other_cores:.1f} busy with other processes"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["busy"] = self.busy
        return d


class NoiseMonitor:
    """Samples machine vs own CPU time (psutil) around each round; cheap (reads /proc)."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._ok = True
        try:
            import psutil

            self._psutil = psutil
            self._proc = psutil.Process()
        except Exception:  # noqa: BLE001 - no psutil: report what we can
            self._ok = False
        self.cores = os.cpu_count() or 1
        self._t0 = self._busy0 = self._own0 = 0.0
        self._last: tuple[float, float, float] | None = None
        self._other_max = 0.0

    def _snapshot(self) -> tuple[float, float, float]:
        """(wall, machine busy CPU seconds, own CPU seconds)."""
        now = time.monotonic()
        if not self._ok:
            return now, 0.0, 0.0
        t = self._psutil.cpu_times()
        idle = t.idle + getattr(t, "iowait", 0.0)
        busy = sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        c = self._proc.cpu_times()
        own = c.user + c.system
        return now, busy, own

    def start(self) -> None:
        self._last = self._snapshot()
        self._t0, self._busy0, self._own0 = self._last
        self._other_max = 0.0

    def tick(self) -> None:
        """Call between rounds: tracks the busiest stretch."""
        if self._last is None:
            return
        snap = self._snapshot()
        dt = snap[0] - self._last[0]
        if dt >= 0.05:  # shorter windows are below /proc/stat's resolution
            other = max(0.0, (snap[1] - self._last[1]) - (snap[2] - self._last[2])) / dt
            self._other_max = max(self._other_max, other)
            self._last = snap

    def stop(self) -> NoiseReport:
        snap = self._snapshot()
        wall = max(snap[0] - self._t0, 1e-9)
        own = max(0.0, snap[2] - self._own0)
        other = max(0.0, (snap[1] - self._busy0) - own)
        rep = NoiseReport(
            cores=self.cores,
            wall_s=wall,
            own_cores=own / wall,
            other_cores=min(other / wall, float(self.cores)),
            other_cores_max=min(max(self._other_max, other / wall), float(self.cores)),
        )
        with contextlib.suppress(OSError, AttributeError):
            rep.load_avg_1m = os.getloadavg()[0]
        if self._ok:
            with contextlib.suppress(Exception):
                freq = self._psutil.cpu_freq()
                rep.cpu_mhz = float(freq.current) if freq else None
        rep.governor = _read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
        if self.device.startswith("cuda"):
            rep.gpu = _nvml_state(self.device)
        return rep


@dataclass(frozen=True)
class CpuPlacement:
    """Where a comparison runs: the CPUs it may use and its thread count.

    With ``threads`` left to the studio (the default), CPUs that other processes keep busy are
    left out while timing: a thread pool that shares a core with another busy process waits
    for it at every barrier (eager torch with 2 OpenMP threads on 2 cores, one of them taken,
    ran 10-40x slower than on the free core alone), which says nothing about the model. The
    comparison then runs on the free CPUs with one thread each, and says so."""

    threads: int
    cpus: tuple[int, ...] = ()  # empty: wherever the OS puts it (not pinned)
    busy_cpus: tuple[int, ...] = ()  # left out because other processes kept them busy

    @property
    def note(self) -> str | None:
        if not self.cpus:
            return None
        busy = ", ".join(str(c) for c in self.busy_cpus)
        return (
            f"timed on CPU {', '.join(str(c) for c in self.cpus)} with {self.threads} "
            f"thread(s): CPU {busy} busy with other processes"
        )

    @contextlib.contextmanager
    def pinned(self):
        """Restrict every thread of this process to ``cpus`` for the block (Linux)."""
        if not self.cpus or not hasattr(os, "sched_setaffinity"):
            yield
            return
        original = os.sched_getaffinity(0)
        _set_all_threads_affinity(set(self.cpus))
        try:
            yield
        finally:
            # Threads created inside the block (thread pools) inherit the narrow mask: widen
            # every thread back, not only the ones that existed before.
            _set_all_threads_affinity(original)


def _set_all_threads_affinity(cpus: set[int]) -> None:
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, cpus)


# A CPU counts as busy when other processes kept it busier than this while we sampled.
BUSY_CPU = 0.5
CPU_SAMPLE_S = 0.3


def per_cpu_busy(sample_s: float = CPU_SAMPLE_S) -> dict[int, float] | None:
    """Busy fraction of each CPU this process may use, sampled over ``sample_s`` while this
    thread sleeps (so it is other processes' use, and our own idle threads'). None where
    unknown (no psutil, no affinity API)."""
    try:
        import psutil

        allowed = sorted(os.sched_getaffinity(0))
        per = psutil.cpu_percent(interval=sample_s, percpu=True)
    except Exception:  # noqa: BLE001 - platform without per-CPU figures: do not pin
        return None
    return {c: per[c] / 100.0 for c in allowed if c < len(per)}


def choose_cpus(threads: int | None, device: str = "cpu") -> CpuPlacement:
    """The placement for a comparison: ``threads`` as given when the user set it (never
    pinned); otherwise the physical cores, or only the CPUs other processes leave free."""
    if threads is not None:
        return CpuPlacement(threads=threads)
    cores = physical_cores()
    if str(device).startswith("cuda"):
        return CpuPlacement(threads=cores)
    busy = per_cpu_busy()
    if not busy or len(busy) < 2:
        return CpuPlacement(threads=cores)
    free = tuple(c for c, b in sorted(busy.items()) if b < BUSY_CPU)
    taken = tuple(c for c, b in sorted(busy.items()) if b >= BUSY_CPU)
    if not taken or not free:  # all free: the usual case; all busy: pinning cannot help
        return CpuPlacement(threads=cores)
    return CpuPlacement(threads=max(1, min(cores, len(free))), cpus=free, busy_cpus=taken)


def _nvml_state(device: str) -> dict[str, Any] | None:
    """GPU clocks, utilisation and other processes via NVML (None where unavailable)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            index = int(device.split(":", 1)[1]) if ":" in device else 0
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            me = os.getpid()
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            return {
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "utilization_pct": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                "other_processes": sum(1 for p in procs if p.pid != me),
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - a broken driver must not break a measurement
        log.debug("NVML query failed: %s", exc)
        return None


# --------------------------------------------------------------------------- timing


@dataclass
class Side:
    """One model's timings in a comparison (milliseconds per call)."""

    round_ms: list[float] = field(default_factory=list)  # one value per round
    samples_ms: list[float] = field(default_factory=list)  # every sample, in order
    batch: int = 1  # calls per sample
    first_call_ms: float = 0.0

    def stats(self) -> dict[str, float]:
        import numpy as np

        s = np.asarray(self.samples_ms, dtype=float)
        p50, p90, p99 = np.percentile(s, [50, 90, 99])
        return {
            "latency_p50_ms": float(p50),
            "latency_p90_ms": float(p90),
            "latency_p99_ms": float(p99),
            "latency_mean_ms": float(s.mean()),
            "latency_std_ms": float(s.std(ddof=1)) if len(s) > 1 else 0.0,
        }


@dataclass
class Comparison:
    """The result of ``compare_interleaved`` / ``run_rounds``."""

    speedup: Interval
    reference: Side
    candidate: Side
    rounds: int
    iters: int  # samples per model per round
    warmup: int
    threads: int | None
    noise: NoiseReport | None = None
    reasons: list[str] = field(default_factory=list)  # why it is noisy (empty: it is not)
    placement: CpuPlacement | None = None

    @property
    def noisy(self) -> bool:
        return bool(self.reasons)

    @property
    def noise_reason(self) -> str:
        return "; ".join(self.reasons)

    def metrics(self) -> dict[str, float | None]:
        """Flat numbers for the runner and the store (the candidate's latencies)."""
        m: dict[str, float | None] = dict(self.candidate.stats())
        m["first_call_ms"] = self.candidate.first_call_ms
        m["speedup"] = self.speedup.value
        m["speedup_low"] = self.speedup.low
        m["speedup_high"] = self.speedup.high
        lat = median_interval(self.candidate.round_ms)
        m["latency_low_ms"], m["latency_high_ms"] = lat.low, lat.high
        m["baseline_latency_p50_ms"] = self.reference.stats()["latency_p50_ms"]
        m["timing_rounds"] = float(self.rounds)
        m["noisy"] = 1.0 if self.noisy else 0.0
        if self.noise is not None:
            m["other_cores_busy"] = self.noise.other_cores
        return m

    def timing_details(self) -> dict[str, Any]:
        """JSON facts for the step's details (what a reader needs to trust the number)."""
        return {
            "mode": "interleaved",
            "rounds": self.rounds,
            "iters_per_round": self.iters,
            "warmup": self.warmup,
            "threads": self.threads,
            "batch": {"reference": self.reference.batch, "candidate": self.candidate.batch},
            "confidence": self.speedup.confidence,
            "noisy": self.noisy,
            "noise_reason": self.noise_reason or None,
            "noise": self.noise.to_dict() if self.noise is not None else None,
            "cpus": list(self.placement.cpus) if self.placement is not None else [],
            "placement": self.placement.note if self.placement is not None else None,
        }

    def summary(self) -> str:
        s = self.speedup
        text = f"{s.value:.2f}x [{s.low:.2f}-{s.high:.2f}]"
        return text + (f" (noisy: {self.noise_reason})" if self.noisy else "")


def _batch_for(call_s: float) -> int:
    """Calls per sample for a model that takes ``call_s`` a call: 1 unless it is tiny."""
    if call_s >= TINY_CALL_S:
        return 1
    return int(min(MAX_BATCH, max(2, math.ceil(TARGET_SAMPLE_S / max(call_s, 1e-7) - 1e-6))))


def _sample_ms(call: Callable[[], Any], batch: int, sync: Callable[[], None]) -> float:
    clock = CLOCK
    t = clock()
    for _ in range(batch):
        call()
    sync()
    return (clock() - t) * 1000.0 / batch


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _first_and_warmup(
    call: Callable[[], Any],
    first: Callable[[], Any],
    warm: int,
    sync: Callable[[], None],
    check: Callable[[Any], None] | None,
) -> Side:
    """A side after its first call (timed alone, never counted) and ``warm`` warm-up calls,
    timed one by one: the fastest tells whether to batch (at least one is made for that, so
    a warm-up of 0 still calibrates)."""
    side = Side()
    t = CLOCK()
    out = first()
    sync()
    if check is not None:
        check(out)
    side.first_call_ms = (CLOCK() - t) * 1000.0
    fastest = math.inf
    for _ in range(max(warm, 1)):
        t = CLOCK()
        call()
        sync()
        fastest = min(fastest, CLOCK() - t)
    side.batch = _batch_for(fastest)
    return side


def _time_round(side: Side, call: Callable[[], Any], per_round: int, sync: Callable) -> float:
    """One round of ``per_round`` samples into ``side``; the seconds it timed."""
    samples = [_sample_ms(call, side.batch, sync) for _ in range(per_round)]
    side.samples_ms.extend(samples)
    side.round_ms.append(_median(samples))
    return sum(samples) * side.batch / 1000.0


def _more_rounds(settings: TimingSettings, rounds: int, timed_s: float) -> bool:
    return rounds < settings.base_rounds or (
        timed_s < settings.min_time_s and rounds < max(MAX_ROUNDS, settings.base_rounds)
    )


@contextlib.contextmanager
def _gc_paused():
    """No garbage collection while timing: a collection inside a sample would land in one
    side only."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_rounds(
    reference: Callable[[], Any],
    candidate: Callable[[], Any],
    settings: TimingSettings,
    *,
    sync: Callable[[], None] = lambda: None,
    monitor: NoiseMonitor | None = None,
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[float, str], None] | None = None,
    seed: int = 0,
    first: Mapping[str, Callable[[], Any]] | None = None,
    check_output: Callable[[Any, str], None] | None = None,
    reference_warm: bool = False,
) -> Comparison:
    """Time two zero-argument callables in alternating rounds (see the module docstring).

    The first call of each is timed alone (``first_call_ms``) and never counted; then
    ``settings.warmup`` untimed calls each; then rounds A B / B A / ... of
    ``settings.iters`` samples per side. A round's value is the median of its samples.
    ``first`` (by side name) replaces a side's first call (e.g. one that creates its session);
    ``check_output(output, side)`` sees the first call's output (to reject NaN).
    ``reference_warm``: the reference already ran in this process (the runner's baseline),
    so it gets one warm-up call instead of ``settings.warmup``."""
    from accel.errors import Cancelled

    calls = {"reference": reference, "candidate": candidate}
    sides = {}
    for name, call in calls.items():
        warm = (
            min(1, settings.warmup) if reference_warm and name == "reference" else settings.warmup
        )
        check = None if check_output is None else (lambda out, n=name: check_output(out, n))
        sides[name] = _first_and_warmup(call, (first or {}).get(name, call), warm, sync, check)

    if monitor is not None:
        monitor.start()
    timed_s = 0.0
    rounds = 0
    order = ("reference", "candidate")
    with _gc_paused():
        while _more_rounds(settings, rounds, timed_s):
            if cancel is not None and cancel():
                raise Cancelled("timing cancelled")
            for name in order if rounds % 2 == 0 else order[::-1]:
                timed_s += _time_round(sides[name], calls[name], settings.per_round, sync)
            rounds += 1
            if monitor is not None:
                monitor.tick()
            if progress is not None:
                progress(min(1.0, rounds / settings.base_rounds), f"timing round {rounds}")
    noise = monitor.stop() if monitor is not None else None
    ref, cand = sides["reference"], sides["candidate"]
    interval = ratio_interval(ref.round_ms, cand.round_ms, seed=seed)
    reasons: list[str] = []
    if noise is not None and noise.busy:
        reasons.append(noise.reason())
    if interval.half_width > NOISY_HALF_WIDTH:
        reasons.append(f"interval wider than +-{NOISY_HALF_WIDTH:.0%} ({interval.half_width:+.0%})")
    return Comparison(
        speedup=interval,
        reference=ref,
        candidate=cand,
        rounds=rounds,
        iters=settings.per_round,
        warmup=settings.warmup,
        threads=settings.threads,
        noise=noise,
        reasons=reasons,
    )


def _check_finite(outputs: Any, name: str) -> None:
    """A model whose outputs hold NaN has no meaningful latency to report."""
    import numpy as np
    import torch
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves(outputs):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            bad = not bool(torch.isfinite(leaf).all())
        elif isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f":
            bad = not bool(np.isfinite(leaf).all())
        else:
            continue
        if bad:
            raise MeasureError(
                f"the {name} model returned NaN or infinity; fix the model (or the step "
                "that produced it) before timing it"
            )


def with_threads(model: Any, threads: int) -> Any:
    """A LoadedModel whose runtime uses ``threads`` threads (an ONNX Runtime session's
    intra-op threads with idle threads sleeping rather than spinning, an OpenVINO compiled model's threads: a new session when it had
    another count; its kind's handler decides); anything else unchanged."""
    if not isinstance(getattr(model, "kind", None), str) or not hasattr(model, "session_options"):
        return model
    from accel.models.runtime import runtime_of

    return runtime_of(model).with_threads(model, threads)


@contextlib.contextmanager
def torch_threads(threads: int):
    """``torch.set_num_threads(threads)`` for the block, restored afterwards."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def compare_interleaved(
    reference: Any,
    candidate: Any,
    inputs: Any,
    settings: TimingSettings | Mapping[str, Any] | None = None,
    *,
    device: str = "cpu",
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[float, str], None] | None = None,
    seed: int = 0,
    reference_warm: bool = False,
) -> Comparison:
    """Time ``candidate`` against ``reference`` on the same ``inputs`` in alternating rounds.

    Both are anything ``accel.bench.benchmark`` takes (LoadedModel, torch module, callable,
    ORT session, .onnx path). Both run with ``settings.threads`` (default: the physical
    cores) for torch and ONNX Runtime. Raises MeasureError for a model that returns NaN.
    ``reference_warm``: see ``run_rounds``.

    With ``settings.threads`` unset, CPUs that other processes keep busy are left out while
    timing (``choose_cpus``); the result's ``placement`` says where it ran."""
    settings = TimingSettings.from_any(settings)
    device = str(device)
    placement = choose_cpus(settings.threads, device)
    threads = placement.threads
    settings = TimingSettings(
        settings.rounds, settings.iters, settings.warmup, threads, settings.min_time_s
    )
    with placement.pinned():
        cmp = _compare_pinned(
            with_threads(reference, threads),
            with_threads(candidate, threads),
            inputs,
            settings,
            device=device,
            cancel=cancel,
            progress=progress,
            seed=seed,
            reference_warm=reference_warm,
        )
    cmp.placement = placement
    if placement.note:
        log.info("%s", placement.note)
        if cmp.noisy:
            cmp.reasons.append(placement.note)
    return cmp


def _compare_pinned(
    reference: Any,
    candidate: Any,
    inputs: Any,
    settings: TimingSettings,
    *,
    device: str,
    cancel: Callable[[], bool] | None,
    progress: Callable[[float, str], None] | None,
    seed: int,
    reference_warm: bool,
) -> Comparison:
    import sys

    from accel.bench import _prepare

    threads = settings.resolved_threads
    torch = sys.modules.get("torch")
    cuda = device.startswith("cuda") and torch is not None

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    grad = torch.inference_mode() if torch is not None else contextlib.nullcontext()
    with torch_threads(threads), grad:
        prepared = {
            "reference": _prepare(reference, inputs, device, threads),
            "candidate": _prepare(candidate, inputs, device, threads),
        }
        return run_rounds(
            prepared["reference"].call,
            prepared["candidate"].call,
            settings,
            sync=sync,
            monitor=NoiseMonitor(device),
            cancel=cancel,
            progress=progress,
            seed=seed,
            first={name: p.first for name, p in prepared.items()},
            check_output=_check_finite,
            reference_warm=reference_warm,
        )


# --------------------------------------------------------------------------- memory

# The original and a step's model are timed side by side only when together they take at
# most this share of the free memory (RAM, or VRAM on CUDA).
MEMORY_SHARE = 0.5


def free_memory_bytes(device: str = "cpu") -> int | None:
    """Free memory for models on ``device``: CUDA: ``torch.cuda.mem_get_info``; otherwise
    the RAM available to new allocations (psutil). None where unknown."""
    try:
        if str(device).startswith("cuda"):
            import torch

            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no probe on this platform: assume they fit
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**27 else f"{n / 2**20:.0f} MiB"


def side_by_side_problem(
    reference_bytes: float | None, candidate_bytes: float | None, device: str = "cpu"
) -> str | None:
    """Why the original and a step's model should not be timed side by side (None: they
    fit): together they take more than ``MEMORY_SHARE`` of the free RAM (VRAM on CUDA)."""
    free = free_memory_bytes(device)
    if not free or not reference_bytes or not candidate_bytes:
        return None
    need = float(reference_bytes) + float(candidate_bytes)
    if need <= MEMORY_SHARE * free:
        return None
    where = "VRAM" if str(device).startswith("cuda") else "RAM"
    return (
        f"the original ({_gib(float(reference_bytes))}) and the step's model "
        f"({_gib(float(candidate_bytes))}) take more than half of the free {where} "
        f"({_gib(free)})"
    )


def time_alone(
    model: Any,
    inputs: Any,
    settings: TimingSettings | Mapping[str, Any] | None = None,
    *,
    device: str = "cpu",
    cancel: Callable[[], bool] | None = None,
    name: str = "model",
) -> Side:
    """Time one model on its own (the fallback when two do not fit in memory side by side):
    the same first call, warm-up, rounds and samples as ``run_rounds``, one side only."""
    import sys

    from accel.bench import _prepare
    from accel.errors import Cancelled

    settings = TimingSettings.from_any(settings)
    device = str(device)
    placement = choose_cpus(settings.threads, device)
    threads = placement.threads
    torch = sys.modules.get("torch")
    cuda = device.startswith("cuda") and torch is not None

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    grad = torch.inference_mode() if torch is not None else contextlib.nullcontext()
    with placement.pinned(), torch_threads(threads), grad:
        prepared = _prepare(with_threads(model, threads), inputs, device, threads)
        check = lambda out: _check_finite(out, name)  # noqa: E731
        side = _first_and_warmup(prepared.call, prepared.first, settings.warmup, sync, check)
        rounds, timed_s = 0, 0.0
        with _gc_paused():
            while _more_rounds(settings, rounds, 2 * timed_s):
                if cancel is not None and cancel():
                    raise Cancelled("timing cancelled")
                timed_s += _time_round(side, prepared.call, settings.per_round, sync)
                rounds += 1
    return side
