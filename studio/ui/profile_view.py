"""Profile panel: where the time goes, layer by layer.

A pyqtgraph bar chart of the top layers by self time (click a bar to select the
layer, which selects its node in the graph), a sortable table of every layer
(time, share, FLOPs, parameters, memory), the operator table, and Export trace
(the Chrome/Perfetto trace the profile job wrote).
"""

from __future__ import annotations

import logging
import shutil

import pyqtgraph as pg
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.fmt import fmt_count
from studio.generation_layers import split_columns, summary_html
from studio.tables import layer_columns, op_columns
from studio.ui.availability import set_available
from studio.ui.profile_generation import GenerationCharts
from studio.ui.slots import on_click

log = logging.getLogger(__name__)


def _fmt_count(n: float | int | None) -> str:
    return fmt_count(n, sep=" ")


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1) :]


class _RowsModel(QAbstractTableModel):
    """A table of dataclass rows with ``columns`` of studio.tables (the CLI's columns too).

    Cells are formatted once in ``set_rows`` and sorting happens here on plain keys:
    a Python ``data()`` called for every comparison would stall the GUI on big profiles.
    """

    def __init__(self, columns, parent=None) -> None:
        super().__init__(parent)
        self.columns = columns
        self.rows: list = []
        self._keys: list[tuple] = []
        self._text: list[list[str]] = []

    def set_rows(self, rows: list) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self._keys = [tuple(c.value(r) for c in self.columns) for r in self.rows]
        self._text = [[c.text(r) for c in self.columns] for r in self.rows]
        self.endResetModel()

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        if not 0 <= column < len(self.columns) or not self.rows:
            return
        self.layoutAboutToBeChanged.emit()
        numeric = self.columns[column].numeric

        def key(i: int):
            v = self._keys[i][column]
            if numeric:
                return -1.0 if v is None else float(v)
            return "" if v is None else str(v).lower()

        idx = sorted(range(len(self.rows)), key=key, reverse=order == Qt.SortOrder.DescendingOrder)
        self.rows = [self.rows[i] for i in idx]
        self._keys = [self._keys[i] for i in idx]
        self._text = [self._text[i] for i in idx]
        self.layoutChanged.emit()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            header = self.columns[section].header
            return header[:1].upper() + header[1:]
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text[index.row()][index.column()]
        if role == Qt.ItemDataRole.TextAlignmentRole and self.columns[index.column()].numeric:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


class _SourceSortProxy(QSortFilterProxyModel):
    """Filters rows; sorting is delegated to the source model (fast, see _RowsModel)."""

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        self.sourceModel().sort(column, order)


def _table(model: QAbstractTableModel) -> tuple[QTableView, QSortFilterProxyModel]:
    proxy = _SourceSortProxy()
    proxy.setSourceModel(model)
    proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
    proxy.setFilterKeyColumn(0)
    view = QTableView()
    view.setModel(proxy)
    view.setSortingEnabled(True)
    view.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
    view.setSelectionMode(QTableView.SelectionMode.SingleSelection)
    view.setAlternatingRowColors(True)
    view.verticalHeader().setVisible(False)
    view.verticalHeader().setDefaultSectionSize(22)
    header = view.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    header.setStretchLastSection(True)
    header.setResizeContentsPrecision(40)  # size columns from 40 rows, not all of them
    return view, proxy


