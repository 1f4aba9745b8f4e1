"""Event routing: the pool's dispatcher thread applies every job message in order, records
runs through the ``RunRecorder`` (the only place that writes to the store), decides how a
job ended and notifies the listeners."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.run_records import FILE_NAME
from studio.workers.pool_jobs import FINAL, Job, JobOutcome, JobUpdate, PoolSettings, PoolState
from studio.workers.protocol import Done, EventMessage, Hello, LogMessage, Message
from studio.workers.watchdog import DEFAULT_MEMORY_FRACTION, MEMORY_ENV, gib

if TYPE_CHECKING:
    from studio.workers.recorder import RunRecorder

log = logging.getLogger(__name__)

CRASH_HINTS = {
    "SIGSEGV": "a native crash (segmentation fault) in a library the job used",
    "SIGBUS": "a native crash (bus error) in a library the job used",
    "SIGABRT": "a library aborted the process",
    "SIGFPE": "a native crash (arithmetic exception, such as an integer division by zero) in "
    "a library the job used",
    "SIGKILL": "killed from outside, most often by the system's out-of-memory killer; "
    "try a smaller batch or input shape",
}


def save_unrecorded(job: Job, status: str, final: dict[str, Any], result: dict) -> str:
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
            path = Path(run_dir) / FILE_NAME
        else:
            from studio.store.db import data_dir

            path = data_dir() / "unrecorded" / f"{job.run_id}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
        from studio.run_records import sign

        path.write_text(json.dumps(sign(record), indent=1, default=str, ensure_ascii=True))
        return str(path)
    except OSError as exc:
        log.error("could not keep the unrecorded run %s either: %s", job.run_id, exc)
        return ""


class Dispatcher:
    """Applies what happens to jobs, in order, on one thread: ``post(what, job, payload)``
    queues it (queued, started, msg, exit), the thread records it through ``store`` and
    tells the listeners; a job's exit becomes its ``JobOutcome`` and ``release(job)``."""

    def __init__(
        self,
        state: PoolState,
        settings: PoolSettings,
        store: RunRecorder | None,
        release: Callable[[Job], None],
    ) -> None:
        self.state = state
        self.settings = settings
        self.store = store
        self.release = release
        self.inbox: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self.listeners: list[Callable[[JobUpdate], None]] = []
        self.thread = threading.Thread(target=self.run, name="pool-dispatch", daemon=True)

    def post(self, what: str, job: Job | None, payload: Any = None) -> None:
        self.inbox.put((what, job, payload))

    def subscribe(self, listener: Callable[[JobUpdate], None]) -> Callable[[], None]:
        with self.state.lock:
            self.listeners.append(listener)

        def unsubscribe() -> None:
            with self.state.lock, contextlib.suppress(ValueError):
                self.listeners.remove(listener)

        return unsubscribe

    def stop(self, timeout: float = 5.0) -> None:
        self.post("stop", None)
        self.thread.join(timeout=timeout)

    def run(self) -> None:
        while True:
            what, job, payload = self.inbox.get()
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
                    self.release(job)

    def _store_call(
        self, fn: Callable[..., Any], *args: Any, job: Job | None = None, **kwargs: Any
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

    def _handle(self, what: str, job: Job, payload: Any) -> None:
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

    def _ending(self, job: Job, code: int | None, sig: str) -> tuple[str, str, str]:
        """(status, error, error_type) of a job whose worker exited with ``code``: what its
        ``done`` message said, else why the pool stopped it, else how it died."""
        done = job.done
        if done is not None:
            status = done.status
            error, error_type = done.error, done.error_type
            if job.timed_out and status == "cancelled":
                status, error_type = "timed_out", "Timeout"
                error = f"the job ran past its timeout of {job.timeout_s:g} s and stopped"
        elif job.out_of_memory:
            status, error_type = "crashed", "OutOfMemory"
            error = (
                f"out of memory: the worker used {gib(job.out_of_memory)}, over its limit of "
                f"{gib(self.settings.memory_limit_bytes)} (setting {MEMORY_ENV}, default "
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
            hint = CRASH_HINTS.get(sig)
            if hint:
                error += f": {hint}"
        return (status if status in FINAL else "failed"), error, error_type

    def _finish(self, job: Job, code: int | None) -> None:
        done = job.done
        sig = ""
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                sig = signal.Signals(-code).name
        status, error, error_type = self._ending(job, code, sig)
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
                    record_file=save_unrecorded(job, status, final, outcome.result),
                )
        job.outcome = outcome
        job.status = status
        self.release(job)
        self._notify(
            JobUpdate(job.id, job.kind, "finished", status, job.run_id, outcome.result, outcome)
        )

    def _notify(self, update: JobUpdate) -> None:
        with self.state.lock:
            listeners = list(self.listeners)
        for fn in listeners:
            try:
                fn(update)
            except Exception:
                log.exception("worker pool listener failed")
