"""Compare runs side by side: metrics table, latency per step, speedup vs parity error."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.fmt import fmt_bytes, fmt_count, fmt_ms, fmt_num
from studio.generation_columns import sweep_settings
from studio.report import fastest, pareto_front, step_rows
from studio.tables import TIMING_HEADERS, p50_cell, parity_verdict, ref_cell, speedup_cell
from studio.ui import plot_theme
from studio.ui.generation_chart import GenerationCharts

if TYPE_CHECKING:
    from studio.store.api import RunReader

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


class CompareView(QDialog):
    """Two or more runs from the store, side by side."""

    def __init__(self, repo: RunReader, run_ids: list[str], parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"Compare {len(run_ids)} runs")
        self.resize(1000, 650)
        self.comparison = repo.compare(run_ids)
        self.details = self.comparison.runs
        tabs = QTabWidget()
        tabs.addTab(self._metrics_table(), "Metrics")
        self.latency_plot = self._latency_chart()
        tabs.addTab(self._with_log_toggle(self.latency_plot), "Latency per step")
        tabs.addTab(self._pareto_chart(), "Speedup vs parity error")
        if any(sweep_settings(d.recipe) for d in self.details):  # generation runs
            self.generation = GenerationCharts(self)
            self.generation.show_runs(self.details, f"the {len(self.details)} compared runs")
            tabs.addTab(self.generation, "Tokens/s, TTFT vs prompt")
        lay = QVBoxLayout(self)
        names = ", ".join(
            f"{d.run.id[:8]} ({d.run.recipe_name or d.run.name}, {d.run.model_source})"
            for d in self.details
        )
        head = QLabel(names)
        head.setWordWrap(True)
        lay.addWidget(head)
        lay.addWidget(tabs, 1)
        self.plots = [self.latency_plot, tabs.widget(2)]
        self._apply_theme()

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if event.type() in plot_theme.PALETTE_EVENTS:
            self._apply_theme()
        super().changeEvent(event)

    def _apply_theme(self) -> None:
        """Plot colours from the application palette (light and dark), again on a change."""
        for w in getattr(self, "plots", ()):
            plot_theme.style_plot(w, self.palette())

    def _step_numbers(self, place: int) -> str:
        """Each run's own number of the step at aligned ``place`` ("2 | 1": run A's step 2
        and run B's step 1; "–": that run has no step there); one number when all agree."""
        placed = self.comparison.positions
        if not placed or place < 0:  # the original model (the baseline) is step 0 of all
            numbers = [str(place + 1)]
        else:
            numbers = []
            for run in placed:
                own = [index for index, p in run.items() if p == place]
                numbers.append(str(own[0] + 1) if own else "–")
        text = numbers[0] if len(set(numbers)) == 1 else " | ".join(numbers)
        self._place = getattr(self, "_place", {})
        self._place[text] = place
        return text

    def _metrics_table(self) -> QTableWidget:
        keys = ["size_bytes", "num_params", "accuracy"]
        rows: list[tuple[str, list[str]]] = []
        # Each step's timing cells from its own comparison (studio.tables), so a run's
        # p50s and its speedup agree.
        for (index, pass_name), per_run in self.comparison.timings.items():
            name = f"{self._step_numbers(index)}. {pass_name}"  # "0. baseline": the original
            for header, cell in zip(TIMING_HEADERS, (ref_cell, p50_cell, speedup_cell)):
                rows.append((f"{name} · {header}", [cell(t) for t in per_run]))
        for (index, pass_name, metric), values in self.comparison.rows.items():
            if metric not in keys:
                continue
            rows.append(
                (
                    f"{self._step_numbers(index)}. {pass_name} · {metric}",
                    [fmt_metric(metric, v) for v in values],
                )
            )
        for (index, pass_name), verdicts in self.comparison.parity.items():
            rows.append(
                (
                    f"{self._step_numbers(index)}. {pass_name} · parity",
                    [parity_verdict(v) for v in verdicts],
                )
            )
        # aligned order; within a step, as built: ref p50, p50, speedup, then the others
        rows.sort(key=lambda r: self._place[r[0].split(".", 1)[0]])
        t = QTableWidget(len(rows), len(self.details))
        t.setObjectName("compareTable")
        t.setHorizontalHeaderLabels([d.run.id[:8] for d in self.details])
        t.setVerticalHeaderLabels([r[0] for r in rows])
        for i, (_, vals) in enumerate(rows):
            for j, v in enumerate(vals):
                it = QTableWidgetItem(v)
                it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                t.setItem(i, j, it)
        t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        t.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        return t

    def _with_log_toggle(self, chart: pg.PlotWidget) -> QWidget:
        """The latency chart under a "Log scale" check box: an int8 step at 1/20 of the
        original's latency is a flat line at the bottom of a linear axis."""
        box = QCheckBox("Log scale")
        box.setObjectName("latencyLogScale")
        box.setToolTip("latency on a logarithmic axis (steps far faster than the original)")
        box.toggled.connect(lambda on: self._draw_latency(chart, log=on))
        page = QWidget()
        lay = QVBoxLayout(page)
        lay.setContentsMargins(0, 4, 0, 0)
        lay.addWidget(box)
        lay.addWidget(chart, 1)
        return page

    def _latency_chart(self) -> pg.PlotWidget:
        w = pg.PlotWidget()
        w.setObjectName("latencyChart")
        w.setLabel("bottom", "step")
        # Top right: latencies fall from the original on the left, so that corner is free.
        w.addLegend(offset=(-10, 10))
        w.showGrid(x=True, y=True, alpha=0.3)
        self._draw_latency(w, log=False)
        return w

    def _draw_latency(self, w: pg.PlotWidget, *, log: bool) -> None:
        """(Re)draw the latency lines and intervals; ``log``: log10 values on an axis that
        labels them as latencies (the intervals too, so they stay around their points)."""
        w.clear()
        w.getAxis("left").setLogMode(False, log)
        w.setLabel("left", "latency p50", units="ms")

        def y_of(ms: float) -> float:
            return math.log10(ms) if log and ms > 0 else (math.nan if log else ms)

        # Whole-number ticks named after the passes; steps are aligned by pass (a recipe
        # without a step leaves a gap there instead of shifting the rest).
        slots = self.comparison.slots
        ticks = [(0, "original")] + [
            (x + 1, f"{self._step_numbers(x)}. {name}") for x, name in enumerate(slots)
        ]
        w.getAxis("bottom").setTicks([ticks])
        # Room left and right, or the axis drops the first and last step names.
        w.setXRange(-0.4, len(slots) + 0.4, padding=0)
        n = max(1, len(self.details))
        for k, d in enumerate(self.details):
            rows = [r for r in step_rows(d) if r.p50_ms is not None]
            where = self.comparison.positions[k] if self.comparison.positions else {}
            # Runs side by side around each step, so their error bars do not hide each other.
            dx = (k - (n - 1) / 2) * 0.08
            xs = [(where.get(r.index, r.index) + 1 if r.index >= 0 else 0) + dx for r in rows]
            # One point per slot; NaN where the run has no such step, drawn as a gap in its
            # line rather than a segment that jumps over the missing step.
            at = {round(x - dx): y_of(r.p50_ms) for x, r in zip(xs, rows)}
            line_x = [x + dx for x in range(len(slots) + 1)]
            line_y = [at.get(x, math.nan) for x in range(len(slots) + 1)]
            color = COLORS[k % len(COLORS)]
            w.plot(
                np.array(line_x),
                np.array(line_y, dtype=float),
                pen=pg.mkPen(color, width=2),
                symbol="o",
                symbolBrush=color,
                connect="finite",
                name=f"{d.run.id[:8]} {d.run.recipe_name}",
            )
            have = [i for i, y in enumerate(line_y) if not math.isnan(y)]
            present = [(line_x[i], line_y[i]) for i in have]
            if have and len(have) < have[-1] - have[0] + 1:  # a gap between two steps
                # A faint dotted line across the gaps, so a run's steps still read as one run.
                w.plot(
                    [p[0] for p in present],
                    [p[1] for p in present],
                    pen=pg.mkPen(color, width=1, style=Qt.PenStyle.DotLine),
                )
            _draw_intervals(w, xs, rows, y_of, color)

    def pareto_points(self) -> list[tuple[float, float, str]]:
        """(speedup, parity error = max abs, label) of every measured step of every run."""
        return [(p[0], p[1], p[2]) for p in self._pareto_rows()]

    def _pareto_rows(self) -> list[tuple[float, float, str, Any]]:
        pts = []
        for d in self.details:
            for r in step_rows(d):
                if r.index < 0 or r.speedup is None or r.max_abs is None:
                    continue
                label = f"{d.run.id[:8]} · {r.index + 1}. {r.pass_name}"
                pts.append((r.speedup, r.max_abs, label, r))
        return pts

    def _pareto_chart(self) -> pg.PlotWidget:
        w = pg.PlotWidget()
        w.setObjectName("paretoChart")
        w.setLabel("bottom", "speedup over the original (×), whiskers: 95% interval")
        w.setLabel("left", "parity error: log10 max abs")
        w.showGrid(x=True, y=True, alpha=0.3)
        self.front, self.fastest, self.verdict = [], [], ""
        rows = self._pareto_rows()
        pts = [(p[0], p[1], p[2]) for p in rows]
        if not pts:  # a message, not empty axes from -400 to 400
            w.showGrid(x=False, y=False)
            for side in ("left", "bottom"):
                w.getPlotItem().hideAxis(side)
            w.addItem(
                pg.TextItem(
                    "no step has both a speedup and a parity error to plot",
                    color=plot_theme.colors(self.palette())[1],
                    anchor=(0.5, 0.5),
                )
            )
            return w
        intervals = [p[3].timing.speedup_bounds if p[3].timing else None for p in rows]
        logy = [math.log10(max(p[1], 1e-12)) for p in pts]
        _legend_below(w)
        self._pareto_runs(w, rows, logy, intervals)
        # A speedup only beats another when its interval lies wholly above the other's.
        front = pareto_front([(p[0], p[1]) for p in pts], intervals)
        self.front = [pts[i] for i in front]
        w.plot(
            [pts[i][0] for i in front],
            [logy[i] for i in front],
            pen=pg.mkPen("#d62728", width=2, style=Qt.PenStyle.DashLine),
            symbol="s",
            symbolBrush="#d62728",
            symbolSize=12,
            name="Pareto front",
        )
        xs = [iv[0] if iv else p[0] for p, iv in zip(pts, intervals)]
        xe = [iv[1] if iv else p[0] for p, iv in zip(pts, intervals)]
        w.setXRange(min(xs) * 0.9, max(xe) * 1.05, padding=0.05)
        for i in front:
            label = pg.TextItem(pts[i][2], color="#d62728", anchor=(1, 1))
            label.setPos(pts[i][0], logy[i])
            w.addItem(label)
        # Two runs whose intervals overlap are a tie: no winner is crowned.
        best = fastest([p[0] for p in pts], intervals)
        self.fastest = [pts[i][2] for i in best]
        if len(best) > 1:
            self.verdict = f"tie for fastest: {', '.join(self.fastest)} (95% intervals overlap)"
        else:
            self.verdict = f"fastest: {self.fastest[0]}"
        # Above the plot, not on it: it covered points (issue 28, 3).
        w.setTitle(html.escape(self.verdict), color="#d62728")
        return w

    def _pareto_runs(self, w: pg.PlotWidget, rows: list, logy: list, intervals: list) -> None:
        """One colour per run, named in the legend: its points and their 95% whiskers."""
        pts = [(p[0], p[1], p[2]) for p in rows]
        for k, d in enumerate(self.details):
            mine = [i for i, p in enumerate(pts) if p[2].startswith(d.run.id[:8])]
            if not mine:
                continue
            color = COLORS[k % len(COLORS)]
            w.addItem(
                pg.ScatterPlotItem(
                    [pts[i][0] for i in mine],
                    [logy[i] for i in mine],
                    size=10,
                    brush=pg.mkBrush(color),
                    data=[f"{pts[i][2]}: {speedup_cell(rows[i][3].timing)}" for i in mine],
                    hoverable=True,
                    tip=lambda x, y, data: data,
                    name=f"{d.run.id[:8]} {d.run.recipe_name or d.run.name}",
                )
            )
            whisk = [i for i in mine if intervals[i] is not None]
            if whisk:  # the speedup's 95% interval, in the run's colour
                w.addItem(
                    pg.ErrorBarItem(
                        x=np.array([pts[i][0] for i in whisk]),
                        y=np.array([logy[i] for i in whisk]),
                        left=np.array([pts[i][0] - intervals[i][0] for i in whisk]),
                        right=np.array([intervals[i][1] - pts[i][0] for i in whisk]),
                        beam=0.05,
                        pen=pg.mkPen(color, width=1.5),
                    )
                )


