"""The Optimize dialog's live results: the table of every trial and the scatter of the
finished ones (speedup against parity error, the speedup's range over the timing rounds as
whiskers, the Pareto front in a second colour)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyqtgraph as pg
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from studio.fmt import fmt_bytes
from studio.tables import TIMING_HEADERS, speedup_cell, timing_cells, trial_note

COLUMNS = ["#", "chain", "status", *TIMING_HEADERS, "cos drop", "size", "reused", "note"]
NOTE_COL = COLUMNS.index("note")


class TrialTable(QTableWidget):
    """One row per trial, keyed by the trial's number in the first column."""

    def __init__(self) -> None:
        super().__init__(0, len(COLUMNS))
        self.setHorizontalHeaderLabels(COLUMNS)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().setVisible(False)
        self.setWordWrap(False)
        self.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)

    def put(self, t: Any) -> None:
        """Show trial ``t`` in its row (a new row for a new trial)."""
        row = next(
            (r for r in range(self.rowCount()) if self.item(r, 0).text() == str(t.number)),
            None,
        )
        if row is None:
            row = self.rowCount()
            self.insertRow(row)
        m = t.metrics
        drop = m.get("cosine_drop")
        # The original's and the trial's p50 and the speedup, from the trial's one comparison.
        timing = timing_cells(t.timing) if t.timing is not None else ["", "", ""]
        cells = [
            str(t.number),
            t.label,
            t.status,
            *timing,
            "" if drop is None else f"{drop:.2e}",
            fmt_bytes(m["size_bytes"]) if m.get("size_bytes") else "",
            str(t.reused_steps or ""),
            trial_note(t)[:120],
        ]
        for col, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if col == NOTE_COL and text:
                item.setToolTip(trial_note(t))
            self.setItem(row, col, item)

    def selected_trial(self) -> int | None:
        rows = self.selectionModel().selectedRows() if self.selectionModel() else []
        if not rows:
            return None
        item = self.item(rows[0].row(), 0)
        return int(item.text()) if item is not None else None

    def select_trial(self, number: int) -> None:
        for row in range(self.rowCount()):
            item = self.item(row, 0)
            if item is not None and int(item.text()) == number:
                self.selectRow(row)
                return


class TrialPlot(pg.PlotWidget):
    """Speedup against cosine drop; a click on a point calls ``on_pick(trial number)``."""

    def __init__(self, on_pick: Callable[[int], None]) -> None:
        super().__init__()
        self.setLabel("bottom", "speedup vs original (x)")
        self.setLabel("left", "cosine drop")
        self.showGrid(x=True, y=True, alpha=0.3)
        self.scatter = pg.ScatterPlotItem(size=10, hoverable=True)
        self.front_scatter = pg.ScatterPlotItem(
            size=13, brush=pg.mkBrush(230, 120, 30), symbol="star"
        )
        self.whiskers = pg.ErrorBarItem(beam=0.0, pen=pg.mkPen(120, 120, 120))
        self.addItem(self.whiskers)
        self.addItem(self.scatter)
        self.addItem(self.front_scatter)
        self._on_pick = on_pick
        self.scatter.sigClicked.connect(self._on_point_clicked)
        self.front_scatter.sigClicked.connect(self._on_point_clicked)
        self._trials: dict[int, Any] = {}
        self._front: set[int] = set()

    def show_points(
        self, pts: list[tuple[int, float, float]], trials: dict[int, Any], front: set[int]
    ) -> None:
        """Plot ``pts`` (trial, speedup, cosine drop); those in ``front`` as stars."""
        self._trials, self._front = trials, front
        normal = [p for p in pts if p[0] not in front]
        on_front = [p for p in pts if p[0] in front]
        self.scatter.setData(
            [{"pos": (s, d), "data": n} for n, s, d in normal],
            brush=pg.mkBrush(70, 130, 200),
            hoverable=True,
            tip=self.point_tip,
        )
        self.front_scatter.setData(
            [{"pos": (s, d), "data": n} for n, s, d in on_front], hoverable=True, tip=self.point_tip
        )
        self._show_whiskers(pts)

    def _show_whiskers(self, pts: list[tuple[int, float, float]]) -> None:
        lows, highs, xs, ys = [], [], [], []
        for n, s, d in pts:
            timing = self._trials[n].timing
            if timing is not None and timing.speedup_bounds is not None:
                lo, hi = timing.speedup_bounds
                xs.append(s)
                ys.append(d)
                lows.append(s - lo)
                highs.append(hi - s)
        if xs:
            import numpy as np

            self.whiskers.setData(
                x=np.array(xs), y=np.array(ys), left=np.array(lows), right=np.array(highs)
            )
            self.whiskers.setVisible(True)
        else:
            self.whiskers.setVisible(False)

    def point_tip(self, x: float, y: float, data: Any) -> str:
        """The hover label of a plotted trial: its number, chain, speedup and parity."""
        t = self._trials.get(int(data))
        chain = t.label if t is not None else "?"
        speed = speedup_cell(t.timing) if t is not None and t.timing else f"{x:.2f}×"
        front = " · on the Pareto front" if int(data) in self._front else ""
        return f"trial {int(data)}: {chain}\nspeedup {speed}, cosine drop {y:.2g}{front}"

    def _on_point_clicked(self, _item: Any, points: Any, *_: Any) -> None:
        if len(points):
            self._on_pick(int(points[0].data()))
