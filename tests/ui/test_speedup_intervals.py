"""Speedup intervals in the panels: the Runs table, the History list and the Compare dialog
(error bars, whiskers, colours per run, a tie instead of a winner when intervals overlap)
show the same figures as the CLI for the same stored runs. No worker runs here."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QObject, Signal

from studio.cli import main
from studio.store import Repository
from tests.timing_rows import REASON, finished_event, row_agrees, started_event, step_event


def _step(index, name, speed, low, high, noisy=False, max_abs=1e-3):
    return step_event(index, name, speed, low, high, noisy=noisy, max_abs=max_abs)


def _store(db, runs):
    repo = Repository.open(db)
    ids = []
    for steps in runs:
        r = repo.create_run(model_source="zoo:mlp", recipe={"name": "r"})
        for ev in (started_event(len(steps)), *steps, finished_event(steps)):
            repo.record_event(r.id, ev)
        ids.append(r.id)
    return repo, ids


@pytest.fixture
def stored(tmp_path):
    db = tmp_path / "s.db"
    repo, ids = _store(
        db,
        [
            [
                _step(0, "fold_batchnorm", 1.2, 1.15, 1.25),
                _step(1, "export_onnx", 2.31, 2.25, 2.38),
            ],
            [_step(0, "fold_batchnorm", 1.1, 1.0, 1.2), _step(1, "export_onnx", 2.36, 2.30, 2.41)],
            [_step(0, "fold_batchnorm", 1.0, 0.5, 1.6, noisy=True)],
        ],
    )
    yield db, repo, ids
    repo.close()


def test_compare_dialog_draws_intervals_and_calls_a_tie(qapp, stored, capsys):
    import pyqtgraph as pg

    from studio.ui.compare_view import CompareView

    db, repo, ids = stored
    view = CompareView(repo, ids[:2])
    # Pareto: the two export_onnx points' intervals overlap -> a tie, not a winner.
    assert len(view.fastest) == 2 and "tie for fastest" in view.verdict
    assert {p.split(" · ")[1] for p in view.fastest} == {"2. export_onnx"}
    pareto = view.findChild(pg.PlotWidget, "paretoChart")
    items = pareto.getPlotItem().items
    scatters = [i for i in items if isinstance(i, pg.ScatterPlotItem)]
    whiskers = [i for i in items if isinstance(i, pg.ErrorBarItem)]
    assert len(whiskers) == 2  # one per run, coloured like its points
    legend = pareto.getPlotItem().legend
    names = [label.text for _, label in legend.items]
    assert any(ids[0][:8] in n for n in names) and any(ids[1][:8] in n for n in names)
    assert len({s.opts["brush"].color().name() for s in scatters if s.name()}) == 2
    # Latency chart: error bars and step names on the axis, not indices.
    lat = view.findChild(pg.PlotWidget, "latencyChart")
    assert [i for i in lat.getPlotItem().items if isinstance(i, pg.ErrorBarItem)]
    ticks = dict(lat.getAxis("bottom")._tickLevels[0])
    assert ticks[0] == "original" and ticks[2] == "2. export_onnx"
    # Log scale: points and intervals in log10, drawn again on a toggle, and back.
    from PySide6.QtWidgets import QCheckBox

    def first_line_and_bars():
        items = lat.getPlotItem().items
        line = next(i for i in items if isinstance(i, pg.PlotDataItem))
        bars = next(i for i in items if isinstance(i, pg.ErrorBarItem))
        return list(line.yData), bars.opts

    linear, linear_bars = first_line_and_bars()
    view.findChild(QCheckBox, "latencyLogScale").setChecked(True)
    logged, log_bars = first_line_and_bars()
    assert lat.getAxis("left").logMode is True  # the left axis keeps its y flag
    assert logged == pytest.approx([np.log10(v) for v in linear], nan_ok=True)
    top = linear_bars["y"] + linear_bars["top"]
    assert log_bars["y"] + log_bars["top"] == pytest.approx(np.log10(top))
    assert len([i for i in lat.getPlotItem().items if isinstance(i, pg.ErrorBarItem)]) == 2
    view.findChild(QCheckBox, "latencyLogScale").setChecked(False)
    assert first_line_and_bars()[0] == pytest.approx(linear, nan_ok=True)
    # The metrics table shows the same interval text as `studio compare`.
    table = view.findChild(type(view._metrics_table()), "compareTable")
    cells = {
        table.item(r, c).text() for r in range(table.rowCount()) for c in range(table.columnCount())
    }
    assert "2.31x [2.25-2.38]" in cells and "2.36x [2.30-2.41]" in cells
    assert main(["--db", str(db), "compare", ids[0], ids[1]]) == 0
    out = capsys.readouterr().out
    assert "2.31x [2.25-2.38] =" in out and "2.36x [2.30-2.41] =" in out
    view.close()


def test_compare_crowns_a_winner_only_when_intervals_are_apart(qapp, tmp_path):
    from studio.ui.compare_view import CompareView

    repo, ids = _store(
        tmp_path / "w.db",
        [[_step(0, "export_onnx", 2.0, 1.9, 2.1)], [_step(0, "export_onnx", 3.0, 2.9, 3.1)]],
    )
    view = CompareView(repo, ids)
    assert view.verdict == f"fastest: {ids[1][:8]} · 1. export_onnx"
    view.close()
    repo.close()


def test_history_list_and_cli_show_the_same_interval(qapp, stored, capsys):
    from studio.ui.history_view import RunTableModel

    db, repo, ids = stored
    model = RunTableModel(repo)
    model.reload(None)
    col = model.COLUMNS.index("speedup [95% CI]")
    texts = {model.data(model.index(r, col)) for r in range(model.rowCount())}
    assert texts == {"2.31x [2.25-2.38]", "2.36x [2.30-2.41]", "1.00x [0.50-1.60]~"}
    noisy_row = next(
        r for r in range(model.rowCount()) if model.data(model.index(r, col)).endswith("~")
    )
    assert REASON in model.data(model.index(noisy_row, col), 3)  # 3: tooltip role
    # the last step's latency beside it (10 ms original / 2.31x) and the original's from the
    # same comparison: each row agrees with its own speedup
    lat, ref = model.COLUMNS.index("p50 ms"), model.COLUMNS.index("ref p50 ms")
    texts = {model.data(model.index(r, lat)) for r in range(model.rowCount())}
    assert texts == {"4.329", "4.237", "10.0"}
    for r in range(model.rowCount()):
        cells = [model.data(model.index(r, c)) for c in (ref, lat, col)]
        lo, hi = (float(x) for x in cells[2].split("[")[1].split("]")[0].split("-"))
        assert row_agrees(float(cells[0]), float(cells[1]), lo, hi), cells
    assert main(["--db", str(db), "show", ids[0]]) == 0
    assert "2.31x [2.25-2.38]" in capsys.readouterr().out


class _Bridge(QObject):
    jobQueued = Signal(str, str)
    jobStarted = Signal(str, str)
    jobEvent = Signal(str, object)
    jobLog = Signal(str, object)
    jobFinished = Signal(str, object)


class _Services(QObject):
    runQueued = Signal(str, str)

    def __init__(self):
        super().__init__()
        self.bridge = _Bridge()


def test_runs_panel_shows_interval_and_noise(qapp):
    from studio.state import AppState
    from studio.ui.runs_view import RunsView

    services = _Services()
    view = RunsView(AppState(), services)
    services.bridge.jobStarted.emit("j1", "run_recipe")
    services.bridge.jobEvent.emit("j1", started_event(2))  # as the worker sends it
    services.bridge.jobEvent.emit("j1", _step(0, "export_onnx", 2.31, 2.25, 2.38))
    services.bridge.jobEvent.emit("j1", _step(1, "onnxruntime", 1.0, 0.5, 1.6, noisy=True))
    services.bridge.jobEvent.emit(
        "j1",
        {
            "event": "run_finished",
            "status": "succeeded",
            "duration_s": 1.0,
            "summary": {"noise": f"1 of 2: {REASON}"},
        },
    )
    view._show_selected()
    t = view.table
    headers = [t.horizontalHeaderItem(c).text() for c in range(t.columnCount())]
    ref, p50, spd = (headers.index(h) for h in ("ref p50 ms", "p50 ms", "speedup [95% CI]"))
    assert t.item(0, spd).text() == "1.00x" and t.item(0, ref).text() == "10.0"
    assert t.item(1, spd).text() == "2.31x [2.25-2.38]"
    assert t.item(2, spd).text() == "1.00x [0.50-1.60]~"
    assert REASON in t.item(2, spd).toolTip()
    for r in (1, 2):  # each step row: both p50s from the comparison behind its speedup
        lo, hi = (
            float(x) for x in t.item(r, spd).text().split("[")[1][:9].split("]")[0].split("-")
        )
        assert row_agrees(float(t.item(r, ref).text()), float(t.item(r, p50).text()), lo, hi)
    log = view.log.toPlainText()
    assert "speedup 2.31x [2.25-2.38]" in log and f"noisy timing: 1 of 2: {REASON}" in log
    view.close()


def test_compare_aligns_steps_by_pass_not_by_position(qapp, tmp_path):
    """A 3-step and a 2-step recipe: export_onnx is step 3 in one and step 2 in the other; it
    gets one row and one x position, and the recipe without channels_last leaves a gap."""
    from studio.ui.compare_view import CompareView

    repo, ids = _store(
        tmp_path / "a.db",
        [
            [
                _step(0, "fold_batchnorm", 1.1, 1.0, 1.2),
                _step(1, "channels_last", 1.3, 1.2, 1.4),
                _step(2, "export_onnx", 2.0, 1.9, 2.1),
            ],
            [_step(0, "fold_batchnorm", 1.1, 1.0, 1.2), _step(1, "export_onnx", 2.2, 2.1, 2.3)],
        ],
    )
    try:
        cmp = repo.compare(ids)
        assert cmp.slots == ["fold_batchnorm", "channels_last", "export_onnx"]
        speed = {k: [t.speedup if t else None for t in v] for k, v in cmp.timings.items()}
        assert speed[(2, "export_onnx")] == [2.0, 2.2]
        assert speed[(1, "channels_last")] == [1.3, None]
        assert not any(k[0] == 1 and k[1] == "export_onnx" for k in cmp.timings)
        view = CompareView(repo, ids)
        table = view.findChild(type(view._metrics_table()), "compareTable")
        labels = [table.verticalHeaderItem(i).text() for i in range(table.rowCount())]
        # each run's own step number (issue 28, 9): step 3 of one, step 2 of the other
        assert "3 | 2. export_onnx · speedup [95% CI]" in labels
        assert not any(lab.startswith("2. export_onnx") for lab in labels)
        chart = view.findChild(type(view._latency_chart()), "latencyChart")
        ticks = chart.getAxis("bottom")._tickLevels[0]
        assert [t[1] for t in ticks] == [
            "original",
            "1. fold_batchnorm",
            "2 | –. channels_last",
            "3 | 2. export_onnx",
        ]
        view.close()
    finally:
        repo.close()


def test_align_passes_keeps_repeats_apart_and_order():
    from studio.store.records import align_passes

    slots, places = align_passes([["a", "b", "a"], ["b", "a", "c"], ["x"], ["c", "b"]])
    assert slots == ["a", "b", "a", "c", "x"]
    assert places == [[0, 1, 2], [1, 0, 3], [4], [3, 1]]
    # a recipe with a step the first one lacks: the new step goes where it belongs
    assert align_passes([["f", "e"], ["f", "cl", "e"]]) == (["f", "cl", "e"], [[0, 2], [0, 1, 2]])
