"""Process supervision: start a worker process (fresh, or the lane's warm one), hand it a
job, relay its messages to the dispatcher until its ``done`` or its exit, and keep or retire
a warm worker afterwards. Timeouts, cancel escalation and the memory cap are in
``studio.workers.watchdog``.

A worker's end is seen by waiting on its process (a pidfd, or its exit status), never by
the end of its output: any process the worker's libraries forked can hold the pipe open
(``WorkerOutput``). Each worker leads its own process group under a guard
(``studio.workers.guard``); when it has ended, whatever is left of its group is killed."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.workers.pool_jobs import LOG_TAIL_LINES, Job, Lane, PoolSettings, PoolState
from studio.workers.processes import (
    WorkerOutput,
    kill_group,
    process_tree_rss_mb,
)
from studio.workers.protocol import Cancel, Done, JobSpec, Message, ProtocolError, decode

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RECYCLE_RSS_MB = 3072.0  # a warm worker above this after a job is replaced


def worker_command(python: str, *, serve: bool = False) -> list[str]:
    """How to start a worker: ``python -m studio.workers.entry``, or in a frozen bundle
    (PyInstaller) the bundle's own executable with ``--studio-worker``."""
    if getattr(sys, "frozen", False):
        cmd = [sys.executable, "--studio-worker"]
    else:
        cmd = [python, "-m", "studio.workers.entry"]
    return [*cmd, "--serve"] if serve else cmd


class WorkerProcess:
    """One worker process; a persistent (warm) one serves several jobs, one at a time."""

    def __init__(self, proc: subprocess.Popen[str], lane: str, persistent: bool) -> None:
        self.proc = proc
        self.lane = lane
        self.persistent = persistent
        self.job: Job | None = None
        self.jobs_served = 0
        self.output = WorkerOutput(proc)
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
            kill_group(self.proc.pid)
            self.output.close()

        threading.Thread(target=reap, name=f"worker-{self.proc.pid}-reap", daemon=True).start()


class Supervisor:
    """Runs a job in a worker process, on the job's own thread (``supervise``): takes the
    lane's warm worker or starts one, relays its messages to ``post`` until its ``done`` or
    its exit, then keeps it warm or retires it. ``warm_kind(kind)``: may a warm worker serve
    jobs of ``kind``."""

    def __init__(
        self,
        state: PoolState,
        settings: PoolSettings,
        post: Callable[[str, Job, Any], None],
        warm_kind: Callable[[str], bool],
    ) -> None:
        self.state = state
        self.settings = settings
        self.post = post
        self.warm_kind = warm_kind
        self.idle: dict[str, WorkerProcess] = {}  # lane name -> its warm worker, when idle

    def _worker_env(self, lane: Lane) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.settings.env)
        env.update(lane.env)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONFAULTHANDLER"] = "1"
        paths = [str(PROJECT_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env

    def _worker_params(self, job: Job) -> dict[str, Any]:
        params = dict(job.params)
        dev = str(params.get("device") or "")
        # The worker sees only its GPU, as cuda:0.
        lane = job.lane
        if lane is not None and lane.name.startswith("cuda"):
            if dev.startswith("cuda") or job.device.startswith("cuda"):
                params["device"] = lane.worker_device
        return params

    def _spawn(self, lane: Lane, *, persistent: bool) -> WorkerProcess:
        proc = subprocess.Popen(
            worker_command(self.settings.python, serve=persistent),
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
            cwd=self.settings.cwd,
            # Own session: Ctrl-C in a terminal reaches the parent only (which cancels
            # cooperatively), and the whole process group can be killed at once.
            start_new_session=True,
        )
        return WorkerProcess(proc, lane.name, persistent)

    def ensure_warm(self, lane: Lane) -> None:
        """Start the lane's warm worker unless it has a live idle one (or the pool closed)."""
        with self.state.lock:
            if self.state.closed or not self.settings.warm:
                return
            current = self.idle.get(lane.name)
            if current is not None and current.alive:
                return
            try:
                self.idle[lane.name] = self._spawn(lane, persistent=True)
            except OSError as exc:
                log.warning("could not start a warm worker for %s: %s", lane.name, exc)
                self.idle.pop(lane.name, None)

    def retire_idle(self) -> None:
        """Retire every warm worker (the pool is shutting down)."""
        with self.state.lock:
            idle, self.idle = list(self.idle.values()), {}
        for worker in idle:
            worker.retire()

    def _checkout(self, job: Job) -> WorkerProcess | None:
        """The lane's idle warm worker for ``job`` when it may take it, else None."""
        if not self.warm_kind(job.kind) or job.lane is None:
            return None
        with self.state.lock:
            worker = self.idle.pop(job.lane.name, None)
        if worker is not None and not worker.alive:
            worker.retire(0)
            return None
        return worker

    def _checkin(self, worker: WorkerProcess, job: Job) -> bool:
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
            rss = process_tree_rss_mb(worker.proc.pid)
            if rss is not None and rss > self.settings.recycle_rss_mb:
                log.info(
                    "warm worker %s uses %.0f MiB after %s: replacing it",
                    worker.proc.pid,
                    rss,
                    job.kind,
                )
                keep = False
        worker.job = None
        if keep:
            with self.state.lock:
                if not self.state.closed and worker.lane not in self.idle:
                    self.idle[worker.lane] = worker
                    return True
        worker.retire()
        return False

    def supervise(self, job: Job) -> None:
        """Run ``job`` (it has its lane) to its end; the last thing posted is its exit."""
        assert job.lane is not None
        self.post("started", job, None)
        worker = self._checkout(job)
        reused = worker is not None
        if worker is None:
            try:
                persistent = self.warm_kind(job.kind)
                worker = self._spawn(job.lane, persistent=persistent)
            except OSError as exc:
                job.stderr.append(f"could not start the worker: {exc}")
                self.post("exit", job, None)
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
                self.post("exit", job, None)
                return
            got_done, heard = self._run_on(worker, job)
        proc = worker.proc
        if got_done and self._checkin(worker, job):
            code: int | None = 0  # the job ended cleanly; its worker stays for the next
        else:
            if got_done:
                try:
                    code = proc.wait(self.settings.kill_grace_s + 3.0)
                except subprocess.TimeoutExpired:
                    code = None
            else:
                code = proc.wait()
                kill_group(proc.pid)
                worker.output.close()
                worker.stderr_reader.join(timeout=2.0)
                with contextlib.suppress(OSError):
                    if proc.stdin:
                        proc.stdin.close()
            if worker.persistent:
                self.ensure_warm(job.lane)  # a replacement warms up for the next job
        self.post("exit", job, code)

    def _run_on(self, worker: WorkerProcess, job: Job) -> tuple[bool, bool]:
        """Send ``job`` to ``worker`` and relay its messages until its ``done`` (a persistent
        worker) or its exit. Returns (got done, heard anything from the worker)."""
        assert job.lane is not None
        proc = worker.proc
        worker.job = job
        worker.jobs_served += 1
        with self.state.lock:
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
        self.send(job, spec)
        if cancel_now:
            self.send(job, Cancel(job_id=job.id, seq=1))
        got_done = heard = False
        for line in worker.output.lines():  # ends when the worker's process has ended
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
            self.post("msg", job, msg)
            if worker.persistent and isinstance(msg, Done):
                got_done = True
                break
        return got_done, heard

    def send(self, job: Job, msg: Message) -> None:
        proc = job.proc
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(msg.to_line())
            proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the worker is gone; its exit is handled by the supervisor
