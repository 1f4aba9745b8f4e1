"""What the worker pool records into, and an in-memory recorder.

The pool's dispatcher thread is the only writer of run records. It writes through this small
protocol, not through the SQLAlchemy store: ``studio.store.Repository`` satisfies it (the
studio's recorder), ``MemoryRecorder`` keeps the same records in lists (pool tests and
headless callers that want the pool without a database). A recorder call that raises does not
stop the pool: the job's outcome says it was not recorded and where its record was saved.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class RunRecorder(Protocol):
    """The four calls the pool makes, on its dispatcher thread, in job order."""

    def create_run(self, **new_run: Any) -> Any:
        """A run row for a submitted job (``run_id``, ``model_source``, ``recipe``, ``kind``,
        ``device``, ``parent_run_id``, ``tags``, ``notes``, ``name``, ``job_params``)."""

    def set_status(self, run_id: str, status: str, **final: Any) -> Any:
        """``running`` when a worker starts the job; the final status with ``error``,
        ``error_type``, ``exit_code``, ``signal``, ``log_tail`` when it ends."""

    def record_event(self, run_id: str, event: Mapping[str, Any]) -> Any:
        """One runner event (run_started, step_finished, ...) as the worker sent it."""

    def recover_interrupted(self) -> Any:
        """Runs left running by a studio that was killed end as crashed (once, at start)."""


class MemoryRecorder:
    """A RunRecorder that keeps runs in memory: ``runs[run_id]`` = {fields, status, final,
    events}. Thread-safe; ``calls`` lists every call in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str | None]] = []

    def create_run(self, **new_run: Any) -> None:
        with self._lock:
            run_id = str(new_run["run_id"])
            self.runs[run_id] = {**new_run, "status": "queued", "final": {}, "events": []}
            self.calls.append(("create_run", run_id))

    def set_status(self, run_id: str, status: str, **final: Any) -> None:
        with self._lock:
            run = self.runs[run_id]
            run["status"] = status
            run["final"].update(final)
            self.calls.append(("set_status", run_id))

    def record_event(self, run_id: str, event: Mapping[str, Any]) -> None:
        with self._lock:
            self.runs[run_id]["events"].append(dict(event))
            self.calls.append(("record_event", run_id))

    def recover_interrupted(self) -> list[str]:
        with self._lock:
            self.calls.append(("recover_interrupted", None))
            stale = [r for r, run in self.runs.items() if run["status"] == "running"]
            for r in stale:
                self.runs[r]["status"] = "crashed"
            return stale
