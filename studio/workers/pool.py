"""A pool of worker processes, without Qt.

Every job runs in a fresh ``python -m studio.workers.entry`` process (never a
fork of the studio, which must not initialize CUDA). Jobs wait in a priority
queue; each device is a lane with a number of slots (one per GPU, a
configurable number for the CPU) under a global concurrency limit.

The pool is the only writer to the store: one dispatcher thread applies the
workers' messages in order, so the steps a run finished are saved even if its
worker dies later. A worker that exits without its ``done`` message (segfault,
OOM kill, ``os._exit``) ends its run as ``crashed``; one that outlives its
timeout is cancelled, terminated, killed and ends as ``timed_out``; either way
the exit code or signal and the last stderr lines are recorded.

With ``warm=True`` each lane keeps one *warm* worker (``entry --serve``: torch and the
engine already imported) that serves the light jobs of ``WARM_KINDS`` one after another,
so opening a model or profiling it does not pay process start-up and imports each time.
Runs and search trials still get a fresh process each (no state carried between recipe
runs). A warm worker is replaced after it dies, after a cancelled or timed-out job, and
after a job that left it using more than ``recycle_rss_mb`` of memory.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import heapq
import itertools
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.workers.devices import GpuInfo, detect_gpus
from studio.workers.protocol import (
    Cancel,
    Done,
    EventMessage,
    Hello,
    JobSpec,
    LogMessage,
    Message,
    ProtocolError,
    decode,
)

if TYPE_CHECKING:
    from studio.workers.recorder import RunRecorder

log = logging.getLogger(__name__)

JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled", "crashed", "timed_out")
FINAL = frozenset(JOB_STATUSES[2:])
PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOG_TAIL_LINES = 60


_CRASH_HINTS = {
    "SIGSEGV": "a native crash (segmentation fault) in a library the job used",
    "SIGBUS": "a native crash (bus error) in a library the job used",
    "SIGABRT": "a library aborted the process",
    "SIGKILL": "killed from outside, most often by the system's out-of-memory killer; "
    "try a smaller batch or input shape",
}

PLUGINS_ENV = "ACCEL_STUDIO_PLUGINS"  # modules or .py files loaded by every worker

# Job kinds a warm worker may serve: they load a model and look at it, and restore any
# global torch setting they change. Recipe runs and search trials get a fresh process.
WARM_KINDS = frozenset({"inspect", "profile", "export_onnx", "graph_diff", "analyze"})
RECYCLE_RSS_MB = 3072.0  # a warm worker above this after a job is replaced


def worker_command(python: str, *, serve: bool = False) -> list[str]:
    """How to start a worker: ``python -m studio.workers.entry``, or in a frozen bundle
    (PyInstaller) the bundle's own executable with ``--studio-worker``."""
    if getattr(sys, "frozen", False):
        cmd = [sys.executable, "--studio-worker"]
    else:
        cmd = [python, "-m", "studio.workers.entry"]
    return [*cmd, "--serve"] if serve else cmd


