"""History panel: every run in the store, filtered and searched; compare, delete, tag,
annotate and export selected runs."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.fmt import counted
from studio.tables import P50_HEADER, REF_HEADER, SPEEDUP_HEADER, TIMING_HEADERS, timing_cells
from studio.ui.availability import set_available
from studio.ui.delete_dialog import confirm_delete_box
from studio.ui.generation_chart import GenerationCharts
from studio.ui.history_columns import PERIODS, STATUSES, run_filter, sort_rows
from studio.ui.history_export import export_runs
from studio.ui.history_searches import SearchesView
from studio.ui.serve_results import ServeResultsView
from studio.ui.serve_test_dialog import ServeTestButton
from studio.ui.slots import on_click

if TYPE_CHECKING:
    from studio.store.api import Store

log = logging.getLogger(__name__)

PAGE = 200


class RunTableModel(QAbstractTableModel):
    """Pages of RunRecords fetched from the repository as the view scrolls."""

    COLUMNS = [
        "run",
        "created",
        "recipe",
        "model",
        "status",
        "device",
        "duration s",
        *TIMING_HEADERS,  # the last measured step's, from one comparison
        "tags",
        "notes",
    ]

    def __init__(self, repo: Store | None, parent=None):
        super().__init__(parent)
        self.repo = repo
        self.filter: Any = None
        self.rows: list[Any] = []
        self.total = 0
        self.sorted_by: tuple[str, bool] | None = None  # (column, descending)

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        """Sort the loaded runs (numbers as numbers, runs without a value last)."""
        self.sorted_by = (self.COLUMNS[column], order == Qt.SortOrder.DescendingOrder)
        self.layoutAboutToBeChanged.emit()
        self.rows = sort_rows(self.rows, *self.sorted_by)
        self.layoutChanged.emit()

    def reload(self, run_filter: Any) -> None:
        self.beginResetModel()
        self.filter = run_filter
        self.rows = []
        self.total = 0
        if self.repo is not None:
            try:
                self.total = self.repo.count_runs(run_filter)
                self.rows = list(self.repo.list_runs(run_filter, limit=PAGE, offset=0))
                if self.sorted_by:
                    self.rows = sort_rows(self.rows, *self.sorted_by)
            except Exception:
                log.exception("could not read the run history")
        self.endResetModel()

    def canFetchMore(self, parent=QModelIndex()) -> bool:  # noqa: B008, N802 - Qt API
        return not parent.isValid() and len(self.rows) < self.total

    def fetchMore(self, parent=QModelIndex()) -> None:  # noqa: B008, N802 - Qt API
        if parent.isValid() or self.repo is None:
            return
        more = self.repo.list_runs(self.filter, limit=PAGE, offset=len(self.rows))
        if not more:
            self.total = len(self.rows)
            return
        self.beginInsertRows(QModelIndex(), len(self.rows), len(self.rows) + len(more) - 1)
        self.rows.extend(more)
        self.endInsertRows()
        if self.sorted_by:  # the new page joins the chosen order
            self.layoutAboutToBeChanged.emit()
            self.rows = sort_rows(self.rows, *self.sorted_by)
            self.layoutChanged.emit()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: B008, N802
        return len(self.COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return self.COLUMNS[section]
        if role == Qt.ItemDataRole.InitialSortOrderRole:  # a first click: the best first
            best_high = self.COLUMNS[section] in ("speedup [95% CI]", "created")
            return Qt.SortOrder.DescendingOrder if best_high else Qt.SortOrder.AscendingOrder
        return None

    def flags(self, index):
        f = super().flags(index)
        if self.COLUMNS[index.column()] == "notes":
            f |= Qt.ItemFlag.ItemIsEditable
        return f

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        r = self.rows[index.row()]
        col = self.COLUMNS[index.column()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            if col == "run":
                return r.id[:8]
            if col == "created":
                return r.created_at.strftime("%Y-%m-%d %H:%M:%S") if r.created_at else ""
            if col == "recipe":
                return r.name or r.recipe_name
            if col == "model":
                return r.model_source
            if col == "status":
                return r.status
            if col == "device":
                return r.device
            if col == "duration s":
                return "" if r.duration_s is None else f"{r.duration_s:.1f}"
            if col in TIMING_HEADERS:
                return timing_cells(r.final)[TIMING_HEADERS.index(col)] if r.final else ""
            if col == "tags":
                return ", ".join(r.tags)
            if col == "notes":
                return r.notes
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == SPEEDUP_HEADER and r.final:
                return r.noise or "the last step's median speedup [95% interval]"
            if col == P50_HEADER and r.final:
                return "the last step's median latency, timed against the original"
            if col == REF_HEADER and r.final:
                return "the original's median latency in the last step's comparison"
            return r.error or r.notes or r.id
        if role == Qt.ItemDataRole.ForegroundRole and col == "status":
            from PySide6.QtGui import QColor

            return QColor(
                {
                    "succeeded": "#2e9d4a",
                    "failed": "#d03030",
                    "crashed": "#d03030",
                    "timed_out": "#d08020",
                }.get(r.status, "#888888")
            )
        return None

    def setData(self, index, value, role=Qt.ItemDataRole.EditRole) -> bool:  # noqa: N802
        if (
            role != Qt.ItemDataRole.EditRole
            or self.COLUMNS[index.column()] != "notes"
            or self.repo is None
        ):
            return False
        r = self.rows[index.row()]
        try:
            self.rows[index.row()] = self.repo.update_run(r.id, notes=str(value))
        except Exception as exc:
            log.warning("could not save notes: %s", exc)
            return False
        self.dataChanged.emit(index, index)
        return True

    def run_ids(self, rows: list[int]) -> list[str]:
        return [self.rows[i].id for i in rows if 0 <= i < len(self.rows)]


class HistoryView(QWidget):
    """All runs, newest first."""

    deployRequested = Signal(str)  # run id: the window asks for the folder and deploys

    def __init__(self, state, services, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.services = services
        self.repo: Store | None = getattr(services, "repo", None)
        self.model = RunTableModel(self.repo, self)

        filters = self._make_filters()
        self._make_table()
        actions = self._make_actions_bar(services)
        self._assemble(state, filters, actions)
        if self.repo is None:
            self.count_label.setText("no database: history is unavailable")
        state.runsChanged.connect(self._debounce.start)
        self.reload()

    # -- building ----------------------------------------------------------------------------
    def _make_filters(self) -> QHBoxLayout:
        """Search text, model, pass, status and period, applied 250 ms after the last edit."""
        self.search = QLineEdit()
        self.search.setPlaceholderText("search names, tags, notes, models, recipes…")
        self.search.setClearButtonEnabled(True)
        self.status_combo = QComboBox()
        self.status_combo.addItems(STATUSES)
        self.model_edit = QLineEdit()
        self.model_edit.setPlaceholderText("model")
        self.pass_edit = QLineEdit()
        self.pass_edit.setPlaceholderText("pass")
        self.pass_edit.setToolTip("runs with a step of this pass (e.g. quantize_static_int8)")
        self.period_combo = QComboBox()
        self.period_combo.addItems(list(PERIODS))
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(250)
        self._debounce.timeout.connect(self.reload)
        for w in (self.search, self.model_edit, self.pass_edit):
            w.textChanged.connect(self._debounce.start)
        for c in (self.status_combo, self.period_combo):
            c.currentIndexChanged.connect(self._debounce.start)
        filters = QHBoxLayout()
        filters.addWidget(self.search, 3)
        filters.addWidget(self.model_edit, 1)
        filters.addWidget(self.pass_edit, 1)
        filters.addWidget(self.status_combo)
        filters.addWidget(self.period_combo)
        return filters

    def _make_table(self) -> None:
        self.table = QTableView()
        self.table.setObjectName("historyTable")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
        )
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setColumnWidth(0, 80)
        self.table.setColumnWidth(1, 140)
        self.table.setColumnWidth(2, 150)
        self.table.setColumnWidth(3, 160)
        cols = self.model.COLUMNS
        widths = (("duration s", 80), (REF_HEADER, 85), (P50_HEADER, 85), (SPEEDUP_HEADER, 150))
        for name, width in widths:
            self.table.setColumnWidth(cols.index(name), width)
        # One line per run (long recipe names are elided), so more runs fit a short dock.
        self.table.setWordWrap(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        # Newest first, as the store lists them; a click on a header sorts by that column.
        self.table.horizontalHeader().setSortIndicator(1, Qt.SortOrder.DescendingOrder)
        self.table.setSortingEnabled(True)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._menu)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())
        self.table.doubleClicked.connect(self._open_run)

    def _make_actions_bar(self, services) -> QHBoxLayout:
        """Compare, Tag, Delete, Export, Deploy, Serve test and the run count."""
        self.btn_compare = QPushButton("Compare")
        self.btn_compare.setToolTip("select two or more runs")
        on_click(self.btn_compare.clicked, self.compare_selected)
        self.btn_tag = QPushButton("Tag…")
        on_click(self.btn_tag.clicked, self.tag_selected)
        self.btn_delete = QPushButton("Delete…")
        on_click(self.btn_delete.clicked, self.delete_selected)
        self.btn_deploy = QPushButton("Deploy…")
        self.btn_deploy.setObjectName("historyDeploy")
        on_click(self.btn_deploy.clicked, lambda: self.deployRequested.emit(self.selected_ids()[0]))
        self.btn_export = QPushButton("Export…")
        export_menu = QMenu(self)
        for label, fmt_ in (("CSV", "csv"), ("JSON", "json"), ("Markdown report", "md")):
            export_menu.addAction(label, lambda f=fmt_: self.export_selected(f))
        self.btn_export.setMenu(export_menu)
        self.count_label = QLabel()
        actions = QHBoxLayout()
        self.serve_view = ServeResultsView(self.repo, self)  # the selected run's serve test
        self.serve_test = ServeTestButton(services, self.serve_view, self)
        for b in (self.btn_compare, self.btn_tag, self.btn_delete, self.btn_export):
            actions.addWidget(b)
        actions.addWidget(self.btn_deploy)
        actions.addWidget(self.serve_test.button)
        actions.addStretch(1)
        actions.addWidget(self.count_label)
        return actions

    def _assemble(self, state, filters: QHBoxLayout, actions: QHBoxLayout) -> None:
        runs_page = QWidget()
        root = QVBoxLayout(runs_page)
        root.setContentsMargins(2, 2, 2, 2)
        root.addLayout(filters)
        # The selected run's serve test under the table; the user moves the line between them.
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.serve_view)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        root.addWidget(split, 1)
        root.addLayout(actions)
        # Runs and, on a second tab, recipe searches with their trials.
        self.searches = SearchesView(state, self.repo, self)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("historyTabs")
        self.tabs.addTab(runs_page, "Runs")
        self.tabs.addTab(self.searches, "Searches")
        self.generation = GenerationCharts(self)  # tokens/s and TTFT against prompt length
        self.tabs.addTab(self.generation, "Generation")
        self.tabs.currentChanged.connect(self._tab_shown)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.tabs)

    # -- data ------------------------------------------------------------------------------
    def current_filter(self):
        return run_filter(
            self.status_combo.currentText(),
            self.period_combo.currentText(),
            self.model_edit.text(),
            self.search.text(),
            self.pass_edit.text(),
        )

    def reload(self) -> None:
        if self.repo is None:
            return
        self.model.reload(self.current_filter())
        self.count_label.setText(counted(self.model.total, "run"))
        self._update_buttons()
        self._tab_shown(self.tabs.currentIndex())

    def _tab_shown(self, index: int) -> None:
        """A tab's data when it is shown: the searches, or the generation charts of the
        selected runs (else the listed ones)."""
        if index == 1:
            self.searches.reload()
        elif index == 2 and self.repo is not None:
            self.generation.load_history(self.repo, self.selected_ids(), self.current_filter())

    def selected_ids(self) -> list[str]:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return self.model.run_ids(rows)

    def _selection_changed(self) -> None:
        ids = self.selected_ids()
        current = getattr(self.state, "current_run_id", None)
        if len(ids) == 1 and ids[0] != current and hasattr(self.state, "currentRunChanged"):
            # One run picked: it is the current run (Recipe ▸ Deploy / Serve test follow).
            self.state.current_run_id = ids[0]
            self.state.currentRunChanged.emit(ids[0])
        self._update_buttons()
        self.serve_view.show_run(ids[0] if len(ids) == 1 else None)
        self.serve_test.set_runs(ids)

    def _update_buttons(self) -> None:
        from studio.serve_test import deploy_unavailable_reason

        ids = self.selected_ids()
        n = len(ids)
        set_available(
            self.btn_compare,
            None if n >= 2 else "select two or more runs",
            "compare the selected runs side by side",
        )
        for b, tip in (
            (self.btn_tag, "add a tag (or -tag to remove one)"),
            (self.btn_delete, "delete them from the history (asks first)"),
            (self.btn_export, "export them as CSV, JSON or a Markdown report"),
        ):
            set_available(b, None if n >= 1 else "select one or more runs", tip)
        set_available(
            self.btn_deploy,
            deploy_unavailable_reason(self.repo, ids[0] if n == 1 else None),
            "write a Triton model repository for this run's final model",
        )

    # -- actions ---------------------------------------------------------------------------
    def compare_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) < 2:
            return
        from studio.ui.compare_view import CompareView

        dlg = CompareView(self.repo, ids, self)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.show()
        self._compare = dlg

    def tag_selected(self, tag: str | None = None) -> None:
        ids = self.selected_ids()
        if not ids:
            return
        if tag is None:
            tag, ok = QInputDialog.getText(
                self, "Tag runs", f"Tag for {counted(len(ids), 'run')} (prefix with - to remove):"
            )
            if not ok or not tag.strip():
                return
        tag = tag.strip()
        for rid in ids:
            if tag.startswith("-"):
                self.repo.update_run(rid, remove_tags=[tag[1:]])
            else:
                self.repo.update_run(rid, add_tags=[tag])
        self.reload()
        self.select_runs(ids)  # the tagged runs stay selected

    def select_runs(self, run_ids: list[str]) -> None:
        """Select the rows of ``run_ids`` (those loaded), as after a click on each."""
        from PySide6.QtCore import QItemSelection, QItemSelectionModel

        wanted = set(run_ids)
        selection = QItemSelection()
        for row, r in enumerate(self.model.rows):
            if r.id in wanted:
                selection.select(self.model.index(row, 0), self.model.index(row, 0))
        flags = QItemSelectionModel.SelectionFlag.ClearAndSelect
        flags |= QItemSelectionModel.SelectionFlag.Rows
        self.table.selectionModel().select(selection, flags)

    def delete_selected(self, confirm: bool = True, delete_files: bool | None = None) -> None:
        """Delete the selected runs after asking (naming them; Cancel is the default, so a
        stray click or Enter deletes nothing)."""
        ids = self.selected_ids()
        if not ids:
            return
        if confirm:
            box, files = confirm_delete_box(self, ids, self.model.rows)
            answer = box.exec()
            delete_files = files.isChecked()
            box.deleteLater()
            if answer != QMessageBox.StandardButton.Yes:
                self.state.status.emit("nothing deleted")
                return
        for rid in ids:
            self.repo.delete_run(rid, delete_files=bool(delete_files))
        what = "and their files " if delete_files else ""
        self.state.status.emit(f"deleted {counted(len(ids), 'run')} {what}from the history")
        self.state.runsDeleted.emit(list(ids))
        self.reload()

    def export_selected(self, fmt_: str, path: str | None = None) -> str | None:
        ids = self.selected_ids()
        path = export_runs(self, self.repo, ids, fmt_, path) if ids else None
        if path:
            self.state.status.emit(f"exported {counted(len(ids), 'run')} to {path}")
        return path

    def _open_run(self, index) -> None:
        if self.model.COLUMNS[index.column()] == "notes":
            return
        rid = self.model.run_ids([index.row()])
        if rid:
            self.state.current_run_id = rid[0]
            self.state.currentRunChanged.emit(rid[0])

    def _menu(self, pos) -> None:
        menu = QMenu(self)
        n = len(self.selected_ids())
        a = menu.addAction("Compare", self.compare_selected)
        a.setEnabled(n >= 2)
        menu.addAction("Tag…", self.tag_selected).setEnabled(n >= 1)
        menu.addAction("Delete…", self.delete_selected).setEnabled(n >= 1)
        menu.exec(self.table.viewport().mapToGlobal(pos))
