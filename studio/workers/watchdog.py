"""The pool's watchdog: job timeouts, the cancel -> terminate -> kill escalation and each
worker's memory cap, on a thread of its own."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from studio.workers.pool_jobs import Job, PoolSettings, PoolState
from studio.workers.processes import MemoryProbe
from studio.workers.protocol import Cancel, Message

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


def gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


class Watchdog:
    """Stops jobs: a cooperative cancel (``send`` hands the worker a ``cancel`` message), then
    SIGTERM to the worker's process group after ``cancel_grace_s``, SIGKILL after
    ``kill_grace_s``; a job past its timeout is cancelled so; a worker over the memory cap
    is killed. ``run`` is the watching thread's loop."""

    def __init__(
        self, state: PoolState, settings: PoolSettings, send: Callable[[Job, Message], None]
    ) -> None:
        self.state = state
        self.settings = settings
        self.send = send
        self.next_memory_check = 0.0
        self.thread = threading.Thread(target=self.run, name="pool-watchdog", daemon=True)

    def request_cancel(self, job: Job, reason: str) -> None:
        """Ask the job to stop (under the state's lock); the escalation follows."""
        if job.cancel_requested:
            return
        job.cancel_requested = True
        job.cancel_at = time.monotonic()
        self.send(job, Cancel(job_id=job.id, seq=1, reason=reason))
        self.state.notify()

    def signal(self, job: Job, sig: int) -> None:
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

    def kill(self, job: Job) -> None:
        job.killed = True
        self.signal(job, getattr(signal, "SIGKILL", signal.SIGTERM))

    def run(self) -> None:
        st = self.state
        while True:
            with st.wake:
                if st.closed and not st.running:
                    return
                st.wake.wait(0.05)
                running = [st.jobs[i] for i in st.running if i in st.jobs]
            now = time.monotonic()
            check_memory = self.settings.memory_limit_bytes > 0 and now >= self.next_memory_check
            if check_memory:
                self.next_memory_check = now + MEMORY_CHECK_S
            for job in running:
                if job.proc is None or job.proc.poll() is not None:
                    continue
                if check_memory and self._over_memory(job, now):
                    continue
                self._check_timeout(job, now)
                self._escalate(job, now)

    def _over_memory(self, job: Job, now: float) -> bool:
        """Kill a worker (its whole tree counted) over the memory cap; True when it was."""
        if job.out_of_memory:
            return False
        if job.memory_probe is None or job.memory_probe.pid != job.proc.pid:
            job.memory_probe = MemoryProbe(job.proc.pid)
        used = job.memory_probe.rss(now)
        limit = self.settings.memory_limit_bytes
        if used <= limit:
            return False
        job.out_of_memory = used
        log.warning(
            "job %s used %s, over the worker memory limit of %s: stopped",
            job.id,
            gib(used),
            gib(limit),
        )
        self.kill(job)
        return True

    def _check_timeout(self, job: Job, now: float) -> None:
        if (
            job.timeout_s is not None
            and job.started is not None
            and not job.timed_out
            and now - job.started > job.timeout_s
        ):
            job.timed_out = True
            with self.state.lock:
                self.request_cancel(job, f"timed out after {job.timeout_s:g} s")

    def _escalate(self, job: Job, now: float) -> None:
        if job.cancel_at is None:
            return
        if job.terminated_at is None and now - job.cancel_at > self.settings.cancel_grace_s:
            job.terminated_at = now
            self.signal(job, signal.SIGTERM)
        elif (
            job.terminated_at is not None
            and not job.killed
            and now - job.terminated_at > self.settings.kill_grace_s
        ):
            self.kill(job)
