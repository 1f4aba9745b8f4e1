"""A run's serve tests (``studio serve-test``) beside it in History: the batch sweep as a chart
(throughput and latency per batch size) and the served load test as a table (p50/p99 latency and
throughput per client count, with and without dynamic batching)."""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.fmt import fmt_ms
from studio.ui import plot_theme

LOAD_COLUMNS = [
    "clients",
    "dynamic batching",
    "avg batch",
    "p50 ms",
    "p99 ms",
    "throughput /s",
    "errors",
]


class ServeResultsView(QWidget):
    """The newest serve test of one run; hidden while the run has none."""

    def __init__(self, repo: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.repo = repo
        self.test: Any = None
        self.title = QLabel()
        self.title.setWordWrap(True)
        self.chart = pg.PlotWidget()
        self.chart.setObjectName("batchSweepChart")
        self.chart.setLabel("bottom", "batch size")
        self.chart.setLabel("left", "throughput", units="items/s")
        self.chart.showGrid(x=True, y=True, alpha=0.3)
        self.chart.setMinimumHeight(140)
        self.table = QTableWidget(0, len(LOAD_COLUMNS))
        self.table.setObjectName("serveLoadTable")
        self.table.setHorizontalHeaderLabels(LOAD_COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        row = QHBoxLayout()
        row.addWidget(self.chart, 1)
        row.addWidget(self.table, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 4, 0, 0)
        lay.addWidget(self.title)
        lay.addLayout(row, 1)
        self.setVisible(False)

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if event.type() in plot_theme.PALETTE_EVENTS and self.test is not None:
            self._chart(self.test)  # redraw: the latency labels carry the text colour too
        super().changeEvent(event)

    def show_run(self, run_id: str | None) -> None:
        """Show ``run_id``'s newest serve test (None, or a run without one: hide)."""
        self.test = None
        if run_id and self.repo is not None:
            from studio.store.serve_tests import serve_tests

            try:
                tests = serve_tests(self.repo, run_id)
            except Exception:  # noqa: BLE001 - an older database without the table: nothing to show
                tests = []
            self.test = tests[0] if tests else None
        self.setVisible(self.test is not None)
        if self.test is not None:
            self._fill(self.test)

    def _fill(self, t: Any) -> None:
        gain = t.speedup(max((p.clients for p in t.load), default=0))
        self.title.setText(
            f"Serve test ({t.created_at:%Y-%m-%d %H:%M}, {t.artifact_kind}): dynamic batching "
            f"preferred {t.preferred_batch_sizes or '-'}, max queue delay "
            f"{t.max_queue_delay_us} µs; direct call p50 {fmt_ms(t.direct_p50_ms)} ms"
            + (f"; throughput with/without batching {gain:.2f}x" if gain else "")
        )
        self._chart(t)
        self.table.setRowCount(len(t.load))
        for i, p in enumerate(sorted(t.load, key=lambda p: (p.clients, p.dynamic_batching))):
            cells = [
                str(p.clients),
                "on" if p.dynamic_batching else "off",
                "-" if p.avg_batch is None else f"{p.avg_batch:.2f}",
                fmt_ms(p.p50_ms),
                fmt_ms(p.p99_ms),
                f"{p.throughput:.1f}",
                str(p.errors),
            ]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, j, item)

    def _chart(self, t: Any) -> None:
        pal = self.palette()
        fg = pal.color(QPalette.ColorRole.Text)
        self.chart.clear()
        plot_theme.style_plot(self.chart, pal)
        pts = sorted(t.sweep, key=lambda p: p.batch)
        if not pts:
            return
        xs = [p.batch for p in pts]
        self.chart.getAxis("bottom").setTicks([[(x, str(x)) for x in xs]])
        self.chart.plot(
            xs,
            [p.throughput for p in pts],
            pen=pg.mkPen("#1f77b4", width=2),
            symbol="o",
            symbolBrush="#1f77b4",
        )
        for p in pts:  # latency per batch beside each point
            label = pg.TextItem(f"{fmt_ms(p.latency_ms)} ms", color=fg, anchor=(0.5, 1.2))
            label.setPos(p.batch, p.throughput)
            self.chart.addItem(label)
