"""The only Qt-aware module of studio.workers: pool updates as Qt signals on the GUI thread.

``WorkerPool`` calls its listeners on its dispatcher thread. ``PoolBridge`` lives in
the GUI thread; emitting its signals from the dispatcher thread makes Qt queue them,
so connected slots run on the GUI thread in the order the pool produced the updates.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal

from studio.workers.pool import JobUpdate, WorkerPool

log = logging.getLogger(__name__)


class PoolBridge(QObject):
    """Re-emits a ``WorkerPool``'s updates as signals (delivered on the GUI thread)."""

    update = Signal(object)  # every JobUpdate
    jobQueued = Signal(str, str)  # job_id, kind
    jobStarted = Signal(str, str)  # job_id, kind
    jobEvent = Signal(str, object)  # job_id, event dict (runner events, progress)
    jobLog = Signal(str, object)  # job_id, {"level", "logger", "message"}
    jobFinished = Signal(str, object)  # job_id, JobOutcome
    busyChanged = Signal(int)  # number of jobs queued or running
    poolChanged = Signal()  # a job was queued, started or finished (pool.jobs() changed)
    # No signal is named "event": it would shadow QObject.event() and break Qt's event
    # delivery to this object; jobEvent carries the runner events.
    _hop = Signal(object)  # dispatcher thread -> GUI thread

    def __init__(self, pool: WorkerPool, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.pool = pool
        self._active: set[str] = set()
        # Thread hop: the pool calls _relay on its thread; the queued _hop delivers here.
        self._hop.connect(self._deliver)
        self._unsubscribe = pool.subscribe(self._relay)

    @property
    def busy(self) -> int:
        return len(self._active)

    def _relay(self, update: JobUpdate) -> None:  # pool dispatcher thread
        self._hop.emit(update)

    def _deliver(self, update: JobUpdate) -> None:  # GUI thread
        before = len(self._active)
        if update.what == "queued":
            self._active.add(update.job_id)
            self.jobQueued.emit(update.job_id, update.kind)
        elif update.what == "started":
            self._active.add(update.job_id)
            self.jobStarted.emit(update.job_id, update.kind)
        elif update.what == "event":
            self.jobEvent.emit(update.job_id, update.data)
        elif update.what == "log":
            self.jobLog.emit(update.job_id, update.data)
        elif update.what in ("finished", "exit"):
            self._active.discard(update.job_id)
            self.jobFinished.emit(update.job_id, update.outcome)
        self.update.emit(update)
        if len(self._active) != before:
            self.busyChanged.emit(len(self._active))
        if update.what in ("queued", "started", "finished"):
            self.poolChanged.emit()

    def close(self) -> None:
        """Stop listening to the pool (the pool itself is not shut down)."""
        self._unsubscribe()