def process_rss_mb(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MiB (None when it cannot be read)."""
    try:
        import psutil

        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except Exception:  # noqa: BLE001 - no psutil, or the process is gone
        pass
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def env_plugins() -> list[str]:
    return [p for p in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if p.strip()]


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended."""

    job_id: str
    kind: str
    status: str
    run_id: str | None = None
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    error_type: str = ""
    exit_code: int | None = None
    signal: str = ""
    log_tail: str = ""
    duration_s: float = 0.0
    pid: int | None = None  # the worker process that ran it (a warm one serves several)
    # Set when the store could not record this run: what failed, and the file that keeps
    # the run's record for `studio import-run` (a run that was not saved is no success).
    store_error: str = ""
    record_file: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "succeeded" and not self.store_error


@dataclass(frozen=True)
class JobUpdate:
    """What listeners get: ``what`` is queued | started | event | log | finished."""

    job_id: str
    kind: str
    what: str
    status: str
    run_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    outcome: JobOutcome | None = None


@dataclass
class _Lane:
    name: str  # "cpu", "cuda:0", ...
    env: dict[str, str]
    slots: int
    worker_device: str  # how the worker sees it
    busy: int = 0


class _Worker:
    """One worker process; a persistent (warm) one serves several jobs, one at a time."""

    def __init__(self, proc: subprocess.Popen[str], lane: str, persistent: bool) -> None:
        self.proc = proc
        self.lane = lane
        self.persistent = persistent
        self.job: _Job | None = None
        self.jobs_served = 0
        self.idle_tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.stderr_reader = threading.Thread(
            target=self._read_stderr, name=f"worker-{proc.pid}-stderr", daemon=True
        )
        self.stderr_reader.start()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            job = self.job
            (job.stderr if job is not None else self.idle_tail).append(line.rstrip("\n"))

    def retire(self, wait_s: float = 3.0) -> None:
        """Close its stdin (an idle worker exits), kill it if it does not within ``wait_s``."""
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin:
                self.proc.stdin.close()

        def reap() -> None:
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                    if hasattr(os, "killpg"):
                        os.killpg(self.proc.pid, getattr(signal, "SIGKILL", signal.SIGTERM))
                    else:
                        self.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(2.0)

        threading.Thread(target=reap, name=f"worker-{self.proc.pid}-reap", daemon=True).start()


@dataclass
class _Job:
    id: str
    kind: str
    params: dict[str, Any]
    plugins: list[str]
    device: str
    priority: int
    timeout_s: float | None
    run_id: str | None
    order: int
    new_run: dict[str, Any] | None = None  # create_run() arguments, applied when queued
    status: str = "queued"
    lane: _Lane | None = None
    proc: subprocess.Popen[str] | None = None
    pid: int | None = None
    submitted: float = field(default_factory=time.monotonic)
    started: float | None = None
    cancel_requested: bool = False
    cancel_at: float | None = None
    terminated_at: float | None = None
    killed: bool = False
    timed_out: bool = False
    out_of_memory: int = 0  # resident bytes when the memory cap stopped it
    memory_probe: _MemoryProbe | None = None
    done: Done | None = None
    stderr: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=LOG_TAIL_LINES)
    )
    outcome: JobOutcome | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    store_error: str = ""  # the first failure to record this job's run
    events: list[dict[str, Any]] = field(default_factory=list)  # kept for a failed store


UNRECORDED_FILE = "unrecorded_run.json"

MEMORY_ENV = "ACCEL_WORKER_MEMORY_MB"  # a worker's memory cap in MiB (0: none)
DEFAULT_MEMORY_FRACTION = 0.75  # default cap: this fraction of the machine's RAM
MEMORY_CHECK_S = 0.2


def default_memory_limit() -> int:
    """Bytes a worker may use: ``$ACCEL_WORKER_MEMORY_MB``, the settings file's
    ``worker_memory_mb``, else 75% of the machine's RAM. 0 means no cap."""
    import json

    value: Any = os.environ.get(MEMORY_ENV)
    if value is None:
        with contextlib.suppress(Exception):
            from studio.store.db import settings_path

            value = json.loads(settings_path().read_text()).get("worker_memory_mb")
    if value not in (None, ""):
        try:
            return max(0, int(float(value) * (1 << 20)))
        except (TypeError, ValueError):
            log.warning("ignoring %s=%r: not a number of MiB", MEMORY_ENV, value)
    try:
        import psutil

        return int(psutil.virtual_memory().total * DEFAULT_MEMORY_FRACTION)
    except Exception:  # noqa: BLE001 - no psutil: no cap
        return 0


class _MemoryProbe:
    """Resident bytes of a worker and its children (compile workers, ...), cheap enough for
    the watchdog: the process list is refreshed every 2 s (scanning /proc holds the GIL,
    which the GUI thread shares), the memory of the known processes read every sample."""

    REFRESH_S = 2.0

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.procs: list[Any] = []
        self.refreshed = -1e9

    def rss(self, now: float) -> int:
        import psutil

        if now - self.refreshed >= self.REFRESH_S or not self.procs:
            self.refreshed = now
            try:
                root = psutil.Process(self.pid)
                self.procs = [root, *root.children(recursive=True)]
            except (psutil.Error, OSError):
                self.procs = []
        total = 0
        for p in self.procs:
            with contextlib.suppress(psutil.Error, OSError):
                total += p.memory_info().rss
        return total


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def _save_unrecorded(job: _Job, status: str, final: dict[str, Any], result: dict) -> str:
    """Keep what the store could not record (the run, its events, how it ended) as JSON in
    the run folder (or the data folder), for ``studio import-run``. Returns the path."""
    import json

    run_dir = result.get("run_dir") or next(
        (e.get("run_dir") for e in job.events if e.get("event") == "run_started"), None
    )
    record = {
        "format": "accel-studio-unrecorded-run/1",
        "run": {**(job.new_run or {}), "run_id": job.run_id},
        "events": job.events,
        "status": status,
        "final": final,
        "store_error": job.store_error,
    }
    try:
        if run_dir and Path(run_dir).is_dir():
            path = Path(run_dir) / UNRECORDED_FILE
        else:
            from studio.store.db import data_dir

            path = data_dir() / "unrecorded" / f"{job.run_id}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1, default=str, ensure_ascii=True))
        return str(path)
    except OSError as exc:
        log.error("could not keep the unrecorded run %s either: %s", job.run_id, exc)
        return ""


