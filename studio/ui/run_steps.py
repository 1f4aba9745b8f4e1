"""The Runs panel's per-step table: the original and each finished step of a run, with
timing, size, parity verdict (coloured) and the generation columns."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHeaderView, QTableWidget, QTableWidgetItem

from accel.events import StepFinished
from studio.fmt import is_noisy
from studio.generation_columns import PANEL_HEADERS, panel_cells
from studio.report import worst_metric
from studio.tables import (
    RUN_STEP_HEADERS,
    SPEEDUP_HEADER,
    event_parity_passed,
    run_step_cells,
    step_verdict,
    timing_note,
)

# Columns of the step table (studio.tables.RUN_STEP_HEADERS) that get a colour or alignment.
PARITY_COL = RUN_STEP_HEADERS.index("parity")
SPEEDUP_COL = RUN_STEP_HEADERS.index(SPEEDUP_HEADER)
NUMBER_COLS = {
    i for i, h in enumerate(RUN_STEP_HEADERS) if h not in ("#", "step", "parity", "worst metric")
}


def make_step_table() -> QTableWidget:
    """The Runs panel's per-step table (object name stepTable)."""
    headers = [*RUN_STEP_HEADERS, *PANEL_HEADERS]  # generation: TTFT, TPOT, tokens/s
    table = QTableWidget(0, len(headers))
    table.setObjectName("stepTable")
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.horizontalHeader().setSectionResizeMode(
        RUN_STEP_HEADERS.index("worst metric"), QHeaderView.ResizeMode.Stretch
    )
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    return table


def step_rows(e: Any) -> tuple[list[list[Any]], dict[int, str]]:
    """The table rows of run entry ``e`` (the original, then each step) and, by row, why a
    speedup is noisy."""
    rows: list[list[Any]] = []  # cell text, or (text, tooltip) for generation cells
    noisy: dict[int, str] = {}  # row -> why its speedup is not to be relied on
    if e is not None:
        b = e.baseline
        if b or e.baseline_timing is not None:
            rows.append(
                run_step_cells(
                    0,
                    "original",
                    e.baseline_timing,
                    b.get("size_bytes"),
                    "reference",
                    "",
                    b.get("accuracy"),
                )
                + panel_cells(b, original=True)
            )
        for ev in e.steps:
            m = ev.metrics or {}
            if is_noisy(ev.timing):
                noisy[len(rows)] = noise_reason(ev)
            rows.append(
                run_step_cells(
                    ev.index + 1,
                    ev.pass_name,
                    ev.timing,
                    m.get("size_bytes"),
                    verdict(ev),
                    worst_metric(ev.parity or {}, ", ") or (ev.error or ""),
                    m.get("accuracy"),
                )
                + panel_cells(m)
            )
    return rows, noisy


def fill_step_table(table: QTableWidget, e: Any) -> None:
    """Show run entry ``e``'s rows (none for None) with their colours and tooltips."""
    rows, noisy = step_rows(e)
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            text, tip = cell if isinstance(cell, tuple) else (cell, "")
            it = QTableWidgetItem(text)
            if tip:
                it.setToolTip(tip)
            if c == PARITY_COL:
                it.setForeground(
                    color_brush(
                        {"pass": "#2e9d4a", "FAIL": "#d03030", "error": "#d03030"}.get(
                            text, "#888888"
                        )
                    )
                )
            if c in NUMBER_COLS or c >= len(RUN_STEP_HEADERS):
                it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if c == SPEEDUP_COL and r in noisy:
                it.setForeground(color_brush("#d08020"))
                it.setToolTip(f"noisy timing: {noisy[r]}")
            elif c == SPEEDUP_COL and r > 0:
                it.setToolTip("median speedup [95% interval] over alternating rounds")
            table.setItem(r, c, it)
    table.resizeColumnsToContents()


def color_brush(hex_: str):
    from PySide6.QtGui import QBrush, QColor

    return QBrush(QColor(hex_))


def noise_reason(ev: StepFinished) -> str:
    return timing_note(ev.timing) or "timed while the machine was busy"


def verdict(ev: StepFinished) -> str:
    return step_verdict(ev.status, event_parity_passed(ev.parity), ev.index)