def _legend_below(w: pg.PlotWidget) -> pg.LegendItem:
    """A legend under the bottom axis, outside the points (pyqtgraph's own sits on them);
    items named later join it as with ``addLegend``."""
    item = w.getPlotItem()
    legend = pg.LegendItem(colCount=3)
    item.layout.addItem(legend, 4, 1)
    item.legend = legend
    return legend


def _draw_intervals(w: pg.PlotWidget, xs: list[float], rows: list, y_of, color) -> None:
    """The latency's 95% interval of each row that has one, from the same rounds as its p50,
    as error bars at ``xs`` (``y_of`` maps milliseconds to the axis)."""
    bars = [(x, r, iv) for x, r in zip(xs, rows) if (iv := _own_interval(r)) is not None]
    if not bars:
        return
    mid = np.array([y_of(r.p50_ms) for _, r, _ in bars])
    w.addItem(
        pg.ErrorBarItem(
            x=np.array([x for x, _, _ in bars]),
            y=mid,
            top=np.array([y_of(iv[1]) for _, _, iv in bars]) - mid,
            bottom=mid - np.array([y_of(iv[0]) for _, _, iv in bars]),
            beam=0.05,
            pen=pg.mkPen(color, width=1.5),
        )
    )


def _own_interval(r: Any) -> tuple[float, float] | None:
    """The 95% interval of a chart row's own p50 (the step's, or the original's)."""
    t = r.timing
    own = None if t is None else (t.step if t.step is not None else t.reference)
    return None if own is None else own.interval


def fmt_metric(metric: str, v: Any) -> str:
    """A metric as people read it: sizes in MiB, counts with k/M, ms, speedups as ×."""
    if v is None:
        return "-"
    if metric == "size_bytes":
        return fmt_bytes(v)
    if metric == "num_params":
        return fmt_count(v)
    if metric.endswith("_ms"):
        return fmt_ms(v)
    if metric == "speedup":
        return f"{v:.2f}×"
    return fmt_num(v)
