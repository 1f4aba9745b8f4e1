"""The pool's records: what a submitted job carries while it waits and runs, how it ended
(``JobOutcome``), what listeners get (``JobUpdate``), a device lane, the handle ``submit``
returns, and what the pool's collaborators share (``PoolSettings``, ``PoolState``)."""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from studio.workers.processes import MemoryProbe
from studio.workers.protocol import Done

if TYPE_CHECKING:
    from collections.abc import Callable


JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled", "crashed", "timed_out")
FINAL = frozenset(JOB_STATUSES[2:])
LOG_TAIL_LINES = 60

PLUGINS_ENV = "ACCEL_STUDIO_PLUGINS"  # modules or .py files loaded by every worker


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
class Lane:
    name: str  # "cpu", "cuda:0", ...
    env: dict[str, str]
    slots: int
    worker_device: str  # how the worker sees it
    busy: int = 0


@dataclass
class Job:
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
    lane: Lane | None = None
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
    memory_probe: MemoryProbe | None = None
    done: Done | None = None
    stderr: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=LOG_TAIL_LINES)
    )
    outcome: JobOutcome | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    store_error: str = ""  # the first failure to record this job's run
    events: list[dict[str, Any]] = field(default_factory=list)  # kept for a failed store


@dataclass(frozen=True)
class PoolSettings:
    """How the pool starts, watches and stops workers (fixed when the pool is made)."""

    python: str  # the interpreter that runs ``python -m studio.workers.entry``
    env: dict[str, str]  # added to every worker's environment
    cwd: str  # the caller's folder: relative paths mean the same in the worker
    cancel_grace_s: float  # a cancelled job's time to stop on its own before SIGTERM
    kill_grace_s: float  # from SIGTERM to SIGKILL
    default_timeout_s: float | None
    warm: bool  # keep a warm worker per lane for light jobs
    recycle_rss_mb: float  # a warm worker above this after a job is replaced
    memory_limit_bytes: int  # a worker's memory cap (0: none)


class PoolState:
    """What the pool's collaborators (scheduler, supervisor, watchdog, dispatcher) share;
    every field is read and changed under ``lock``."""

    def __init__(self, lanes: list[Lane], max_concurrency: int) -> None:
        self.lock = threading.RLock()
        self.wake = threading.Condition(self.lock)
        self.lanes = lanes
        self.max_concurrency = max_concurrency
        self.queue: list[tuple[int, int, Job]] = []  # (-priority, order, job), a heap
        self.jobs: dict[str, Job] = {}  # queued and running
        self.running: set[str] = set()
        self.closed = False

    def notify(self) -> None:
        with self.wake:
            self.wake.notify_all()


class JobHandle:
    """What ``submit`` returns: wait for, cancel or look at one job."""

    def __init__(self, cancel: Callable[[str, str], None], job: Job) -> None:
        self._cancel = cancel
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
        self._cancel(self._job.id, reason)

    def wait(self, timeout: float | None = None) -> JobOutcome:
        """Block until the job ended; raises TimeoutError after ``timeout`` seconds."""
        if not self._job.finished.wait(timeout):
            raise TimeoutError(f"job {self._job.id} still {self._job.status}")
        assert self._job.outcome is not None
        return self._job.outcome
