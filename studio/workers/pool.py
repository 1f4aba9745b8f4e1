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
subscribe, shutdown); it composes four collaborators that share a ``PoolState``:
``Scheduler`` (queue -> lanes, releasing a slot), ``Supervisor`` (a job's worker process:
spawning, relaying its messages, warm-worker reuse), ``Watchdog`` (timeouts, cancel ->
terminate -> kill, the memory cap) and ``Dispatcher`` (the thread that records through the
RunRecorder, decides how a job ended and tells the listeners); ``pool_jobs`` holds the
records, ``processes`` the operating system's side of a worker.
"""

from __future__ import annotations

import heapq
import itertools
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import accel.jobs  # noqa: F401 - declares the engine's jobs
from accel.job_registry import declared, find_declaration
from studio.workers.devices import GpuInfo, detect_gpus
from studio.workers.dispatch import Dispatcher
from studio.workers.pool_jobs import (
    FINAL,
    Job,
    JobHandle,
    JobOutcome,
    JobUpdate,
    Lane,
    PoolSettings,
    PoolState,
    env_plugins,
)
from studio.workers.scheduling import Scheduler
from studio.workers.watchdog import Watchdog, default_memory_limit
from studio.workers.worker_process import RECYCLE_RSS_MB, Supervisor

if TYPE_CHECKING:
    from studio.workers.recorder import RunRecorder

__all__ = ["WARM_KINDS", "JobHandle", "JobOutcome", "JobUpdate", "WorkerPool"]


# Job kinds a warm worker may serve (declared ``warm``: they load a model and look at it,
# and restore any global torch setting they change). Recipe runs and search trials get a
# fresh process. Tests add their plugin kinds here.
WARM_KINDS = frozenset(kind for kind, decl in declared().items() if decl.warm)


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
        cancel_grace_s: float = 2.0,
        kill_grace_s: float = 1.5,
        default_timeout_s: float | None = None,
        warm: bool = False,
        recycle_rss_mb: float | None = None,
        memory_limit_bytes: int | None = None,
    ) -> None:
        self.store = store
        self.settings = PoolSettings(
            python=python or sys.executable,
            env=dict(env or {}),
            cwd=os.getcwd(),
            cancel_grace_s=cancel_grace_s,
            kill_grace_s=kill_grace_s,
            default_timeout_s=default_timeout_s,
            warm=warm,
            recycle_rss_mb=float(
                recycle_rss_mb
                if recycle_rss_mb is not None
                else os.environ.get("ACCEL_STUDIO_WORKER_RECYCLE_MB", RECYCLE_RSS_MB)
            ),
            # Each worker's memory cap (resident memory, its child processes included): a
            # runaway model ends as "out of memory" with the figure, and the next job runs.
            memory_limit_bytes=(
                default_memory_limit() if memory_limit_bytes is None else int(memory_limit_bytes)
            ),
        )
        lanes = _lanes(devices, cpu_workers)
        self.state = PoolState(lanes, max_concurrency or sum(lane.slots for lane in lanes))
        self._order = itertools.count()
        self.dispatcher = Dispatcher(self.state, self.settings, store, self._release)
        self.supervisor = Supervisor(
            self.state, self.settings, self.dispatcher.post, self._warm_kind
        )
        self.scheduler = Scheduler(self.state, self.supervisor.supervise)
        self.watchdog = Watchdog(self.state, self.settings, self.supervisor.send)
        self.dispatcher.thread.start()
        self.watchdog.thread.start()
        if warm:
            for lane in self.lanes:
                self.supervisor.ensure_warm(lane)
        if store is not None:
            # Runs left "running" by a studio that was killed end as crashed; done on the
            # pool's thread, before any job, so creating a pool never waits on the database.
            self.dispatcher.post("recover", None)

    # --- what callers read -----------------------------------------------------------------

    @property
    def lanes(self) -> list[Lane]:
        return self.state.lanes

    @property
    def has_gpu(self) -> bool:
        return any(lane.name.startswith("cuda") for lane in self.lanes)

    @property
    def cancel_grace_s(self) -> float:
        return self.settings.cancel_grace_s

    @property
    def kill_grace_s(self) -> float:
        return self.settings.kill_grace_s

    @property
    def memory_limit_bytes(self) -> int:
        return self.settings.memory_limit_bytes

    # --- public API ------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[JobUpdate], None]) -> Callable[[], None]:
        """Call ``listener(update)`` for every job update (on the pool's dispatcher thread).
        Returns a function that unsubscribes."""
        return self.dispatcher.subscribe(listener)

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
        "cuda:N". Higher ``priority`` starts first. With a store, run jobs (declared
        ``records_run``, or ``record=True``) get a run row (``handle.run_id``), written
        by the pool's thread before any of the job's events."""
        if self.state.closed:
            raise RuntimeError("the worker pool is shut down")
        params = dict(params or {})
        recipe_in = params.get("recipe")
        if device is None and isinstance(recipe_in, Mapping) and recipe_in.get("device"):
            device = str(recipe_in["device"])  # a recipe asking for cuda:1 gets that GPU's lane
        self.scheduler.lane_for(device, check_only=True)
        if record is None:
            decl = find_declaration(kind)
            record = decl is not None and decl.records_run
        new_run: dict[str, Any] | None = None
        if record and self.store is not None and run_id is None:
            # The row is written by the dispatcher (first thing for this job), so submit
            # never waits on the database: the GUI thread calls it.
            run_id = uuid.uuid4().hex
            new_run = dict(
                run_id=run_id,
                model_source=model_source or params.get("model"),
                recipe=recipe if recipe is not None else _recipe_of(params),
                kind=kind,
                device=device or "",
                parent_run_id=parent_run_id,
                tags=list(tags),
                notes=notes,
                name=name,
                job_params={"kind": kind, "params": params, "device": device},
            )
        return self._queue(kind, params, plugins, device, priority, timeout_s, run_id, new_run)

    def _queue(
        self,
        kind: str,
        params: dict[str, Any],
        plugins: Iterable[str],
        device: str | None,
        priority: int,
        timeout_s: float | None,
        run_id: str | None,
        new_run: dict[str, Any] | None,
    ) -> JobHandle:
        """The job in the queue, the dispatcher told, the scheduler asked to start it."""
        job = Job(
            id=uuid.uuid4().hex,
            kind=kind,
            params=params,
            plugins=[*env_plugins(), *(str(p) for p in plugins)],
            device=device or "auto",
            priority=priority,
            timeout_s=timeout_s if timeout_s is not None else self.settings.default_timeout_s,
            run_id=run_id,
            order=next(self._order),
            new_run=new_run,
        )
        with self.state.lock:
            self.state.jobs[job.id] = job
            heapq.heappush(self.state.queue, (-priority, job.order, job))
        self.dispatcher.post("queued", job)
        self.scheduler.schedule()
        return JobHandle(self.cancel, job)

    def cancel(self, job_id: str, reason: str = "cancelled by the user") -> None:
        """Cancel cooperatively; terminate after ``cancel_grace_s``, kill after that."""
        st = self.state
        with st.lock:
            job = st.jobs.get(job_id)
            if job is None or job.status in FINAL:
                return
            if job.status == "queued":
                st.queue = [e for e in st.queue if e[2] is not job]
                heapq.heapify(st.queue)
                job.cancel_requested = True
                self.dispatcher.post("exit", job, None)
                return
            self.watchdog.request_cancel(job, reason)

    def jobs(self) -> list[dict[str, Any]]:
        """A snapshot of queued and running jobs."""
        with self.state.lock:
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
                for j in self.state.jobs.values()
                if j.status not in FINAL
            ]

    def warm_workers(self) -> list[Any]:
        """The lanes' idle warm workers (``WorkerProcess``), now."""
        with self.state.lock:
            return list(self.supervisor.idle.values())

    def shutdown(self, *, cancel: bool = True, timeout: float | None = 30.0) -> None:
        """Stop accepting jobs; cancel (or let finish) the others and wait for them."""
        with self.state.lock:
            self.state.closed = True
            pending = [j for j in self.state.jobs.values() if j.status not in FINAL]
        if cancel:
            for j in pending:
                self.cancel(j.id, "the studio is shutting down")
        deadline = None if timeout is None else time.monotonic() + timeout
        for j in pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not j.finished.wait(left):
                self.watchdog.kill(j)
                j.finished.wait(2.0)
        self.supervisor.retire_idle()
        self.dispatcher.stop()
        self.state.notify()

    def _release(self, job: Job) -> None:
        self.scheduler.release(job)

    def _warm_kind(self, kind: str) -> bool:
        """May the lane's warm worker serve a job of ``kind``? (``WARM_KINDS``, read here at
        call time so a test can extend it.)"""
        return self.settings.warm and kind in WARM_KINDS

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _lanes(devices: Iterable[GpuInfo | str] | None, cpu_workers: int) -> list[Lane]:
    gpus = detect_gpus() if devices is None else list(devices)
    lanes: list[Lane] = []
    for i, g in enumerate(gpus):
        vid = g.visible_id if isinstance(g, GpuInfo) else str(g)
        lanes.append(Lane(f"cuda:{i}", {"CUDA_VISIBLE_DEVICES": vid}, 1, "cuda:0"))
    if cpu_workers > 0:
        # Hide GPUs from CPU jobs so they cannot grab GPU memory by accident.
        lanes.append(Lane("cpu", {"CUDA_VISIBLE_DEVICES": ""}, cpu_workers, "cpu"))
    if not lanes:
        raise ValueError("the pool has no lanes: give cpu_workers >= 1 or a GPU")
    return lanes


def _recipe_of(params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    recipe = params.get("recipe")
    return recipe if isinstance(recipe, Mapping) else None
