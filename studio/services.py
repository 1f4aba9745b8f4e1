"""Services: the worker pool, the store and the feature controllers, composed for a window.

Every panel gets ``(state: AppState, services: Services, parent=None)``. Each feature is a
controller of its own in ``studio/controllers/`` with an explicit interface (its methods
and signals); ``Services`` only composes them and the pool, and offers the panels one
object to call and connect to:

- ``models`` (``ModelController``): ``open_model`` -> ``modelOpened``;
- ``profiles`` (``ProfileController``): ``profile_current`` -> ``profileReady``;
- ``runs`` (``RunController``): ``run_recipe`` -> ``runQueued``, ``runFinished``;
  ``confirm_code``;
- ``exports`` (``ExportController``): ``export_onnx``, ``export_path`` -> ``onnxExported``;
- ``diffs`` (``DiffController``): ``diff_steps``, ``diff_run`` -> ``diffReady``;
- ``deploys`` (``DeployController``): ``deploy_triton`` -> ``deployFinished``;
- ``serve_tests`` (``ServeTestController``): ``serve_test`` -> ``serveTestFinished``;
- every controller: ``jobFailed(name, message)``, ``jobProgress(job_id, name, f, msg)``.

The signals below are the controllers' own, re-emitted here. ``JobRouter`` hands each job's
events and end to the controller that submitted it. Signals of the pool itself (every job,
every event) are on ``services.bridge`` (``studio.workers.qt_bridge.PoolBridge``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from PySide6.QtCore import QObject, Signal

from studio.controllers import (
    DeployController,
    DiffController,
    ExportController,
    JobController,
    JobRouter,
    ModelController,
    ProfileController,
    RunController,
    ServeTestController,
    StudioContext,
)
from studio.state import AppState
from studio.usecases import Session
from studio.workers import WorkerPool
from studio.workers.qt_bridge import PoolBridge

if TYPE_CHECKING:
    from studio.store.api import Store

log = logging.getLogger(__name__)

C = TypeVar("C", bound=JobController)


class Services(QObject):
    """Worker pool + store + controllers. Create one per window (tests create their own)."""

    modelOpened = Signal(str)  # source: state.model_info and state.graph are set
    profileReady = Signal()  # state.profile is set
    onnxExported = Signal(str)  # path of the ONNX export of the current model
    diffReady = Signal(object)  # {"graph", "diff", "step", "artifact"} of diff_run()
    runQueued = Signal(str, str)  # job_id, run_id ("" without a store)
    runFinished = Signal(str, object)  # job_id, JobOutcome
    jobFailed = Signal(str, str)  # controller name ("open", "profile"...), message
    jobProgress = Signal(str, str, float, str)  # job_id, controller name, fraction, message
    busyChanged = Signal(int)  # jobs queued or running
    deployFinished = Signal(str, object, str)  # run_id, DeployReport dict or None, error
    # job_id, run_id, {"serve_test_id", "saved_to"?, "report"} or None, error ("" when stored)
    serveTestFinished = Signal(str, str, object, str)

    def __init__(
        self,
        state: AppState,
        *,
        db: str | None = None,
        pool: WorkerPool | None = None,
        repo: Store | None = None,
        open_store: bool = True,
        cpu_workers: int = 2,
        warm_worker: bool | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.state = state
        self.db = db
        self.repo: Store | None = repo if repo is not None else _open_store(state, db, open_store)
        self._owns_pool = pool is None
        self.pool = pool or _new_pool(self.repo, cpu_workers, warm_worker)
        self.bridge = PoolBridge(self.pool, self)
        self.bridge.busyChanged.connect(self.busyChanged)
        # What the user allowed (unpickling, code to run) and the job specs that follow.
        self.session = Session()
        self.context = StudioContext(state, self.repo, self.pool, self.session)
        self.router = JobRouter(self.bridge)
        self.models = self._add(ModelController, modelOpened=self.modelOpened)
        self.profiles = self._add(ProfileController, profileReady=self.profileReady)
        self.runs = self._add(RunController, runQueued=self.runQueued, runFinished=self.runFinished)
        self.exports = self._add(ExportController, onnxExported=self.onnxExported)
        self.diffs = self._add(DiffController, diffReady=self.diffReady)
        self.deploys = self._add(DeployController, deployFinished=self.deployFinished)
        self.serve_tests = self._add(ServeTestController, serveTestFinished=self.serveTestFinished)
        # The panels' calls, each answered by its feature's controller.
        self.open_model = self.models.open_model
        self.profile_current = self.profiles.profile_current
        self.run_recipe = self.runs.run_recipe
        self.export_onnx = self.exports.export_onnx
        self.export_path = self.exports.export_path
        self.diff_steps = self.diffs.diff_steps
        self.diff_run = self.diffs.diff_run
        self.deploy_triton = self.deploys.deploy_triton
        self.serve_test = self.serve_tests.serve_test
        self.data_dir = self.context.data_dir
        self.runs_root = self.context.runs_root
        self.new_run_dir = self.context.new_run_dir

    def _add(self, cls: type[C], **signals: object) -> C:
        """A controller of ``cls`` whose failures, progress and ``signals`` are re-emitted
        by the same-named signals of Services."""
        controller = cls(self.context, self.router)
        controller.setParent(self)
        controller.jobFailed.connect(self.jobFailed)
        controller.jobProgress.connect(self.jobProgress)
        for name, target in signals.items():
            getattr(controller, name).connect(target)
        return controller

    # -- facts for the window -------------------------------------------------------------
    @property
    def db_path(self) -> str:
        """The database file (or URL) in use; "" when there is none."""
        return self.context.db_path

    @property
    def device(self) -> str:
        return ", ".join(lane.name for lane in self.pool.lanes)

    @property
    def busy(self) -> int:
        return self.bridge.busy

    @property
    def runs_dir(self) -> Path | None:
        """Where run folders go (the window's "Runs folder…"); None: next to the database."""
        return self.context.runs_dir

    @runs_dir.setter
    def runs_dir(self, folder: Path | None) -> None:
        self.context.runs_dir = folder

    @property
    def confirm_code(self) -> Callable[[list[str]], bool] | None:
        """Asked before a recipe's code runs (the main window sets a dialog)."""
        return self.runs.confirm_code

    @confirm_code.setter
    def confirm_code(self, ask: Callable[[list[str]], bool] | None) -> None:
        self.runs.confirm_code = ask

    def cancel(self, job_id: str) -> None:
        self.pool.cancel(job_id)

    # -- lifetime -------------------------------------------------------------------------
    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel running jobs, stop the pool (when it is ours) and close the store."""
        self.bridge.close()
        if self._owns_pool:
            self.pool.shutdown(cancel=True, timeout=timeout)
        if self.repo is not None:
            self.repo.close()


def _open_store(state: AppState, db: str | None, open_store: bool) -> Store | None:
    if not open_store:
        return None
    try:
        from studio.store import Repository

        return Repository.open(db)
    except Exception as exc:  # the studio still opens models without a database
        log.exception("could not open the database %s", db)
        state.status.emit(f"database unavailable: {exc}")
        return None


def _new_pool(repo: Store | None, cpu_workers: int, warm_worker: bool | None) -> WorkerPool:
    # No GPU detection in the GUI process: the pool's detect_gpus uses nvidia-smi only.
    # A job that hangs ends as timed_out after 4 hours at the latest (Cancel kills it sooner).
    # A warm worker (torch imported) serves model opens, graphs and profiles, so they do
    # not wait for a new process each; ACCEL_STUDIO_WARM_WORKER=0 turns it off.
    if warm_worker is None:
        warm_worker = os.environ.get("ACCEL_STUDIO_WARM_WORKER", "1") != "0"
    return WorkerPool(repo, cpu_workers=cpu_workers, default_timeout_s=4 * 3600, warm=warm_worker)
