"""History ▸ Searches: recipe searches (studio optimize / Run ▸ Optimize…) and their trials.

The same repository queries as ``studio history --searches`` and ``--trials``: the list of
searches, and a search's trials as the runs recorded under it. A trial's run stores the
recipe that reproduces it (``accel.search.trial_recipe``, as the Optimize dialog's "Open as
recipe"), so "Open as recipe" here loads that recipe into the Recipe panel.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from accel.timing.result import StepTiming
from studio.tables import (
    TIMING_HEADERS,
    own_ms,
    p50_cell,
    ref_cell,
    ref_ms,
    speedup_cell,
    speedup_of,
)
from studio.ui.availability import set_available
from studio.ui.slots import on_click

if TYPE_CHECKING:
    from studio.store.api import Store

log = logging.getLogger(__name__)

SEARCH_COLUMNS = ["search", "created", "model", "objective", "status", "trials", "best speedup"]
TRIAL_COLUMNS = ["trial", "status", *TIMING_HEADERS, "run"]
LIMIT = 200


class _Item(QTableWidgetItem):
    """A cell that sorts by a number (or text) given apart from what it shows."""

    def __init__(self, text: str, key: Any = None, right: bool = False):
        super().__init__(text)
        self.key = key
        if right:
            self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other) -> bool:
        a, b = self.key, getattr(other, "key", None)
        if a is None or b is None:  # blanks after every value
            return a is not None and b is None
        return a < b


def _table(columns: list[str], name: str) -> QTableWidget:
    t = QTableWidget(0, len(columns))
    t.setObjectName(name)
    t.setHorizontalHeaderLabels(columns)
    t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.verticalHeader().setVisible(False)
    t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    t.horizontalHeader().setStretchLastSection(True)
    t.setSortingEnabled(True)
    t.setWordWrap(False)  # one line per row; long names are elided (full text in the tooltip)
    t.verticalHeader().setDefaultSectionSize(t.fontMetrics().height() + 8)
    return t


def _fit_columns(t: QTableWidget, widest: int = 320) -> None:
    t.resizeColumnsToContents()
    for j in range(t.columnCount()):
        t.setColumnWidth(j, min(max(t.columnWidth(j), 70), widest))


class SearchesView(QWidget):
    """Searches (newest first) over the trials of the selected one."""

    def __init__(self, state, repo: Store | None, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.repo = repo
        self.searches: list[Any] = []
        self.trials: list[Any] = []
        self.search_table = _table(SEARCH_COLUMNS, "searchesTable")
        self.search_table.itemSelectionChanged.connect(self._show_trials)
        self.trial_table = _table(TRIAL_COLUMNS, "trialsTable")
        self.trial_table.itemSelectionChanged.connect(self._sync_buttons)
        self.trial_table.doubleClicked.connect(lambda *_: self.show_run())
        self.open_btn = QPushButton("Open as recipe")
        self.open_btn.setToolTip("load the selected trial's recipe into the Recipe panel")
        on_click(self.open_btn.clicked, self.open_selected)
        self.refresh_btn = QPushButton("Refresh")
        on_click(self.refresh_btn.clicked, self.reload)
        self.count_label = QLabel()
        buttons = QHBoxLayout()
        buttons.addWidget(self.refresh_btn)
        buttons.addWidget(self.open_btn)
        buttons.addStretch(1)
        buttons.addWidget(self.count_label)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.search_table)
        split.addWidget(self.trial_table)
        split.setStretchFactor(1, 2)  # the trials get the larger share
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addWidget(split, 1)
        lay.addLayout(buttons)
        self._sync_buttons()
        state.runsChanged.connect(lambda *_: self.isVisible() and self.reload())
        if self.repo is None:
            self.count_label.setText("no database: searches are unavailable")

    # -- data ------------------------------------------------------------------------------
    def reload(self) -> None:
        if self.repo is None:
            return
        keep = self.selected_search()
        try:
            self.searches = list(self.repo.list_searches(limit=LIMIT))
        except Exception:
            log.exception("could not read the searches")
            self.searches = []
        t = self.search_table
        t.setSortingEnabled(False)
        t.clearContents()
        t.setRowCount(len(self.searches))
        for i, s in enumerate(self.searches):
            best = self._best_final(s)
            cells = [
                _Item(f"{s.short_id} {s.name}".strip(), s.id),
                _Item(s.created_at.astimezone().strftime("%Y-%m-%d %H:%M"), s.created_at),
                _Item(s.model_source, s.model_source),
                _Item(s.objective, s.objective),
                _Item(s.status, s.status),
                _Item(str(s.trials), s.trials, right=True),
                _Item(speedup_cell(best) if best else "-", speedup_of(best), True),
            ]
            cells[0].setData(Qt.ItemDataRole.UserRole, s.id)
            cells[4].setToolTip(s.summary.get("reason") or s.status)
            if best is not None:
                final = s.summary.get("final") or {}
                cells[6].setToolTip(
                    "from the final side-by-side re-timing of trials "
                    + ", ".join(str(n) for n in final.get("trials") or [])
                    if final.get("done")
                    else "the best trial's own measurement"
                )
            for j, c in enumerate(cells):
                t.setItem(i, j, c)
        t.setSortingEnabled(True)
        _fit_columns(t)
        self.count_label.setText(f"{len(self.searches)} searches")
        if keep:
            self.select_search(keep)
        else:
            self._show_trials()

    def _best_final(self, s: Any) -> StepTiming | None:
        """The best's speedup: from the search's final side-by-side re-timing when that
        chose it, else its trial run's own (with its interval where it was stored)."""
        best = s.summary.get("best")
        final = s.summary.get("final") or {}
        side_by_side = (final.get("timings") or {}).get(str(best)) if final.get("done") else None
        if side_by_side:
            return StepTiming.from_json(side_by_side)
        run_id = (s.summary.get("trial_runs") or {}).get(str(best)) if best is not None else None
        if not run_id:
            return None
        try:
            return self.repo.get_run(run_id).run.final or None
        except Exception:  # the run was deleted from the history
            return None

    def selected_search(self) -> str | None:
        rows = self.search_table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.search_table.item(rows[0].row(), 0)
        return item.data(Qt.ItemDataRole.UserRole) if item else None

    def select_search(self, search_id: str) -> bool:
        for i in range(self.search_table.rowCount()):
            if self.search_table.item(i, 0).data(Qt.ItemDataRole.UserRole) == search_id:
                self.search_table.selectRow(i)
                return True
        return False

    def _show_trials(self) -> None:
        from studio.store import RunFilter

        sid = self.selected_search()
        self.trials = []
        if sid and self.repo is not None:
            try:
                f = RunFilter(search_id=sid)
                self.trials = list(self.repo.list_runs(f, limit=1000, offset=0))
            except Exception:
                log.exception("could not read the trials of search %s", sid)
        t = self.trial_table
        t.setSortingEnabled(False)
        t.clearContents()
        t.setRowCount(len(self.trials))
        for i, r in enumerate(self.trials):
            fin = r.final
            cells = [
                _Item(_trial_label(r.name or r.recipe_name, sid), r.created_at),
                _Item(r.status, r.status),
                _Item(ref_cell(fin) if fin else "", ref_ms(fin), right=True),
                _Item(p50_cell(fin) if fin else "", own_ms(fin), right=True),
                _Item(speedup_cell(fin) if fin else "", speedup_of(fin), right=True),
                _Item(r.id[:8], r.id),
            ]
            cells[0].setData(Qt.ItemDataRole.UserRole, r.id)
            cells[0].setToolTip(r.name or r.recipe_name)
            cells[1].setToolTip(r.error or r.status)
            for j, c in enumerate(cells):
                t.setItem(i, j, c)
        t.setSortingEnabled(True)
        _fit_columns(t)
        self._sync_buttons()

    # -- actions ---------------------------------------------------------------------------
    def selected_trial(self) -> str | None:
        rows = self.trial_table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.trial_table.item(rows[0].row(), 0)
        return item.data(Qt.ItemDataRole.UserRole) if item else None

    def _sync_buttons(self) -> None:
        set_available(
            self.open_btn,
            None if self.selected_trial() is not None else "select a finished trial",
            "load the selected trial's recipe into the Recipe panel",
        )

    def open_selected(self) -> bool:
        """Load the selected trial's stored recipe into the Recipe panel."""
        from accel.recipe import load_recipe

        rid = self.selected_trial()
        if rid is None or self.repo is None:
            return False
        detail = self.repo.get_run(rid)
        if not detail.recipe:
            self.state.status.emit(f"run {rid[:8]} has no stored recipe")
            return False
        try:
            recipe = load_recipe(detail.recipe)
        except Exception as exc:
            self.state.status.emit(f"the recipe of run {rid[:8]} does not load: {exc}")
            return False
        self.state.set_recipe(recipe)
        self.state.status.emit(f"recipe of {detail.run.name or rid[:8]} opened")
        return True

    def show_run(self) -> None:
        """Make the selected trial the current run (as a double-click in the Runs list)."""
        rid = self.selected_trial()
        if rid:
            self.state.current_run_id = rid
            self.state.currentRunChanged.emit(rid)


def _trial_label(name: str, search_id: str | None) -> str:
    """ "#3 export_onnx+onnxruntime" from a trial run's name (the search is shown above)."""
    prefix = f"search {(search_id or '')[:8]} "
    return name[len(prefix) :] if search_id and name.startswith(prefix) else name
