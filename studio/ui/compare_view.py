"""Compare runs side by side: metrics table, latency per step, speedup vs parity error."""

from __future__ import annotations

import math
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QDialog,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
)

from studio.fmt import fmt_bytes, fmt_count, fmt_ms, fmt_num
from studio.report import pareto_front, step_rows

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


class CompareView(QDialog):
    """Two or more runs from the store, side by side."""

    def __init__(self, repo, run_ids: list[str], parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"Compare {len(run_ids)} runs")
        self.resize(1000, 650)
        self.comparison = repo.compare(run_ids)
        self.details = self.comparison.runs
        tabs = QTabWidget()
        tabs.addTab(self._metrics_table(), "Metrics")
        tabs.addTab(self._latency_chart(), "Latency per step")
        tabs.addTab(self._pareto_chart(), "Speedup vs parity error")
        lay = QVBoxLayout(self)
        names = ", ".join(
            f"{d.run.id[:8]} ({d.run.recipe_name or d.run.name}, {d.run.model_source})"
            for d in self.details
        )
        head = QLabel(names)
        head.setWordWrap(True)
        lay.addWidget(head)
        lay.addWidget(tabs, 1)

    def _metrics_table(self) -> QTableWidget:
        keys = [
            "latency_p50_ms",
            "latency_p90_ms",
            "speedup",
            "size_bytes",
            "num_params",
            "accuracy",
        ]
        rows: list[tuple[str, list[str]]] = []
        for (index, pass_name, metric), values in self.comparison.rows.items():
            if metric not in keys:
                continue
            rows.append(
                (f"{index + 1}. {pass_name} · {metric}", [fmt_metric(metric, v) for v in values])
            )
        for (index, pass_name), verdicts in self.comparison.parity.items():
            rows.append(
                (
                    f"{index + 1}. {pass_name} · parity",
                    ["-" if v is None else ("pass" if v else "FAIL") for v in verdicts],
                )
            )
        rows.sort(key=lambda r: r[0])
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

    def _latency_chart(self) -> pg.PlotWidget:
        w = pg.PlotWidget()
        w.setObjectName("latencyChart")
        w.setLabel("left", "latency p50", units="ms")
        w.setLabel("bottom", "step")
        w.addLegend(labelTextColor=self.palette().color(QPalette.ColorRole.Text))
        w.showGrid(x=True, y=True, alpha=0.3)
        _theme(w, self.palette())
        # Whole-number ticks named after the steps (runs of different recipes: "a / b").
        names: dict[int, list[str]] = {0: ["original"]}
        for d in self.details:
            for r in step_rows(d):
                if r.index >= 0 and r.pass_name not in names.setdefault(r.index + 1, []):
                    names[r.index + 1].append(r.pass_name)
        ticks = [(x, f"{x}. " + " / ".join(n) if x else n[0]) for x, n in sorted(names.items())]
        w.getAxis("bottom").setTicks([ticks])
        # Room left and right, or the axis drops the first and last step names.
        w.setXRange(-0.4, max(names) + 0.4, padding=0)
        for k, d in enumerate(self.details):
            rows = [r for r in step_rows(d) if r.latency_p50_ms is not None]
            xs = [r.index + 1 for r in rows]
            ys = [r.latency_p50_ms for r in rows]
            color = COLORS[k % len(COLORS)]
            w.plot(
                xs,
                ys,
                pen=pg.mkPen(color, width=2),
                symbol="o",
                symbolBrush=color,
                name=f"{d.run.id[:8]} {d.run.recipe_name}",
            )
        return w

    def pareto_points(self) -> list[tuple[float, float, str]]:
        """(speedup, parity error = max abs, label) of every measured step of every run."""
        pts = []
        for d in self.details:
            for r in step_rows(d):
                if r.index < 0 or r.speedup is None or r.max_abs is None:
                    continue
                pts.append((r.speedup, r.max_abs, f"{d.run.id[:8]} · {r.index + 1}. {r.pass_name}"))
        return pts

    def _pareto_chart(self) -> pg.PlotWidget:
        w = pg.PlotWidget()
        w.setObjectName("paretoChart")
        w.setLabel("bottom", "speedup over the original (×)")
        w.setLabel("left", "parity error: log10 max abs")
        w.showGrid(x=True, y=True, alpha=0.3)
        _theme(w, self.palette())
        pts = self.pareto_points()
        if not pts:
            w.addItem(pg.TextItem("no measured steps to plot"))
            return w
        logy = [math.log10(max(p[1], 1e-12)) for p in pts]
        w.addLegend(labelTextColor=self.palette().color(QPalette.ColorRole.Text))
        # One colour per run, named in the legend.
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
                    data=[pts[i][2] for i in mine],
                    hoverable=True,
                    tip=lambda x, y, data: data,
                    name=f"{d.run.id[:8]} {d.run.recipe_name or d.run.name}",
                )
            )
        front = pareto_front([(p[0], p[1]) for p in pts])
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
        xs = [p[0] for p in pts]
        w.setXRange(min(xs) * 0.9, max(xs) * 1.05, padding=0.05)
        for i in front:
            label = pg.TextItem(pts[i][2], color="#d62728", anchor=(1, 1))
            label.setPos(pts[i][0], logy[i])
            w.addItem(label)
        return w


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


def _theme(w: pg.PlotWidget, pal) -> None:
    """Plot colours from the application palette (light and dark themes)."""
    w.setBackground(pal.color(QPalette.ColorRole.Base))
    fg = pal.color(QPalette.ColorRole.Text)
    for axis in ("bottom", "left"):
        w.getAxis(axis).setPen(fg)
        w.getAxis(axis).setTextPen(fg)