class JobHandle:
    """What ``submit`` returns: wait for, cancel or look at one job."""

    def __init__(self, pool: WorkerPool, job: _Job) -> None:
        self._pool = pool
        self._job = job

    @property
    def job_id(self) -> str:
        return self._job.id

    @property
    def run_id(self) -> str | None:
        return self._job.run_id

    @property
    def status(self) -> str:
        return self._job.status

    @property
    def outcome(self) -> JobOutcome | None:
        return self._job.outcome

    def cancel(self, reason: str = "cancelled by the user") -> None:
        self._pool.cancel(self._job.id, reason)

    def wait(self, timeout: float | None = None) -> JobOutcome:
        """Block until the job ended; raises TimeoutError after ``timeout`` seconds."""
        if not self._job.finished.wait(timeout):
            raise TimeoutError(f"job {self._job.id} still {self._job.status}")
        assert self._job.outcome is not None
        return self._job.outcome


class WorkerPool:
    """Runs jobs in worker processes; records run jobs into ``store`` when given: any
    ``studio.workers.recorder.RunRecorder`` (the studio's Repository, or a MemoryRecorder).

    ``devices``: GPUs to use (default: detected without CUDA); ``cpu_workers``:
    concurrent CPU jobs; ``max_concurrency``: limit over all lanes.
    ``cancel_grace_s``: time a cancelled job gets to stop on its own before it is
    terminated; ``kill_grace_s``: time from terminate to kill.
    """

    def __init__(
        self,
        store: RunRecorder | None = None,
        *,
        devices: Iterable[GpuInfo | str] | None = None,
        cpu_workers: int = 1,
        max_concurrency: int | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        cancel_grace_s: float = 5.0,
        kill_grace_s: float = 3.0,
        default_timeout_s: float | None = None,
        warm: bool = False,
        recycle_rss_mb: float | None = None,
        memory_limit_bytes: int | None = None,
    ) -> None:
        self.store = store
        self.warm = warm
        self.recycle_rss_mb = float(
            recycle_rss_mb
            if recycle_rss_mb is not None
            else os.environ.get("ACCEL_STUDIO_WORKER_RECYCLE_MB", RECYCLE_RSS_MB)
        )
        self._idle: dict[str, _Worker] = {}  # lane name -> its warm worker, when idle
        # Each worker's memory cap (resident memory, its child processes included): a
        # runaway model ends as "out of memory" with the figure, and the next job runs.
        self.memory_limit_bytes = (
            default_memory_limit() if memory_limit_bytes is None else int(memory_limit_bytes)
        )
        self.python = python or sys.executable
        self.extra_env = dict(env or {})
        self.cancel_grace_s = cancel_grace_s
        self.kill_grace_s = kill_grace_s
        self.default_timeout_s = default_timeout_s
        self.cwd = os.getcwd()
        gpus = detect_gpus() if devices is None else list(devices)
        self.lanes: list[_Lane] = []
        for i, g in enumerate(gpus):
            vid = g.visible_id if isinstance(g, GpuInfo) else str(g)
            self.lanes.append(_Lane(f"cuda:{i}", {"CUDA_VISIBLE_DEVICES": vid}, 1, "cuda:0"))
        if cpu_workers > 0:
            # Hide GPUs from CPU jobs so they cannot grab GPU memory by accident.
            self.lanes.append(_Lane("cpu", {"CUDA_VISIBLE_DEVICES": ""}, cpu_workers, "cpu"))
        if not self.lanes:
            raise ValueError("the pool has no lanes: give cpu_workers >= 1 or a GPU")
        self.max_concurrency = max_concurrency or sum(lane.slots for lane in self.lanes)
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._queue: list[tuple[int, int, _Job]] = []
        self._jobs: dict[str, _Job] = {}
        self._running: set[str] = set()
        self._order = itertools.count()
        self._inbox: queue.Queue[tuple[str, _Job, Any]] = queue.Queue()
        self._listeners: list[Callable[[JobUpdate], None]] = []
        self._closed = False
        self._next_memory_check = 0.0
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="pool-dispatch", daemon=True
        )
        self._watchdog = threading.Thread(target=self._watch, name="pool-watchdog", daemon=True)
        self._dispatcher.start()
        self._watchdog.start()
        if warm:
            for lane in self.lanes:
                self._ensure_warm(lane)
        if store is not None:
            # Runs left "running" by a studio that was killed end as crashed; done on the
            # pool's thread, before any job, so creating a pool never waits on the database.
            self._inbox.put(("recover", None, None))  # type: ignore[arg-type]

    # --- public API ------------------------------------------------------------------------

    @property
    def has_gpu(self) -> bool:
        return any(lane.name.startswith("cuda") for lane in self.lanes)

    def subscribe(self, listener: Callable[[JobUpdate], None]) -> Callable[[], None]:
        """Call ``listener(update)`` for every job update (on the pool's dispatcher thread).
        Returns a function that unsubscribes."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe

    def submit(
        self,
        kind: str,
        params: Mapping[str, Any] | None = None,
        *,
        device: str | None = None,
        priority: int = 0,
        timeout_s: float | None = None,
        plugins: Iterable[str] = (),
        record: bool | None = None,
        run_id: str | None = None,
        parent_run_id: str | None = None,
        tags: Iterable[str] = (),
        notes: str = "",
        name: str = "",
        model_source: str | None = None,
        recipe: Mapping[str, Any] | None = None,
    ) -> JobHandle:
        """Queue a job. ``device``: None/"auto" (a GPU when there is one), "cpu", "cuda",
        "cuda:N". Higher ``priority`` starts first. With a store, run jobs (kind
        ``run_recipe``, or ``record=True``) get a run row (``handle.run_id``), written
        by the pool's thread before any of the job's events."""
        if self._closed:
            raise RuntimeError("the worker pool is shut down")
        params = dict(params or {})
        recipe_in = params.get("recipe")
        if device is None and isinstance(recipe_in, Mapping) and recipe_in.get("device"):
            device = str(recipe_in["device"])  # a recipe asking for cuda:1 gets that GPU's lane
        self._lane_for(device, check_only=True)
        job_id = uuid.uuid4().hex
        if record is None:
            record = kind == "run_recipe"
        new_run: dict[str, Any] | None = None
        if record and self.store is not None and run_id is None:
            recipe_content = recipe
            if recipe_content is None and isinstance(params.get("recipe"), Mapping):
                recipe_content = params["recipe"]
            # The row is written by the dispatcher (first thing for this job), so submit
            # never waits on the database: the GUI thread calls it.
            run_id = uuid.uuid4().hex
            new_run = dict(
                run_id=run_id,
                model_source=model_source or params.get("model"),
                recipe=recipe_content,
                kind=kind,
                device=device or "",
                parent_run_id=parent_run_id,
                tags=list(tags),
                notes=notes,
                name=name,
                job_params={"kind": kind, "params": params, "device": device},
            )
        job = _Job(
            id=job_id,
            kind=kind,
            params=params,
            plugins=[*env_plugins(), *(str(p) for p in plugins)],
            device=device or "auto",
            priority=priority,
            timeout_s=timeout_s if timeout_s is not None else self.default_timeout_s,
            run_id=run_id,
            order=next(self._order),
            new_run=new_run,
        )
        with self._lock:
            self._jobs[job_id] = job
            heapq.heappush(self._queue, (-priority, job.order, job))
        self._post("queued", job, None)
        self._schedule()
        return JobHandle(self, job)

    def cancel(self, job_id: str, reason: str = "cancelled by the user") -> None:
        """Cancel cooperatively; terminate after ``cancel_grace_s``, kill after that."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.status in FINAL:
                return
            if job.status == "queued":
                self._queue = [e for e in self._queue if e[2] is not job]
                heapq.heapify(self._queue)
                job.cancel_requested = True
                self._post("exit", job, None)
                return
            self._request_cancel(job, reason)

    def jobs(self) -> list[dict[str, Any]]:
        """A snapshot of queued and running jobs."""
        with self._lock:
            return [
                {
                    "job_id": j.id,
                    "kind": j.kind,
                    "status": j.status,
                    "run_id": j.run_id,
                    "device": j.lane.name if j.lane else j.device,
                    "priority": j.priority,
                    "pid": j.pid,
                }
                for j in self._jobs.values()
                if j.status not in FINAL
            ]

    def shutdown(self, *, cancel: bool = True, timeout: float | None = 30.0) -> None:
        """Stop accepting jobs; cancel (or let finish) the others and wait for them."""
        with self._lock:
            self._closed = True
            pending = [j for j in self._jobs.values() if j.status not in FINAL]
        if cancel:
            for j in pending:
                self.cancel(j.id, "the studio is shutting down")
        deadline = None if timeout is None else time.monotonic() + timeout
        for j in pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not j.finished.wait(left):
                self._kill(j)
                j.finished.wait(2.0)
        with self._lock:
            idle, self._idle = list(self._idle.values()), {}
        for worker in idle:
            worker.retire()
        self._inbox.put(("stop", None, None))  # type: ignore[arg-type]
        self._dispatcher.join(timeout=5)
        with self._wake:
            self._wake.notify_all()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- scheduling ------------------------------------------------------------------------

    def _lane_for(self, device: str | None, *, check_only: bool = False) -> _Lane | None:
        dev = (device or "auto").lower()
        gpu_lanes = [lane for lane in self.lanes if lane.name.startswith("cuda")]
        cpu_lanes = [lane for lane in self.lanes if lane.name == "cpu"]
        if dev == "auto":
            candidates = gpu_lanes or cpu_lanes
        elif dev == "cpu":
            candidates = cpu_lanes
        elif dev == "cuda":
            candidates = gpu_lanes
        elif dev.startswith("cuda:"):
            candidates = [lane for lane in gpu_lanes if lane.name == dev]
        else:
            raise ValueError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")
        if not candidates:
            have = ", ".join(lane.name for lane in self.lanes)
            hint = "; nvidia-smi -L finds no such GPU" if dev.startswith("cuda") else ""
            raise ValueError(f"no worker lane for device {device!r} (this pool has: {have}){hint}")
        if check_only:
            return None
        free = [lane for lane in candidates if lane.busy < lane.slots]
        return min(free, key=lambda lane: lane.busy) if free else None

    def _schedule(self) -> None:
        to_start: list[_Job] = []
        with self._lock:
            waiting: list[tuple[int, int, _Job]] = []
            while self._queue and len(self._running) < self.max_concurrency:
                entry = heapq.heappop(self._queue)
                job = entry[2]
                lane = self._lane_for(job.device)
                if lane is None:
                    waiting.append(entry)
                    continue
                lane.busy += 1
                job.lane = lane
                job.status = "running"
                job.started = time.monotonic()
                self._running.add(job.id)
                to_start.append(job)
            for entry in waiting:
                heapq.heappush(self._queue, entry)
        for job in to_start:
            threading.Thread(
                target=self._supervise, args=(job,), name=f"job-{job.id[:8]}", daemon=True
            ).start()

    # --- one worker process ----------------------------------------------------------------

    def _worker_env(self, lane: _Lane) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env.update(lane.env)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONFAULTHANDLER"] = "1"
        paths = [str(PROJECT_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env

    def _worker_params(self, job: _Job) -> dict[str, Any]:
        params = dict(job.params)
        dev = str(params.get("device") or "")
        # The worker sees only its GPU, as cuda:0.
        lane = job.lane
        if lane is not None and lane.name.startswith("cuda"):
            if dev.startswith("cuda") or job.device.startswith("cuda"):
                params["device"] = lane.worker_device
        return params

    def _spawn(self, lane: _Lane, *, persistent: bool) -> _Worker:
        proc = subprocess.Popen(
            worker_command(self.python, serve=persistent),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            env=self._worker_env(lane),
            # The caller's folder: relative model, recipe and output paths mean the same
            # in the worker (PYTHONPATH above makes studio/accel importable from anywhere).
            cwd=self.cwd,
            # Own session: Ctrl-C in a terminal reaches the parent only (which cancels
            # cooperatively), and the whole process group can be killed at once.
            start_new_session=True,
        )
        return _Worker(proc, lane.name, persistent)

    def _ensure_warm(self, lane: _Lane) -> None:
        """Start the lane's warm worker unless it has a live idle one (or the pool closed)."""
        with self._lock:
            if self._closed or not self.warm:
                return
            current = self._idle.get(lane.name)
            if current is not None and current.alive:
                return
            try:
                self._idle[lane.name] = self._spawn(lane, persistent=True)
            except OSError as exc:
                log.warning("could not start a warm worker for %s: %s", lane.name, exc)
                self._idle.pop(lane.name, None)

    def _checkout(self, job: _Job) -> _Worker | None:
        """The lane's idle warm worker for ``job`` when it may take it, else None."""
        if not self.warm or job.kind not in WARM_KINDS or job.lane is None:
            return None
        with self._lock:
            worker = self._idle.pop(job.lane.name, None)
        if worker is not None and not worker.alive:
            worker.retire(0)
            return None
        return worker

    def _checkin(self, worker: _Worker, job: _Job) -> bool:
        """After ``job`` ended with its ``done``: keep ``worker`` as the lane's warm worker
        (True) or retire it."""
        keep = (
            worker.persistent
            and worker.alive
            and not job.cancel_requested
            and not job.timed_out
            and not job.killed
        )
        if keep:
            rss = process_rss_mb(worker.proc.pid)
            if rss is not None and rss > self.recycle_rss_mb:
                log.info(
                    "warm worker %s uses %.0f MiB after %s: replacing it",
                    worker.proc.pid,
                    rss,
                    job.kind,
                )
                keep = False
        worker.job = None
        if keep:
            with self._lock:
                if not self._closed and worker.lane not in self._idle:
                    self._idle[worker.lane] = worker
                    return True
        worker.retire()
        return False

    def _supervise(self, job: _Job) -> None:
        assert job.lane is not None
        self._post("started", job, None)
        worker = self._checkout(job)
        reused = worker is not None
        if worker is None:
            try:
                persistent = self.warm and job.kind in WARM_KINDS
                worker = self._spawn(job.lane, persistent=persistent)
            except OSError as exc:
                job.stderr.append(f"could not start the worker: {exc}")
                self._post("exit", job, None)
                return
        got_done, heard = self._run_on(worker, job)
        if reused and not heard and not job.cancel_requested:
            # The warm worker died while idle (killed, out of memory: it can still look alive
            # while the kernel tears it down) before it read this job: run it on a new one.
            worker.proc.wait()
            worker.retire(0)
            job.stderr.clear()
            try:
                worker = self._spawn(job.lane, persistent=True)
            except OSError as exc:
                job.stderr.append(f"could not start the worker: {exc}")
                self._post("exit", job, None)
                return
            got_done, heard = self._run_on(worker, job)
        proc = worker.proc
        if got_done and self._checkin(worker, job):
            code: int | None = 0  # the job ended cleanly; its worker stays for the next
        else:
            if got_done:
                try:
                    code = proc.wait(self.kill_grace_s + 3.0)
                except subprocess.TimeoutExpired:
                    code = None
            else:
                code = proc.wait()
                worker.stderr_reader.join(timeout=2.0)
                with contextlib.suppress(OSError):
                    if proc.stdin:
                        proc.stdin.close()
            if worker.persistent:
                self._ensure_warm(job.lane)  # a replacement warms up for the next job
        self._post("exit", job, code)

    def _run_on(self, worker: _Worker, job: _Job) -> tuple[bool, bool]:
        """Send ``job`` to ``worker`` and relay its messages until its ``done`` (a persistent
        worker) or its exit. Returns (got done, heard anything from the worker)."""
        assert job.lane is not None
        proc = worker.proc
        worker.job = job
        worker.jobs_served += 1
        with self._lock:
            job.proc = proc
            job.pid = proc.pid
            cancel_now = job.cancel_requested
        spec = JobSpec(
            job_id=job.id,
            kind=job.kind,
            params=self._worker_params(job),
            plugins=job.plugins,
            device=job.lane.worker_device,
        )
        self._send(job, spec)
        if cancel_now:
            self._send(job, Cancel(job_id=job.id, seq=1))
        assert proc.stdout is not None
        got_done = heard = False
        while True:
            line = proc.stdout.readline()
            if not line:
                break  # EOF: the worker exited
            if not line.strip():
                continue
            try:
                msg = decode(line)
            except ProtocolError as exc:
                job.stderr.append(f"[protocol] {exc}")
                continue
            if worker.persistent and msg.job_id != job.id:
                continue  # a late line of the job this worker ran before
            heard = True
            self._post("msg", job, msg)
            if worker.persistent and isinstance(msg, Done):
                got_done = True
                break
        return got_done, heard

    def _send(self, job: _Job, msg: Message) -> None:
        proc = job.proc
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(msg.to_line())
            proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the worker is gone; its exit is handled by the supervisor

    def _request_cancel(self, job: _Job, reason: str) -> None:
        if job.cancel_requested:
            return
        job.cancel_requested = True
        job.cancel_at = time.monotonic()
        self._send(job, Cancel(job_id=job.id, seq=1, reason=reason))
        with self._wake:
            self._wake.notify_all()

    def _signal(self, job: _Job, sig: int) -> None:
        proc = job.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            if hasattr(os, "killpg"):
                os.killpg(proc.pid, sig)
            elif sig == getattr(signal, "SIGKILL", None):
                proc.kill()
            else:
                proc.terminate()
        except (ProcessLookupError, PermissionError):
            pass

    def _kill(self, job: _Job) -> None:
        job.killed = True
        self._signal(job, getattr(signal, "SIGKILL", signal.SIGTERM))

    def _watch(self) -> None:
        """Timeouts and the cancel -> terminate -> kill escalation."""
        while True:
            with self._wake:
                if self._closed and not self._running:
                    return
                self._wake.wait(0.05)
                running = [self._jobs[i] for i in self._running]
            now = time.monotonic()
            check_memory = self.memory_limit_bytes > 0 and now >= self._next_memory_check
            if check_memory:
                self._next_memory_check = now + MEMORY_CHECK_S
            for job in running:
                if job.proc is None or job.proc.poll() is not None:
                    continue
                if check_memory and not job.out_of_memory:
                    if job.memory_probe is None or job.memory_probe.pid != job.proc.pid:
                        job.memory_probe = _MemoryProbe(job.proc.pid)
                    used = job.memory_probe.rss(now)
                    if used > self.memory_limit_bytes:
                        job.out_of_memory = used
                        log.warning(
                            "job %s used %s, over the worker memory limit of %s: stopped",
                            job.id,
                            _gib(used),
                            _gib(self.memory_limit_bytes),
                        )
                        self._kill(job)
                        continue
                if (
                    job.timeout_s is not None
                    and job.started is not None
                    and not job.timed_out
                    and now - job.started > job.timeout_s
                ):
                    job.timed_out = True
                    with self._lock:
                        self._request_cancel(job, f"timed out after {job.timeout_s:g} s")
                if job.cancel_at is not None:
                    if job.terminated_at is None and now - job.cancel_at > self.cancel_grace_s:
                        job.terminated_at = now
                        self._signal(job, signal.SIGTERM)
                    elif (
                        job.terminated_at is not None
                        and not job.killed
                        and now - job.terminated_at > self.kill_grace_s
                    ):
                        self._kill(job)

    # --- the dispatcher: the only place that writes to the store ---------------------------

    def _post(self, what: str, job: _Job, payload: Any) -> None:
        self._inbox.put((what, job, payload))

    def _dispatch(self) -> None:
        while True:
            what, job, payload = self._inbox.get()
            if what == "stop":
                return
            if what == "recover":
                if self.store is not None:
                    self._store_call(self.store.recover_interrupted)
                continue
            try:
                self._handle(what, job, payload)
            except Exception:
                log.exception("worker pool: handling %s of job %s failed", what, job.id)
                if what == "exit" and not job.finished.is_set():
                    self._release(job)

    def _store_call(
        self, fn: Callable[..., Any], *args: Any, job: _Job | None = None, **kwargs: Any
    ) -> bool:
        try:
            fn(*args, **kwargs)
            return True
        except Exception as exc:
            # A store problem must not stop the pool; the job result is still delivered,
            # marked as not recorded (see _finish).
            log.warning("could not record to the store: %s: %s", type(exc).__name__, exc)
            if job is not None and not job.store_error:
                job.store_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            return False

    def _handle(self, what: str, job: _Job, payload: Any) -> None:
        store = self.store if job.run_id else None
        if what == "queued":
            if store is not None and job.new_run is not None:
                self._store_call(store.create_run, **job.new_run, job=job)
            self._notify(JobUpdate(job.id, job.kind, "queued", job.status, job.run_id))
        elif what == "started":
            if store is not None:
                self._store_call(store.set_status, job.run_id, "running", job=job)
            data = {"device": job.lane.name if job.lane else ""}
            self._notify(JobUpdate(job.id, job.kind, "started", "running", job.run_id, data))
        elif what == "msg":
            msg: Message = payload
            if isinstance(msg, Hello):
                job.pid = msg.pid
            elif isinstance(msg, EventMessage):
                if store is not None:
                    job.events.append(msg.event)
                    self._store_call(store.record_event, job.run_id, msg.event, job=job)
                self._notify(
                    JobUpdate(job.id, job.kind, "event", job.status, job.run_id, msg.event)
                )
            elif isinstance(msg, LogMessage):
                job.stderr.append(f"{msg.level.upper()} {msg.logger}: {msg.message}")
                data = {"level": msg.level, "logger": msg.logger, "message": msg.message}
                self._notify(JobUpdate(job.id, job.kind, "log", job.status, job.run_id, data))
            elif isinstance(msg, Done):
                job.done = msg
        elif what == "exit":
            self._finish(job, payload)

    def _finish(self, job: _Job, code: int | None) -> None:
        done = job.done
        sig = ""
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                sig = signal.Signals(-code).name
        if done is not None:
            status = done.status
            error, error_type = done.error, done.error_type
            if job.timed_out and status == "cancelled":
                status, error_type = "timed_out", "Timeout"
                error = f"the job ran past its timeout of {job.timeout_s:g} s and stopped"
        elif job.out_of_memory:
            status, error_type = "crashed", "OutOfMemory"
            error = (
                f"out of memory: the worker used {_gib(job.out_of_memory)}, over its limit of "
                f"{_gib(self.memory_limit_bytes)} (setting {MEMORY_ENV}, default "
                f"{int(DEFAULT_MEMORY_FRACTION * 100)}% of RAM), and was stopped; try a smaller "
                "batch or input shape"
            )
        elif job.timed_out:
            status, error_type = "timed_out", "Timeout"
            error = f"the job ran past its timeout of {job.timeout_s:g} s and was stopped"
        elif job.cancel_requested:
            status, error, error_type = "cancelled", "cancelled by the user", "Cancelled"
        else:
            status, error_type = "crashed", "WorkerCrashed"
            how = f"signal {sig}" if sig else f"exit code {code}"
            if code is None:
                how = "a worker that could not start"
            error = f"the worker process died ({how}) before finishing the job"
            hint = _CRASH_HINTS.get(sig)
            if hint:
                error += f": {hint}"
        if status not in FINAL:
            status = "failed"
        tail = "\n".join(job.stderr)
        if done is not None and done.traceback and done.traceback not in tail:
            tail = (tail + "\n" + done.traceback).strip()
        outcome = JobOutcome(
            job_id=job.id,
            kind=job.kind,
            status=status,
            run_id=job.run_id,
            result=dict(done.result) if done is not None else {},
            error=error,
            error_type=error_type,
            exit_code=code,
            signal=sig,
            log_tail=tail,
            duration_s=time.monotonic() - (job.started or job.submitted),
            pid=job.pid,
        )
        if job.run_id and self.store is not None:
            keep_tail = status != "succeeded"
            final = dict(
                error=error or None,
                error_type=error_type or None,
                exit_code=code,
                signal=sig or None,
                log_tail=tail if keep_tail else None,
            )
            self._store_call(self.store.set_status, job.run_id, status, job=job, **final)
            if job.store_error:
                outcome = dataclasses.replace(
                    outcome,
                    store_error=job.store_error,
                    record_file=_save_unrecorded(job, status, final, outcome.result),
                )
        job.outcome = outcome
        job.status = status
        self._release(job)
        self._notify(
            JobUpdate(job.id, job.kind, "finished", status, job.run_id, outcome.result, outcome)
        )

    def _release(self, job: _Job) -> None:
        with self._lock:
            if job.id in self._running:
                self._running.discard(job.id)
                if job.lane is not None:
                    job.lane.busy -= 1
            if job.status not in FINAL:
                job.status = "failed"
            self._jobs.pop(job.id, None)
        job.finished.set()
        self._schedule()
        with self._wake:
            self._wake.notify_all()

    def _notify(self, update: JobUpdate) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn(update)
            except Exception:
                log.exception("worker pool listener failed")