class ProfileView(QWidget):
    """The Profile panel; bars and table rows select layers in ``state``."""

    barClicked = Signal(str)  # module path of a clicked bar

    def __init__(self, state, services=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ProfileView")
        self.state = state
        self.services = services
        self.top_rows: list = []
        self._sized = False

        head = self._make_head()
        self._make_plot()
        bottom = self._make_tables()
        # Side by side: the panel usually docks wide and short at the bottom.
        self.empty = QLabel("The chart of the slowest layers appears here after a profile.")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setWordWrap(True)
        self.chart = QStackedWidget()
        self.chart.addWidget(self.empty)
        self.chart.addWidget(self.plot)
        # A decoder profiled generating: its prefill / decode bars and KV growth as tabs.
        self.gen_charts, self.chart_tabs = GenerationCharts(), QTabWidget()
        self.chart_tabs.addTab(self.chart, "Layers")
        for page, title in self.gen_charts.pages:
            self.chart_tabs.addTab(page, title)
        split = QSplitter(Qt.Orientation.Horizontal)
        # Plots hint at 480 px: the panel outgrew its dock's scroll area, cutting axes off.
        split.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        split.setMinimumHeight(180)
        split.addWidget(self.chart_tabs)
        split.addWidget(bottom)
        split.setSizes([480, 620])

        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(head)
        lay.addWidget(split, 1)

        state.profileChanged.connect(self._on_profile)
        state.modelChanged.connect(self._on_model_changed)
        state.selectionChanged.connect(self._on_selection)
        if services is not None:
            services.jobProgress.connect(self._on_progress)
            services.jobFailed.connect(self._on_failed)
        self._apply_theme()
        self._on_profile()

    def _make_head(self) -> QHBoxLayout:
        """The summary line, the top-N spin box, Profile and Export trace."""
        self.summary = QLabel("No profile yet. Open a model and press Profile (Ctrl+P).")
        self.summary.setWordWrap(True)
        self.profile_btn = QPushButton("Profile")
        self.profile_btn.setToolTip("Profile the current model in a worker (Ctrl+P)")
        on_click(self.profile_btn.clicked, self._profile)
        self.export_btn = QPushButton("Export trace…")
        self.export_btn.setToolTip("Save the Chrome/Perfetto trace of the last profile")
        on_click(self.export_btn.clicked, self.export_trace)
        self.export_btn.setEnabled(False)
        self.top_n = QSpinBox(minimum=5, maximum=50, value=15)
        self.top_n.setPrefix("top ")
        self.top_n.setToolTip("How many layers the chart shows")
        self.top_n.valueChanged.connect(self._refresh_chart)
        self.generate_box = QCheckBox("Generation")
        self.generate_box.setChecked(True)
        if self.services is not None:  # Ctrl+P and the Model panel's Profile follow it
            profiles = self.services.profiles
            self.generate_box.toggled.connect(lambda on: setattr(profiles, "generate", on))
        head = QHBoxLayout()
        head.addWidget(self.summary, 1)
        head.addWidget(self.generate_box)
        head.addWidget(self.top_n)
        head.addWidget(self.profile_btn)
        head.addWidget(self.export_btn)
        return head

    def _make_plot(self) -> None:
        """The bar chart of the slowest layers' self time."""
        pg.setConfigOptions(antialias=True)
        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        # Plain "ms": pyqtgraph's SI prefixing would turn 0.3 ms into "300 mms".
        self.plot.setLabel("bottom", "self time (ms)")
        self.plot.getAxis("bottom").enableAutoSIPrefix(False)
        self.plot.showGrid(x=True, y=False, alpha=0.25)
        self.plot.getViewBox().invertY(True)
        self.plot.getAxis("left").setWidth(170)
        # One label per bar: pyqtgraph otherwise drops labels that touch the plot's edge or
        # fill "too much" of the axis (15 bars came with 10-14 labels).
        self.plot.getAxis("left").setStyle(
            hideOverlappingLabels=False, textFillLimits=[(0, 1.0)], autoExpandTextSpace=False
        )
        self.plot.setMinimumHeight(130)
        self.plot.scene().sigMouseClicked.connect(self._on_plot_click)
        self.bars: pg.BarGraphItem | None = None

    def _make_tables(self) -> QWidget:
        """The layers' and operators' tables under one filter."""
        self.layers_model = _RowsModel(layer_columns(), self)
        self.layers, self.layers_proxy = _table(self.layers_model)
        self.layers.selectionModel().currentRowChanged.connect(self._on_layer_row)
        self.ops_model = _RowsModel(op_columns(), self)
        self.ops, self.ops_proxy = _table(self.ops_model)
        self.ops.selectionModel().currentRowChanged.connect(self._on_op_row)
        self.gen_model = _RowsModel(split_columns(), self)
        self.gen_table, self.gen_proxy = _table(self.gen_model)
        self.filter = QLineEdit(placeholderText="Filter rows")
        self.filter.setClearButtonEnabled(True)
        self._filtered_for = self.state.model_source
        self.filter.textChanged.connect(self.layers_proxy.setFilterFixedString)
        self.filter.textChanged.connect(self.ops_proxy.setFilterFixedString)
        self.filter.textChanged.connect(self.gen_proxy.setFilterFixedString)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.layers, "Layers")
        self.tabs.addTab(self.ops, "Operators")
        self.tabs.addTab(self.gen_table, "Generation")
        bottom = QWidget()
        bl = QVBoxLayout(bottom)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.addWidget(self.filter)
        bl.addWidget(self.tabs)
        return bottom

    # -- theme ----------------------------------------------------------------------------
    def _apply_theme(self) -> None:
        pal = self.palette()
        self.plot.setBackground(pal.color(QPalette.ColorRole.Base))
        fg = pal.color(QPalette.ColorRole.Text)
        for axis in ("bottom", "left"):
            ax = self.plot.getAxis(axis)
            ax.setPen(fg)
            ax.setTextPen(fg)
        self.gen_charts.apply_theme(pal)

    def changeEvent(self, event) -> None:  # noqa: N802
        from PySide6.QtCore import QEvent

        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_theme()
            self._refresh_chart()
        super().changeEvent(event)

    def _available(self, why: str | None) -> None:
        set_available(self.profile_btn, why, "Profile the current model in a worker (Ctrl+P)")
        split = (self.state.model_info or {}).get("generation_split", "open a model first")
        set_available(
            self.generate_box,
            why or split,
            "Also time the model generating (prompt 128, 64 new tokens): each layer's prefill "
            "and decode time, grouped, and the KV cache's growth",
        )

    # -- data -----------------------------------------------------------------------------
    def _profile(self) -> None:
        if self.services is not None:
            if self.services.profile_current():
                self._available("profiling in a worker…")
                self.summary.setText("Profiling in a worker…")

    def _on_progress(self, job_id: str, kind: str, fraction: float, message: str) -> None:
        if kind == "profile":
            self.summary.setText(f"Profiling… {100 * fraction:.0f} % {message}")

    def _on_failed(self, kind: str, message: str) -> None:
        if kind == "profile":
            self._available(None)
            self.summary.setText(f"<span style='color:#c92a2a'>Profile failed:</span> {message}")

    def _on_profile(self) -> None:
        prof = self.state.profile
        self._available(None if self.state.model_source else "open a model first")
        gen = getattr(prof, "generation", None)
        self._show_generation(gen)
        if prof is None:
            self.layers_model.set_rows([])
            self.ops_model.set_rows([])
            set_available(self.export_btn, "profile the model first", "")
            self.summary.setText(
                "No profile yet. Press Profile (Ctrl+P) to time every layer."
                if self.state.model_source
                else "Open a model, then Profile (Ctrl+P)."
            )
            self._refresh_chart()
            return
        # The root row holds the whole forward: it would dwarf every bar and row.
        self.layers_model.set_rows(prof.rows)
        self.ops_model.set_rows(prof.ops)
        self.layers.sortByColumn(2, Qt.SortOrder.DescendingOrder)
        self.ops.sortByColumn(3, Qt.SortOrder.DescendingOrder)
        if not self._sized:
            # Fixed widths: measuring every cell of a big profile would stall the GUI.
            self._sized = True
            for view in (self.layers, self.ops, self.gen_table):
                view.setColumnWidth(0, 190)
                view.setColumnWidth(1, 110)
                fm = view.horizontalHeader().fontMetrics()
                for c in range(2, view.model().columnCount() - 1):
                    title = str(view.model().headerData(c, Qt.Orientation.Horizontal))
                    view.setColumnWidth(c, max(78, fm.horizontalAdvance(title) + 26))
        set_available(
            self.export_btn,
            None if prof.trace_path else "this profile recorded no trace",
            "Save the Chrome/Perfetto trace of the last profile",
        )
        flops = f", {_fmt_count(prof.total_flops)}FLOPs" if prof.total_flops else ""
        cov = f", coverage {100 * prof.coverage:.0f} %" if prof.coverage else ""
        self.summary.setText(
            f"<b>{prof.total_ms:.3f} ms</b> per forward on {prof.device}{flops}{cov} "
            f"— {len(prof.rows)} layers, {len(prof.ops)} operators, {prof.iters} iterations"
            + ("<br>" + summary_html(gen) if gen is not None else "")
        )
        self._refresh_chart()

    def _show_generation(self, gen) -> None:
        """The generation's table, charts and tabs (disabled with the reason without one)."""
        self.gen_model.set_rows(gen.rows if gen is not None else [])
        self.gen_charts.show_generation(gen)
        why = "profile a decoder LM with Generation ticked" if gen is None else ""
        for i in (1, 2):
            self.chart_tabs.setTabEnabled(i, gen is not None)
            self.chart_tabs.setTabToolTip(i, why)
        self.tabs.setTabEnabled(2, gen is not None)
        self.tabs.setTabToolTip(2, why)
        if gen is not None:
            self.chart_tabs.setCurrentIndex(1)
            self.gen_table.sortByColumn(4, Qt.SortOrder.DescendingOrder)
        elif self.chart_tabs.currentIndex() != 0:
            self.chart_tabs.setCurrentIndex(0)

    def _refresh_chart(self) -> None:
        self.plot.clear()
        self.bars = None
        prof = self.state.profile
        self.chart.setCurrentWidget(self.plot if prof is not None else self.empty)
        if prof is None:
            self.top_rows = []
            return
        # A decoder profiled generating: its decode self time per token, as the graph paints.
        gen = getattr(prof, "generation", None)
        key = "decode_ms" if gen is not None else "self_ms"
        self.plot.setLabel("bottom", "decode self ms / token" if gen else "self time (ms)")
        every = gen.rows if gen is not None else prof.rows
        rows = sorted((r for r in every if r.name), key=lambda r: getattr(r, key), reverse=True)
        # No more bars than fit with a readable label each (about 14 px a row).
        fit = max(5, int(self.plot.height() - 40) // 14)
        rows = [r for r in rows if getattr(r, key) > 0][: min(self.top_n.value(), fit)]
        self.top_rows = rows
        if not rows:
            return
        ys = list(range(len(rows)))
        widths = [getattr(r, key) for r in rows]
        brushes = []
        for r in rows:
            sel = self._is_selected(r.name)
            brushes.append(pg.mkBrush("#e8590c" if sel else "#4c6ef5"))
        self.bars = pg.BarGraphItem(x0=0, y=ys, height=0.7, width=widths, brushes=brushes)
        self.plot.addItem(self.bars)
        left = self.plot.getAxis("left")
        # A label wider than the axis is silently not drawn by pyqtgraph: elide to fit.
        fm = QFontMetrics(left.style.get("tickFont") or self.plot.font())
        room = left.width() - 16

        def label(r) -> str:
            return fm.elidedText(f"{r.name} ({r.type})", Qt.TextElideMode.ElideMiddle, room)

        left.setTicks([[(i, label(r)) for i, r in enumerate(rows)]])
        self.plot.setYRange(-0.6, len(rows) - 0.4, padding=0)
        self.plot.setXRange(0, max(widths) * 1.05, padding=0)

    def _is_selected(self, name: str) -> bool:
        key = self.state.selected
        if not key:
            return False
        if key == name:
            return True
        graph = self.state.graph
        return bool(graph is not None and key in graph and graph.node(key).module_path == name)

    # -- selection ------------------------------------------------------------------------
    def bar_at(self, y: float) -> str | None:
        i = int(round(y))
        if 0 <= i < len(self.top_rows) and abs(y - i) <= 0.4:
            return self.top_rows[i].name
        return None

    def click_bar(self, index: int) -> None:
        """Select the layer of bar ``index`` (what a mouse click on it does)."""
        name = self.top_rows[index].name
        self.barClicked.emit(name)
        self.state.select(name)

    def _on_plot_click(self, event) -> None:
        vb = self.plot.getViewBox()
        if not vb.sceneBoundingRect().contains(event.scenePos()):
            return
        pt = vb.mapSceneToView(event.scenePos())
        name = self.bar_at(pt.y())
        if name is not None and 0 <= pt.x():
            self.barClicked.emit(name)
            self.state.select(name)

    def _on_layer_row(self, current, _previous) -> None:
        if not current.isValid():
            return
        row = self.layers_model.rows[self.layers_proxy.mapToSource(current).row()]
        self.state.select(row.name)

    def _on_op_row(self, current, _previous) -> None:
        if not current.isValid():
            return
        row = self.ops_model.rows[self.ops_proxy.mapToSource(current).row()]
        if row.module:
            self.state.select(row.module)

    def _on_model_changed(self) -> None:
        # A filter typed for one model means nothing for the next (it left its table empty).
        if self._filtered_for != self.state.model_source:
            self.filter.clear()
            self._filtered_for = self.state.model_source
        self._on_profile()

    def _on_selection(self, key: str) -> None:
        self._refresh_chart()
        graph = self.state.graph
        name = key
        if graph is not None and key in graph:
            name = graph.node(key).module_path
        for i, r in enumerate(self.layers_model.rows):
            if r.name == name:
                idx = self.layers_proxy.mapFromSource(self.layers_model.index(i, 0))
                sm = self.layers.selectionModel()
                sm.blockSignals(True)
                self.layers.setCurrentIndex(idx)
                self.layers.selectRow(idx.row())
                sm.blockSignals(False)
                self.layers.scrollTo(idx)
                break

    # -- export ---------------------------------------------------------------------------
    def export_trace(self, path: str | None = None) -> str | None:
        prof = self.state.profile
        if prof is None or not prof.trace_path:
            return None
        if path is None:
            path, _ = QFileDialog.getSaveFileName(
                self, "Export trace", "trace.json", "Chrome trace (*.json)"
            )
            if not path:
                return None
        shutil.copyfile(prof.trace_path, path)
        self.state.status.emit(f"trace saved to {path} (open it in ui.perfetto.dev)")
        return path

    def bar_color(self, index: int) -> QColor | None:
        if self.bars is None:
            return None
        brushes = self.bars.opts.get("brushes") or []
        return brushes[index].color() if index < len(brushes) else None
