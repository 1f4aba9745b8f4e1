"""What every controller shares: the studio's context and the job-controller contract.

``StudioContext`` holds the collaborators a feature needs (app state, store, worker pool,
the session's opt-ins, where files go); it has no signals and runs no jobs.
``JobController`` is one feature that runs worker jobs: it submits a typed job spec (the
pool gets the kind from the spec's declaration, ``accel.job_registry``), remembers the
context of each of its jobs, and gets that job's events and end back from ``JobRouter``,
which hands every job to the controller that submitted it (by object, never by a name).
A controller's ``name`` is the word the panels see in ``jobFailed`` / ``jobProgress``.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from PySide6.QtCore import QObject, Signal

from accel.events import Progress
from accel.job_registry import declaration_for
from accel.job_specs import JobParams, JobParamsError
from studio.state import AppState
from studio.usecases import Session, typed_event
from studio.workers import JobOutcome, WorkerPool

if TYPE_CHECKING:
    from studio.store.api import Store

log = logging.getLogger(__name__)


def outcome_message(outcome: JobOutcome | None) -> str:
    """What the person reads when a job did not succeed (a crash adds its last log lines)."""
    if outcome is None:
        return "the job was cancelled before it started"
    msg = outcome.error or outcome.status
    if outcome.status == "crashed" and outcome.log_tail:
        msg += "\n\n" + "\n".join(outcome.log_tail.splitlines()[-8:])
    return msg


class StudioContext:
    """The collaborators every controller works with (no Qt signals, no jobs)."""

    def __init__(
        self, state: AppState, repo: Store | None, pool: WorkerPool, session: Session
    ) -> None:
        self.state = state
        self.repo = repo
        self.pool = pool
        self.session = session
        # Where run folders go; None: next to the database (``runs_root``).
        self.runs_dir: Path | None = None

    @property
    def db_path(self) -> str:
        """The database file (or URL) in use; "" when there is none."""
        if self.repo is None:
            return ""
        try:
            from studio.store.db import sqlite_path

            p = sqlite_path(self.repo.url)
            return str(p) if p is not None else self.repo.url
        except Exception:
            return str(getattr(self.repo, "url", ""))

    def data_dir(self) -> Path:
        try:
            from studio.store.db import data_dir

            d = Path(data_dir())
        except Exception:
            d = Path.home() / ".accel-studio"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def runs_root(self) -> Path:
        """The folder run artifacts go to: the chosen one, else ``runs/`` next to the
        database (``--db``) or in the user data folder; never the working directory."""
        if self.runs_dir is not None:
            return Path(self.runs_dir)
        db = self.db_path
        if db and "://" not in db and db != ":memory:":
            return Path(db).resolve().parent / "runs"
        return self.data_dir() / "runs"

    def new_run_dir(self, name: str) -> Path:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-%f")
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]
        return self.runs_root() / f"{stamp}-{safe}"


class JobController(QObject):
    """One feature that runs worker jobs (see the module docstring).

    Subclasses set ``name`` and implement ``succeeded``; ``latest_only`` drops the result
    of a job a newer one of the same controller superseded; ``failed`` may add to the
    default (``jobFailed`` and the status bar)."""

    name: ClassVar[str] = ""
    latest_only: ClassVar[bool] = True

    jobFailed = Signal(str, str)  # controller name, message for the user
    jobProgress = Signal(str, str, float, str)  # job_id, controller name, fraction, message

    def __init__(self, ctx: StudioContext, router: JobRouter) -> None:
        super().__init__()
        self.ctx = ctx
        self.state = ctx.state
        self.router = router
        self.context: dict[str, dict[str, Any]] = {}  # job_id -> what the job was for
        self.latest: str | None = None  # the newest job id

    def spec(self, cls: type[Any], source: str, input_spec: str | None, **fields: Any) -> Any:
        """The job spec of a model job with the session's opt-ins, or None after telling
        the user why its parameters are bad (a malformed input spec, ...)."""
        try:
            return self.ctx.session.model_spec(cls, source, input_spec, **fields)
        except JobParamsError as exc:
            self.refused(source, str(exc))
            return None

    def refused(self, source: str, message: str) -> None:
        """A job that could not be asked for (bad parameters)."""
        self.jobFailed.emit(self.name, message)
        self.state.status.emit(f"{self.name} failed: {message.splitlines()[0]}")

    def submit(self, spec: JobParams, context: dict[str, Any], **submit: Any) -> Any:
        """Queue ``spec``'s declared job; its events and end come back to this controller."""
        handle = self.ctx.pool.submit(declaration_for(spec).kind, spec.to_params(), **submit)
        self.context[handle.job_id] = context
        self.latest = handle.job_id
        self.router.own(handle.job_id, self)
        return handle

    def on_event(self, job_id: str, event: dict[str, Any]) -> None:
        typed = typed_event(event)
        if isinstance(typed, Progress):
            fraction = float(typed.fraction or 0.0)
            self.jobProgress.emit(job_id, self.name, fraction, typed.message or "")

    def on_finished(self, job_id: str, outcome: JobOutcome | None) -> None:
        ctx = self.context.pop(job_id, {})
        if self.latest_only and self.latest != job_id:
            return  # a newer request of the same controller superseded this one
        if outcome is None or not outcome.ok:
            self.failed(job_id, ctx, outcome_message(outcome))
            return
        self.succeeded(job_id, ctx, outcome.result)

    def failed(self, job_id: str, ctx: dict[str, Any], message: str) -> None:
        self.jobFailed.emit(self.name, message)
        first = message.splitlines()[0] if message else ""
        self.state.status.emit(f"{self.name} failed: {first}")

    def succeeded(self, job_id: str, ctx: dict[str, Any], result: dict[str, Any]) -> None:
        raise NotImplementedError


class JobRouter(QObject):
    """Hands each pool update of a job to the controller that submitted it."""

    def __init__(self, bridge: Any) -> None:
        super().__init__()
        self._owners: dict[str, JobController] = {}
        bridge.jobEvent.connect(self.on_event)
        bridge.jobFinished.connect(self.on_finished)

    def own(self, job_id: str, controller: JobController) -> None:
        self._owners[job_id] = controller

    def on_event(self, job_id: str, event: dict[str, Any]) -> None:
        owner = self._owners.get(job_id)
        if owner is not None:
            owner.on_event(job_id, event)

    def on_finished(self, job_id: str, outcome: JobOutcome | None) -> None:
        owner = self._owners.pop(job_id, None)
        if owner is not None:
            owner.on_finished(job_id, outcome)
