"""Tokens/s and time to first token against prompt length, for generation runs (History's
Generation tab, Compare's): one line per recipe and model form (the original, the optimized
model), each point a stored run's figure with its 95% interval."""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from studio.generation_sweep import CHARTS, SweepSeries, short_labels, sweep_series
from studio.ui import plot_theme
from studio.ui._async import run_in_thread

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
EMPTY = (
    "No generation runs to chart. Run a generation recipe (benchmark.workload: generate) at "
    "several prompt lengths, e.g. studio run recipe.yaml --prompt-tokens 32,128,512, then "
    "select its runs."
)


class GenerationCharts(QWidget):
    """Two charts side by side; ``show_runs(details)`` draws the runs' generation series."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("generationCharts")
        self.series: list[SweepSeries] = []
        self._ticket = 0  # the newest read of stored runs (load_history); older ones are dropped
        self.note = QLabel(EMPTY)
        self.note.setWordWrap(True)
        self.plots: dict[str, pg.PlotWidget] = {}
        row = QHBoxLayout()
        for key, title in CHARTS:
            w = pg.PlotWidget()
            w.setObjectName(f"generationChart_{key}")
            w.showGrid(x=True, y=True, alpha=0.25)
            w.setLabel("bottom", "prompt tokens")
            w.setLabel("left", title)
            w.setMinimumSize(120, 40)  # a short History dock keeps its buttons in view
            self.plots[key] = w
            row.addWidget(w, 3)
        # One legend for both charts, beside them (a short dock keeps the charts' height).
        self.legend = QLabel()
        self.legend.setObjectName("generationLegend")
        self.legend.setWordWrap(True)
        self.legend.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        scroll = QScrollArea()
        scroll.setWidget(self.legend)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setMinimumWidth(120)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        row.addWidget(scroll, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addWidget(self.note)
        lay.addLayout(row, 1)
        self._apply_theme()

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if event.type() in plot_theme.PALETTE_EVENTS:
            self._apply_theme()
        super().changeEvent(event)

    def _apply_theme(self) -> None:
        for w in self.plots.values():
            plot_theme.style_plot(w, self.palette())

    def load_history(self, repo: Any, selected: list[str], run_filter: Any) -> None:
        """Chart History's runs (``history_details``), read off the GUI thread: up to
        HISTORY_RUNS full runs can take a while on a large database. A read that a newer
        one overtook (another selection or reload meanwhile) is dropped."""
        self._ticket += 1
        ticket = self._ticket
        self.note.setText("Reading the runs…")

        def shown(result: tuple[list[Any], str]) -> None:
            if ticket == self._ticket:
                self.show_runs(*result)

        def failed(exc: BaseException) -> None:
            if ticket == self._ticket:
                self.note.setText(f"Could not read the runs: {exc}")

        run_in_thread(lambda: history_details(repo, selected, run_filter), shown, failed, self)

    def show_runs(self, details: list[Any], which: str = "") -> None:
        """Draw the generation series of ``details`` (RunDetail, newest first); ``which``
        says what runs they are."""
        self.series = sweep_series(details)
        points = sum(len(s.points) for s in self.series)
        if not self.series:
            self.note.setText(EMPTY)
        else:
            lengths = sorted({x for s in self.series for x in s.xs()})
            self.note.setText(
                (f"From {which}: " if which else "")
                + f"{len(self.series)} series, {points} points; prompt lengths "
                f"{', '.join(map(str, lengths))}. Whiskers: 95% intervals. Hover a point for "
                "its run."
            )
        for key, w in self.plots.items():
            self._draw(w, key)
        labels, shared = short_labels(self.series)
        head = f"<b>{html.escape(shared)}</b><br><br>" if shared else ""
        self.legend.setText(
            head
            + "<br>".join(
                f"<span style='color:{COLORS[i % len(COLORS)]}'>"
                f"{'╌╌╌' if s.label.endswith('· original') else '━━━'}</span> "
                f"{_breakable(label)}"
                for i, (s, label) in enumerate(zip(self.series, labels, strict=True))
            )
        )

    def _draw(self, w: pg.PlotWidget, key: str) -> None:
        w.clear()
        xs = sorted({x for s in self.series for x in s.xs()})
        log_x = len(xs) > 1 and xs[-1] / max(xs[0], 1) >= 8  # 32, 128, 512: even steps
        ys = [y for s in self.series for y in s.ys(key) if y is not None and y > 0]
        log_y = bool(ys) and max(ys) / min(ys) >= 30  # series of very different speeds
        w.setLogMode(x=log_x, y=log_y)
        for i, s in enumerate(self.series):
            self._draw_series(w, s, key, COLORS[i % len(COLORS)], (log_x, log_y))
        w.enableAutoRange()

    def _draw_series(self, w: pg.PlotWidget, s: SweepSeries, key: str, color: str, logs: tuple):
        """A series' line (pyqtgraph maps it to log axes itself), its hover points and
        interval whiskers (placed in the axes' own, maybe log, coordinates)."""
        pts = [p for p in s.points if (p.value(key) or 0) > 0]
        if not pts:
            return
        x_of, y_of = ((lambda v: math.log10(v)) if log else float for log in logs)
        xs = [x_of(p.prompt_tokens) for p in pts]
        raw = [p.value(key) for p in pts]
        ys = [y_of(y) for y in raw]
        style = {"style": Qt.PenStyle.DashLine} if s.label.endswith("· original") else {}
        w.plot(
            [p.prompt_tokens for p in pts],
            raw,
            pen=pg.mkPen(color, width=2, **style),
            symbol="o",
            symbolBrush=color,
            symbolSize=7,
            name=s.label,
        )
        spots = [
            {"pos": (x, y), "data": f"{s.label}\nprompt {p.prompt_tokens}: {_tip(p, key)}"}
            for x, y, p in zip(xs, ys, pts, strict=True)
        ]
        w.addItem(
            pg.ScatterPlotItem(
                spots=spots,
                size=11,
                brush=pg.mkBrush(0, 0, 0, 0),
                pen=pg.mkPen(None),
                hoverable=True,
                tip=lambda x, y, data: data,
            )
        )
        intervals = [p.interval(key) for p in pts]
        if any(intervals):
            iv_ = [(y_of(max(iv[0], 1e-9)), y_of(iv[1])) if iv else None for iv in intervals]
            tops = [(iv[1] - y) if iv else 0.0 for iv, y in zip(iv_, ys, strict=True)]
            bottoms = [(y - iv[0]) if iv else 0.0 for iv, y in zip(iv_, ys, strict=True)]
            bars = pg.ErrorBarItem(
                x=np.array(xs), y=np.array(ys), top=np.array(tops), bottom=np.array(bottoms),
                beam=0.0, pen=pg.mkPen(color, width=1),
            )  # fmt: skip
            w.addItem(bars)


def _breakable(text: str) -> str:
    """HTML of ``text`` that may wrap inside long names (a model file path, a factory)."""
    out = html.escape(text)
    for ch in ("/", ":", ".", "_"):
        out = out.replace(ch, ch + "\u200b")
    return out


def _tip(p: Any, key: str) -> str:
    from studio.generation_columns import with_interval

    unit = "tokens/s" if key == "tokens_per_s" else "ms"
    return f"{with_interval(p.values, key, 1)} {unit} (run {p.run_id[:8]})"


# History's Generation tab reads at most this many runs of the list (newest first).
HISTORY_RUNS = 200


def history_details(repo: Any, selected: list[str], run_filter: Any) -> tuple[list[Any], str]:
    """The runs History's Generation tab charts: the selected runs, else those the filters
    list (newest first, at most HISTORY_RUNS); and a line saying which."""
    if selected:
        ids, which = selected, f"the {len(selected)} selected runs"
    else:
        runs = repo.list_runs(run_filter, limit=HISTORY_RUNS, offset=0)
        ids, which = [r.id for r in runs], "the runs the filters list (select runs to narrow)"
    details = []
    for run_id in ids:
        try:
            details.append(repo.get_run(run_id))
        except Exception:  # a run deleted meanwhile: leave it out
            continue
    return details, which
