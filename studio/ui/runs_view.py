"""Runs panel: the job queue with per-job and per-step progress, live log, cancel,
re-run, open the run folder, and each run's per-step table."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from accel.events import (
    Log,
    Progress,
    RunFailed,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
)
from accel.timing.result import StepTiming
from studio.fmt import is_noisy
from studio.generation_columns import has_generation, interval_text
from studio.tables import (
    p50_cell,
    ref_cell,
    speedup_cell,
)
from studio.ui.availability import set_available
from studio.ui.run_steps import color_brush, fill_step_table, make_step_table, noise_reason, verdict
from studio.ui.slots import on_click
from studio.usecases import typed_event

STATUS_COLOR = {
    "succeeded": "#2e9d4a",
    "failed": "#d03030",
    "crashed": "#d03030",
    "timed_out": "#d08020",
    "cancelled": "#888888",
    "running": "#2f6fd0",
    "queued": "#888888",
}


@dataclass
class RunEntry:
    job_id: str
    run_id: str = ""
    name: str = ""
    model: str = ""
    status: str = "queued"
    total: int = 0
    done: int = 0
    step_fraction: float = 0.0
    step_label: str = ""
    run_dir: str = ""
    baseline: dict[str, Any] = field(default_factory=dict)
    baseline_timing: StepTiming | None = None
    steps: list[StepFinished] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    recipe: dict[str, Any] | None = None
    failed_step: int | None = None  # the step a failed run stopped at
    started: float = field(default_factory=time.time)
    item: QTreeWidgetItem | None = None
    job_bar: QProgressBar | None = None
    step_bar: QProgressBar | None = None


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1e-3 or abs(v) >= 1e4 else f"{v:.{digits}f}"
    return str(v)


class RunsView(QWidget):
    """Live view of recipe runs (jobs of kind ``run_recipe`` in the pool)."""

    COLUMNS = ["run", "recipe", "model", "status", "progress", "current step"]

    def __init__(self, state, services, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.services = services
        self.entries: dict[str, RunEntry] = {}

        self.queue = QTreeWidget()
        self.queue.setObjectName("runQueue")
        self.queue.setRootIsDecorated(False)
        self.queue.setHeaderLabels(self.COLUMNS)
        self.queue.header().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.queue.setColumnWidth(0, 80)
        self.queue.setColumnWidth(1, 140)
        self.queue.setColumnWidth(2, 140)
        self.queue.setColumnWidth(3, 90)
        self.queue.setColumnWidth(4, 150)
        self.queue.currentItemChanged.connect(lambda *_: self._show_selected())

        buttons = self._make_buttons()
        self.empty = QLabel(
            "No runs yet. Build a recipe in the Recipe panel and press Run (Ctrl+R)."
        )
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._make_details()

        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(self.empty)
        lv.addWidget(self.queue, 1)
        lv.addLayout(buttons)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.table)
        right.addWidget(self.log)
        split = QSplitter()
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        root = QVBoxLayout(self)
        root.setContentsMargins(2, 2, 2, 2)
        root.addWidget(split)

        bridge = services.bridge
        bridge.jobQueued.connect(self._queued)
        bridge.jobStarted.connect(self._started)
        bridge.jobEvent.connect(self._event)
        bridge.jobLog.connect(self._log)
        bridge.jobFinished.connect(self._finished)
        services.runQueued.connect(self._run_queued)
        state.runsDeleted.connect(self.remove_runs)
        self._update_buttons()

    def _make_buttons(self) -> QHBoxLayout:
        """Cancel, Re-run (also skipping failing steps) and Open run folder."""
        self.btn_cancel = QPushButton("Cancel")
        self.btn_rerun = QPushButton("Re-run")
        self.btn_rerun_skip = QPushButton("Re-run, skipping failing steps")
        self.btn_rerun_skip.setObjectName("rerunSkip")
        self.btn_rerun_skip.setToolTip(
            "the run stopped at a failing step: run the recipe again with on_step_error: skip"
        )
        self.btn_folder = QPushButton("Open run folder")
        on_click(self.btn_cancel.clicked, self.cancel_selected)
        on_click(self.btn_rerun.clicked, self.rerun_selected)
        on_click(self.btn_rerun_skip.clicked, self.rerun_skipping)
        on_click(self.btn_folder.clicked, self.open_folder)
        buttons = QHBoxLayout()
        for b in (self.btn_cancel, self.btn_rerun, self.btn_rerun_skip, self.btn_folder):
            buttons.addWidget(b)
        buttons.addStretch(1)
        return buttons

    def _make_details(self) -> None:
        """The selected run's steps table and its log."""
        self.table = make_step_table()
        self.log = QPlainTextEdit()
        self.log.setObjectName("runLog")
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(5000)

    # -- pool -> view -----------------------------------------------------------------------
    def _entry(self, job_id: str, create: bool = False) -> RunEntry | None:
        e = self.entries.get(job_id)
        if e is None and create:
            e = RunEntry(job_id)
            self.entries[job_id] = e
            item = QTreeWidgetItem(["", "", "", "queued", "", ""])
            self.queue.insertTopLevelItem(0, item)
            e.item = item
            e.job_bar = QProgressBar()
            e.job_bar.setRange(0, 1000)
            e.job_bar.setTextVisible(True)
            e.job_bar.setFormat("%p%")
            self.queue.setItemWidget(item, 4, e.job_bar)
            e.step_bar = QProgressBar()
            e.step_bar.setRange(0, 1000)
            e.step_bar.setTextVisible(False)
            e.step_bar.setMaximumHeight(6)
            self.empty.hide()
            if self.queue.currentItem() is None:
                self.queue.setCurrentItem(item)
        return e

    def _run_queued(self, job_id: str, run_id: str) -> None:
        e = self._entry(job_id, create=True)
        e.run_id = run_id
        recipe = self.state.recipe
        e.recipe = recipe.to_dict()
        e.name = recipe.name
        e.model = recipe.model.source
        from accel.recipe_checks import step_warnings

        for i, w in step_warnings(recipe.steps, recipe.device).items():
            e.log.append(f"warning: step {i + 1}: {w}")
        self._render(e)
        if e.item is not None:  # the run just started is the one the user looks for
            self.queue.setCurrentItem(e.item)

    def _queued(self, job_id: str, kind: str) -> None:
        if kind == "run_recipe":
            self._render(self._entry(job_id, create=True))

    def _started(self, job_id: str, kind: str) -> None:
        if kind != "run_recipe":
            return
        e = self._entry(job_id, create=True)
        e.status = "running"
        e.started = time.time()
        self._render(e)

    def _event(self, job_id: str, event: dict) -> None:
        e = self.entries.get(job_id)
        if e is None:
            return
        match typed_event(event):
            case RunStarted() as ev:
                e.total, e.run_dir, e.baseline = ev.num_steps, ev.run_dir, ev.baseline
                e.baseline_timing = ev.baseline_timing
                e.model = ev.model_source or e.model
                e.recipe = ev.recipe or e.recipe
                e.name = (e.recipe or {}).get("name", e.name)
                p50 = p50_cell(e.baseline_timing)
                self._append(e, f"started on {ev.device}: original p50 {p50} ms")
            case StepStarted(index=index, pass_name=pass_name, params=params):
                e.step_label, e.step_fraction = pass_name, 0.0
                self._append(e, f"step {index + 1}: {pass_name} {params or ''}")
            case Progress(index=index, fraction=fraction, message=message):
                e.step_fraction = fraction
                if index < 0:
                    e.step_label = message or "preparing"
            case StepFinished() as ev:
                e.steps.append(ev)
                e.done += 1
                e.step_fraction = 0.0
                self._append(e, _step_line(ev))
            case Log(level=level, message=message):
                self._append(e, f"{level}: {message}")
            case RunFinished(summary=summary) if summary.get("noise"):
                self._append(e, f"noisy timing: {summary['noise']}")
            case RunFailed(index=index, error=error):
                e.failed_step = index
                self._append(e, f"run failed: {error}")
        self._render(e)

    def _log(self, job_id: str, rec: dict) -> None:
        e = self.entries.get(job_id)
        if e is not None:
            self._append(
                e, f"{rec.get('level', '')} {rec.get('logger', '')}: {rec.get('message', '')}"
            )

    def _finished(self, job_id: str, outcome: Any) -> None:
        e = self.entries.get(job_id)
        if e is None:
            return
        e.status = outcome.status if outcome is not None else "cancelled"
        if outcome is not None:
            e.run_id = e.run_id or (outcome.run_id or "")
            if outcome.status in ("crashed", "timed_out"):
                why = outcome.error or outcome.status
                if outcome.exit_code is not None:
                    why += f" (exit code {outcome.exit_code})"
                if outcome.signal:
                    why += f" (signal {outcome.signal})"
                self._append(e, f"worker {outcome.status}: {why}")
                for line in (outcome.log_tail or "").splitlines()[-10:]:
                    self._append(e, f"  | {line}")
            elif outcome.error and outcome.status != "succeeded":
                self._append(e, f"{outcome.status}: {outcome.error}")
        self._append(e, f"run {e.status} after {time.time() - e.started:.1f} s")
        self._render(e)

    # -- rendering -------------------------------------------------------------------------
    def _append(self, e: RunEntry, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        e.log.append(f"{stamp}  {line}")
        if self._selected() is e:
            self.log.appendPlainText(e.log[-1])

    def _render(self, e: RunEntry) -> None:
        item = e.item
        if item is None:
            return
        item.setText(0, (e.run_id or e.job_id)[:8])
        item.setText(1, e.name)
        item.setText(2, e.model)
        item.setText(3, e.status)
        item.setForeground(3, color_brush(STATUS_COLOR.get(e.status, "#888888")))
        total = max(e.total, 1)
        frac = 1.0 if e.status == "succeeded" else min(1.0, (e.done + e.step_fraction) / total)
        if e.job_bar is not None:
            e.job_bar.setValue(int(frac * 1000))
            e.job_bar.setFormat(f"{e.done}/{e.total or '?'} steps")
        item.setText(
            5, f"{e.step_label} {e.step_fraction * 100:.0f}%" if e.status == "running" else ""
        )
        if self._selected() is e:
            self._fill_table(e)
        self._update_buttons()

    def remove_runs(self, run_ids: list[str]) -> None:
        """Drop runs deleted from the history (finished ones only: a live job stays)."""
        gone = set(run_ids)
        for job_id, e in list(self.entries.items()):
            if e.run_id in gone and e.status not in ("queued", "running"):
                if e.item is not None:
                    self.queue.takeTopLevelItem(self.queue.indexOfTopLevelItem(e.item))
                del self.entries[job_id]
        self._show_selected()

    def _selected(self) -> RunEntry | None:
        item = self.queue.currentItem()
        if item is None:
            return None
        return next((e for e in self.entries.values() if e.item is item), None)

    def _show_selected(self) -> None:
        e = self._selected()
        self.log.setPlainText("\n".join(e.log) if e else "")
        self._fill_table(e)
        self._update_buttons()

    def _fill_table(self, e: RunEntry | None) -> None:
        fill_step_table(self.table, e)

    def _update_buttons(self) -> None:
        e = self._selected()
        live = e is not None and e.status in ("queued", "running")
        set_available(
            self.btn_cancel,
            None if live else "select a queued or running run",
            "stop the selected run (finished steps are kept)",
        )
        rerun = e is not None and e.recipe is not None and not live
        set_available(
            self.btn_rerun,
            None if rerun else "select a finished run of a recipe",
            "run the selected run's recipe again",
        )
        stopped = (
            e is not None
            and e.recipe is not None
            and e.status == "failed"
            and e.failed_step is not None
            and e.recipe.get("on_step_error") != "skip"
        )
        set_available(
            self.btn_rerun_skip,
            None if stopped else "select a failed run that stopped at a failing step",
            "the run stopped at a failing step: run the recipe again with on_step_error: skip",
        )
        set_available(
            self.btn_folder,
            None if e and e.run_dir else "select a run that has a folder",
            "open the selected run's folder (models, reports, logs)",
        )

    # -- actions ---------------------------------------------------------------------------
    def cancel_selected(self) -> None:
        e = self._selected()
        if e is not None:
            self.services.cancel(e.job_id)
            self._append(e, "cancel requested")

    def rerun_selected(self) -> None:
        e = self._selected()
        if e is None or e.recipe is None:
            return
        kwargs = {"parent_run_id": e.run_id} if e.run_id else {}
        self.services.run_recipe(e.recipe, **kwargs)

    def rerun_skipping(self) -> None:
        """Run a recipe that stopped at a failing step again, skipping such steps."""
        e = self._selected()
        if e is None or e.recipe is None:
            return
        kwargs = {"parent_run_id": e.run_id} if e.run_id else {}
        self.services.run_recipe({**e.recipe, "on_step_error": "skip"}, **kwargs)

    def open_folder(self) -> None:
        e = self._selected()
        if e and e.run_dir:
            QDesktopServices.openUrl(QUrl.fromLocalFile(e.run_dir))


def _step_line(ev: StepFinished) -> str:
    """The log line of a finished step: verdict, latency, speedup, noise, error."""
    t = ev.timing
    return (
        f"step {ev.index + 1} {ev.pass_name}: {verdict(ev)}, "
        f"p50 {p50_cell(t)} ms (original {ref_cell(t)} ms), speedup {speedup_cell(t)}"
        + (f", {interval_text(ev.metrics or {})}" if has_generation(ev.metrics or {}) else "")
        + (f" (noisy: {noise_reason(ev)})" if is_noisy(t) else "")
        + (f" — {ev.error}" if ev.error else "")
    )
