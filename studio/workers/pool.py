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

Where the code is: this module holds ``WorkerPool``'s public API (submit, cancel, jobs,
subscribe, shutdown) and its shared state; its parts are mixins in their own modules:
``scheduling`` (queue -> lanes, releasing a slot), ``worker_process`` (spawning, relaying a
worker's messages, warm-worker reuse), ``watchdog`` (timeouts, cancel -> terminate -> kill,
the memory cap), ``dispatch`` (the dispatcher thread: recording through the RunRecorder,
how a job ended, listeners) and ``pool_jobs`` (the job, outcome, update and handle records).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from studio.workers.devices import GpuInfo, detect_gpus
from studio.workers.dispatch import CRASH_HINTS, UNRECORDED_FILE, Dispatch, save_unrecorded
from studio.workers.pool_jobs import (
    FINAL,
    JOB_STATUSES,
    LOG_TAIL_LINES,
    PLUGINS_ENV,
    Job,
    JobHandle,
    JobOutcome,
    JobUpdate,
    Lane,
    env_plugins,
)
from studio.workers.processes import process_rss_mb
from studio.workers.scheduling import Scheduling
from studio.workers.watchdog import (
    DEFAULT_MEMORY_FRACTION,
    MEMORY_CHECK_S,
    MEMORY_ENV,
    MemoryProbe,
    Watchdog,
    default_memory_limit,
    gib,
)
from studio.workers.worker_process import (
    PROJECT_ROOT,
    RECYCLE_RSS_MB,
    Supervision,
    WorkerProcess,
    worker_command,
)

if TYPE_CHECKING:
    from studio.workers.recorder import RunRecorder

__all__ = [  # the pool's names, importable from here as before the split
    "CRASH_HINTS",
    "DEFAULT_MEMORY_FRACTION",
    "FINAL",
    "JOB_STATUSES",
    "LOG_TAIL_LINES",
    "MEMORY_CHECK_S",
    "MEMORY_ENV",
    "PLUGINS_ENV",
    "PROJECT_ROOT",
    "RECYCLE_RSS_MB",
    "UNRECORDED_FILE",
    "WARM_KINDS",
    "Job",
    "JobHandle",
    "JobOutcome",
    "JobUpdate",
    "Lane",
    "MemoryProbe",
    "WorkerPool",
    "WorkerProcess",
    "default_memory_limit",
    "env_plugins",
    "gib",
    "process_rss_mb",
    "save_unrecorded",
    "worker_command",
]


# Job kinds a warm worker may serve: they load a model and look at it, and restore any
# global torch setting they change. Recipe runs and search trials get a fresh process.
WARM_KINDS = frozenset({"inspect", "profile", "export_onnx", "graph_diff", "analyze"})


class WorkerPool(Scheduling, Supervision, Watchdog, Dispatch):
    """Runs jobs in worker processes; records run jobs into ``store`` when given: any
    ``studio.workers.recorder.RunRecorder`` (the studio's Repository, or a MemoryRecorder).

    This class holds the public API and the shared state; its parts are mixins in their
    own modules: ``scheduling`` (queue -> lanes), ``worker_process`` (start, relay, warm
    worker reuse), ``watchdog`` (timeouts, cancel escalation, memory cap) and ``dispatch``
    (the dispatcher thread: recording, outcomes, listeners).

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
        cancel_grace_s: float = 2.0,
        kill_grace_s: float = 1.5,
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
        self._idle: dict[str, WorkerProcess] = {}  # lane name -> its warm worker, when idle
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
        self.lanes: list[Lane] = []
        for i, g in enumerate(gpus):
            vid = g.visible_id if isinstance(g, GpuInfo) else str(g)
            self.lanes.append(Lane(f"cuda:{i}", {"CUDA_VISIBLE_DEVICES": vid}, 1, "cuda:0"))
        if cpu_workers > 0:
            # Hide GPUs from CPU jobs so they cannot grab GPU memory by accident.
            self.lanes.append(Lane("cpu", {"CUDA_VISIBLE_DEVICES": ""}, cpu_workers, "cpu"))
        if not self.lanes:
            raise ValueError("the pool has no lanes: give cpu_workers >= 1 or a GPU")
        self.max_concurrency = max_concurrency or sum(lane.slots for lane in self.lanes)
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._queue: list[tuple[int, int, Job]] = []
        self._jobs: dict[str, Job] = {}
        self._running: set[str] = set()
        self._order = itertools.count()
        self._inbox: queue.Queue[tuple[str, Job, Any]] = queue.Queue()
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
        job = Job(
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

    def _warm_kind(self, kind: str) -> bool:
        """May the lane's warm worker serve a job of ``kind``? (``WARM_KINDS``, read here at
        call time so a test can extend it.)"""
        return self.warm and kind in WARM_KINDS

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
