"""A run's serve tests (``studio serve-test``) beside it in History: the batch sweep as a chart
(throughput and latency per batch size) and the served load test as a table (p50/p99 latency and
throughput per client count, with and without dynamic batching). A generation run's serve test
has no sweep: its table shows tokens/s, time to first token and time per output token per
client count, with and without continuous batching."""

from __future__ import annotations

import math
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.fmt import fmt_ms
from studio.ui import plot_theme

# One row per client count: without ("off") and with ("on") dynamic batching side by side.
LOAD_COLUMNS = [
    ("clients", "concurrent clients, each sending one request at a time"),
    ("req/s off", "throughput without dynamic batching (requests per second)"),
    ("req/s on", "throughput with dynamic batching (requests per second)"),
    ("gain", "throughput with dynamic batching over without"),
    ("p50/p99 ms off", "median / 99th percentile latency without dynamic batching"),
    ("p50/p99 ms on", "median / 99th percentile latency with dynamic batching"),
    ("avg batch", "requests per model execution with dynamic batching (Triton's metrics): "
     "the batches the dynamic batcher formed"),
    ("errors", "failed requests, both modes"),
]  # fmt: skip

# A generation run's serve test: without ("off") and with ("on") continuous batching.
GENERATION_COLUMNS = [
    ("clients", "concurrent clients, each streaming one generation at a time"),
    ("tok/s off", "tokens per second of all clients without continuous batching"),
    ("tok/s on", "tokens per second of all clients with continuous batching"),
    ("gain", "tokens/s with continuous batching over without"),
    ("TTFT p50/p99 ms off", "time to first token (median / 99th percentile), without"),
    ("TTFT p50/p99 ms on", "time to first token (median / 99th percentile), with"),
    ("TPOT p50 ms off/on", "time per output token after the first (median), without / with"),
    ("errors", "failed requests, both modes"),
]  # fmt: skip


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
        self.chart.setLabel("left", "samples/s")  # short: the chart is low in the History dock
        self.chart.showGrid(x=True, y=True, alpha=0.3)
        self.chart.setMinimumHeight(140)
        self.table = QTableWidget(0, len(LOAD_COLUMNS))
        self.table.setObjectName("serveLoadTable")
        self._headers(LOAD_COLUMNS)
        # Columns as wide as their contents, the last one takes the spare width; a table too
        # narrow for them scrolls sideways instead of cutting the numbers.
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.row = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self.row.addWidget(self.chart, 1)
        self.row.addWidget(self.table, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 4, 0, 0)
        lay.addWidget(self.title)
        lay.addLayout(self.row, 1)
        self.setVisible(False)

    # Below this width the table goes under the chart (a History dock at the window's side).
    STACK_BELOW_PX = 900

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        narrow = self.width() < self.STACK_BELOW_PX
        want = QBoxLayout.Direction.TopToBottom if narrow else QBoxLayout.Direction.LeftToRight
        if self.row.direction() != want:
            self.row.setDirection(want)

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if (
            event.type() in plot_theme.PALETTE_EVENTS
            and self.test is not None
            and self.test.workload != "generate"
        ):
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

    def _headers(self, columns: list[tuple[str, str]]) -> None:
        self.table.setColumnCount(len(columns))
        for j, (label, tip) in enumerate(columns):
            header = QTableWidgetItem(label)
            header.setToolTip(tip)
            self.table.setHorizontalHeaderItem(j, header)

    def _fill(self, t: Any) -> None:
        generation = t.workload == "generate"
        self.chart.setVisible(not generation)
        if generation:
            self._fill_generation(t)
            return
        self._headers(LOAD_COLUMNS)
        gain = t.speedup(max((p.clients for p in t.load), default=0))
        batching = (
            f"preferred {t.preferred_batch_sizes}, max queue delay {t.max_queue_delay_us} µs"
            if t.preferred_batch_sizes or t.max_queue_delay_us
            else "no preferred sizes, no queue delay (batches what is queued)"
        )
        self.title.setText(
            f"Serve test ({t.created_at:%Y-%m-%d %H:%M}, {t.artifact_kind}): dynamic batching "
            f"{batching}; direct call p50 {fmt_ms(t.direct_p50_ms)} ms"
            + (f"; throughput with/without batching {gain:.2f}x" if gain else "")
            + ". off/on: without/with dynamic batching."
        )
        self._chart(t)
        counts = sorted({p.clients for p in t.load})
        self.table.setRowCount(len(counts))
        self._fit_rows()
        for i, n in enumerate(counts):
            off, on = t.pair(n)
            ratio = t.speedup(n)
            cells = [
                str(n),
                "-" if off is None else f"{off.throughput:.1f}",
                "-" if on is None else f"{on.throughput:.1f}",
                "-" if ratio is None else f"{ratio:.2f}x",
                _latencies(off),
                _latencies(on),
                "-" if on is None or on.avg_batch is None else f"{on.avg_batch:.2f}",
                str(sum(p.errors for p in (off, on) if p is not None)),
            ]
            self._row(i, cells)

    def _fill_generation(self, t: Any) -> None:
        self._headers(GENERATION_COLUMNS)
        counts = sorted({p.clients for p in t.generation})
        gain = t.generation_gain(max(counts, default=0))
        self.title.setText(
            f"Generation serve test ({t.created_at:%Y-%m-%d %H:%M}): {t.prompt_tokens} prompt "
            f"tokens, {t.new_tokens} new tokens per request, measured by the clients"
            + (f"; tokens/s with/without continuous batching {gain:.2f}x" if gain else "")
            + ". off/on: without/with continuous batching."
        )
        self.table.setRowCount(len(counts))
        self._fit_rows()
        for i, n in enumerate(counts):
            off, on = t.generation_pair(n)
            ratio = t.generation_gain(n)
            cells = [
                str(n),
                "-" if off is None else f"{off.tokens_per_s:.1f}",
                "-" if on is None else f"{on.tokens_per_s:.1f}",
                "-" if ratio is None else f"{ratio:.2f}x",
                _ttft(off),
                _ttft(on),
                f"{_ms(off and off.tpot_p50_ms)} / {_ms(on and on.tpot_p50_ms)}",
                str(sum(p.errors for p in (off, on) if p is not None)),
            ]
            self._row(i, cells)

    # Rows the table always shows (when it has them): the splitter above it and a low History
    # dock cut a generation test's table, which has no chart to hold the height, to one row.
    MIN_VISIBLE_ROWS = 2

    def _fit_rows(self) -> None:
        t = self.table
        rows = min(t.rowCount(), self.MIN_VISIBLE_ROWS)
        height = (
            t.horizontalHeader().sizeHint().height()
            + rows * t.verticalHeader().defaultSectionSize()
            + 2 * t.frameWidth()
        )
        t.setMinimumHeight(height)

    def _row(self, i: int, cells: list[str]) -> None:
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
        # batch sizes on a log2 axis: 1, 2, 4, ... 32 evenly spaced (their labels do not overlap)
        xs = [math.log2(p.batch) for p in pts]
        self.chart.getAxis("bottom").setTicks([[(x, str(p.batch)) for x, p in zip(xs, pts)]])
        self.chart.plot(
            xs,
            [p.throughput for p in pts],
            pen=pg.mkPen("#1f77b4", width=2),
            symbol="o",
            symbolBrush="#1f77b4",
        )
        ys = [p.throughput for p in pts]
        span = max(max(ys) - min(ys), max(ys) * 0.05, 1e-9)
        # headroom above the highest point for its latency label
        self.chart.setYRange(min(ys) - 0.1 * span, max(ys) + 0.4 * span, padding=0)
        for i, p in enumerate(pts):  # latency per batch above each point, inside the plot
            x_anchor = 0.0 if i == 0 else 1.0 if i == len(pts) - 1 else 0.5
            label = pg.TextItem(f"{fmt_ms(p.latency_ms)} ms", color=fg, anchor=(x_anchor, 1.2))
            label.setPos(xs[i], p.throughput)
            self.chart.addItem(label)


def _latencies(p: Any) -> str:
    return "-" if p is None else f"{fmt_ms(p.p50_ms)} / {fmt_ms(p.p99_ms)}"


def _ms(value: float | None) -> str:
    return "-" if value is None else fmt_ms(value)


def _ttft(p: Any) -> str:
    return "-" if p is None else f"{_ms(p.ttft_p50_ms)} / {_ms(p.ttft_p99_ms)}"
