"""The pool's watchdog thread: job timeouts, the cancel -> terminate -> kill escalation and
each worker's memory cap."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from typing import Any

from studio.workers.pool_jobs import Job
from studio.workers.protocol import Cancel

log = logging.getLogger(__name__)

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
            from studio.paths import settings_path

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


class MemoryProbe:
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


def gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


class Watchdog:
    """The WorkerPool part that stops jobs: cooperative cancel, then signals."""

    def _request_cancel(self, job: Job, reason: str) -> None:
        if job.cancel_requested:
            return
        job.cancel_requested = True
        job.cancel_at = time.monotonic()
        self._send(job, Cancel(job_id=job.id, seq=1, reason=reason))
        with self._wake:
            self._wake.notify_all()

    def _signal(self, job: Job, sig: int) -> None:
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

    def _kill(self, job: Job) -> None:
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
                        job.memory_probe = MemoryProbe(job.proc.pid)
                    used = job.memory_probe.rss(now)
                    if used > self.memory_limit_bytes:
                        job.out_of_memory = used
                        log.warning(
                            "job %s used %s, over the worker memory limit of %s: stopped",
                            job.id,
                            gib(used),
                            gib(self.memory_limit_bytes),
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
