"""Compare lines steps up by pass; History shows latency and speedup and sorts them as
numbers; plots follow the light/dark palette. Stored runs only (in the flat form runs had
before the typed timing: still readable), no worker runs here."""

from __future__ import annotations

import math

import pyqtgraph as pg
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QTableWidget

from studio.store import Repository


def _step(index, name, latency, speed=None, interval=True):
    speed = speed if speed is not None else 10.0 / latency
    m = {"latency_p50_ms": latency, "speedup": speed}
    if interval:
        m.update(speedup_low=speed * 0.95, speedup_high=speed * 1.05)
    return {
        "event": "step_finished",
        "index": index,
        "pass_name": name,
        "status": "succeeded",
        "duration_s": 0.1,
        "metrics": m,
        "parity": {"passed": True, "outputs": [{"name": "y", "max_abs": 1e-4, "passed": True}]},
        "artifacts": [],
    }


def _store(db, runs):
    repo = Repository.open(db)
    ids = []
    for name, steps in runs:
        r = repo.create_run(model_source="zoo:mlp", recipe={"name": name})
        repo.record_event(
            r.id,
            {
                "event": "run_started",
                "run_dir": "",
                "model_source": "zoo:mlp",
                "model_kind": "torch",
                "device": "cpu",
                "recipe": {"name": name},
                "environment": {"threads": 2},
                "num_steps": len(steps),
                "baseline": {"latency_p50_ms": 10.0},
            },
        )
        for st in steps:
            repo.record_event(r.id, st)
        last = steps[-1]["metrics"]
        summary = {
            "final_speedup": last["speedup"],
            "final_speedup_low": last.get("speedup_low"),
            "final_speedup_high": last.get("speedup_high"),
            "final_latency_p50_ms": last["latency_p50_ms"],
        }
        repo.record_event(
            r.id,
            {"event": "run_finished", "status": "succeeded", "duration_s": 1, "summary": summary},
        )
        ids.append(r.id)
    return repo, ids


@pytest.fixture
def two_recipes(tmp_path):
    # A: fold_batchnorm → export_onnx → onnxruntime; B: export_onnx → quantize_onnx_dynamic.
    repo, ids = _store(
        tmp_path / "c.db",
        [
            (
                "a",
                [
                    _step(0, "fold_batchnorm", 9.0),
                    _step(1, "export_onnx", 8.0),
                    _step(2, "onnxruntime", 5.0),
                ],
            ),
            ("b", [_step(0, "export_onnx", 7.0), _step(1, "quantize_onnx_dynamic", 3.0)]),
        ],
    )
    yield repo, ids
    repo.close()


def _series(plot: pg.PlotWidget) -> list[tuple[list[float], list[float]]]:
    out = []
    for item in plot.getPlotItem().listDataItems():
        if item.name() is None:  # the dotted line drawn across a run's gaps
            continue
        xs, ys = item.xData, item.yData
        out.append(([float(x) for x in xs], [float(y) for y in ys]))
    return out


def test_compare_lines_up_recipes_of_different_lengths_by_pass(qtbot, two_recipes):
    from studio.ui.compare_view import CompareView

    repo, ids = two_recipes
    view = CompareView(repo, ids)
    qtbot.addWidget(view)
    chart = view.findChild(pg.PlotWidget, "latencyChart")
    ticks = dict(chart.getAxis("bottom")._tickLevels[0])
    assert all(float(x).is_integer() for x in ticks)
    names = {label.split(". ", 1)[-1]: x for x, label in ticks.items()}
    # One slot per pass: B's export_onnx shares A's slot, B's quantize step gets its own.
    assert set(names) == {
        "original",
        "fold_batchnorm",
        "export_onnx",
        "onnxruntime",
        "quantize_onnx_dynamic",
    }
    assert not any("/" in label for label in ticks.values())
    (ax, ay), (bx, by) = _series(chart)

    def at(xs, ys, slot):
        i = min(range(len(xs)), key=lambda k: abs(xs[k] - slot))
        assert abs(xs[i] - slot) < 0.3
        return ys[i]

    assert at(ax, ay, names["export_onnx"]) == 8.0
    assert at(bx, by, names["export_onnx"]) == 7.0  # not at fold_batchnorm's place
    assert math.isnan(at(bx, by, names["fold_batchnorm"]))  # a gap, not a shift
    assert math.isnan(at(bx, by, names["onnxruntime"]))
    assert at(bx, by, names["quantize_onnx_dynamic"]) == 3.0
    assert math.isnan(at(ax, ay, names["quantize_onnx_dynamic"]))
    # B's line has a gap at fold_batchnorm: a faint dotted line (no legend entry) bridges it.
    dotted = [i for i in chart.getPlotItem().listDataItems() if i.name() is None]
    assert len(dotted) == 1 and list(dotted[0].yData) == [10.0, 7.0, 3.0]
    # The metrics table has one row per pass slot with both runs' export_onnx side by side.
    table = view.findChild(QTableWidget, "compareTable")
    rows = {table.verticalHeaderItem(i).text(): i for i in range(table.rowCount())}
    row = next(i for label, i in rows.items() if "export_onnx · p50 ms" in label)
    assert [table.item(row, j).text() for j in range(2)] == ["8.000", "7.000"]
    row = next(i for label, i in rows.items() if "fold_batchnorm · p50 ms" in label)
    assert table.item(row, 1).text() == "-"
    assert not any("e+" in table.item(i, j).text() for i in range(table.rowCount()) for j in (0, 1))


def test_history_shows_latency_and_speedup_and_sorts_numbers(qtbot, tmp_path):
    from studio.ui.history_view import RunTableModel

    repo, _ = _store(
        tmp_path / "h.db",
        [
            ("slow", [_step(0, "export_onnx", 9.0)]),
            ("fast", [_step(0, "export_onnx", 2.0)]),
            ("old", [_step(0, "export_onnx", 10.5, interval=False)]),  # recorded without one
        ],
    )
    model = RunTableModel(repo)
    model.reload(None)
    lat, spd = model.COLUMNS.index("p50 ms"), model.COLUMNS.index("speedup [95% CI]")
    recipe = model.COLUMNS.index("recipe")

    def column(c):
        return [model.data(model.index(r, c)) for r in range(model.rowCount())]

    model.sort(lat, Qt.SortOrder.AscendingOrder)
    assert column(recipe) == ["fast", "slow", "old"]  # 2 < 9 < 10.5 (as text: "10.5" < "2")
    assert column(lat) == ["2.000", "9.000", "10.5"]
    assert column(spd)[0] == "5.00x [4.75-5.25]"
    assert column(spd)[2] == "0.95x"  # no interval stored: the value alone
    model.sort(spd, Qt.SortOrder.DescendingOrder)
    assert column(recipe) == ["fast", "slow", "old"]
    repo.close()


def _is_dark(color) -> bool:
    return color.lightness() < 128


def test_plots_follow_the_palette(qtbot, two_recipes):
    from studio.ui import theme
    from studio.ui.compare_view import CompareView

    repo, ids = two_recipes
    view = CompareView(repo, ids)
    qtbot.addWidget(view)
    plots = view.findChildren(pg.PlotWidget)
    assert len(plots) == 2
    try:
        for key, dark in (("dark", True), ("light", False), ("dark", True)):
            assert theme.apply(key) == key
            QApplication.processEvents()
            for w in plots:
                bg = w.backgroundBrush().color()
                axis = w.getAxis("bottom")
                assert _is_dark(bg) is dark, (key, bg.name())
                assert _is_dark(axis.textPen().color()) is not dark
                assert _is_dark(axis.label.defaultTextColor()) is not dark
    finally:
        theme.apply("light")
        QApplication.processEvents()


def test_optimize_dialog_scatter_follows_the_palette(qtbot, tmp_path):
    from studio.services import Services
    from studio.state import AppState
    from studio.ui import theme
    from studio.ui.optimize_dialog import OptimizeDialog

    state = AppState()
    services = Services(state, db=str(tmp_path / "studio.db"), cpu_workers=1)
    state.set_model("zoo:mlp", {"kind": "torch", "input_spec": "x:float32[batch,1024]"})
    dlg = OptimizeDialog(state, services)
    qtbot.addWidget(dlg)
    try:
        for key, dark in (("dark", True), ("light", False)):
            theme.apply(key)
            QApplication.processEvents()
            assert _is_dark(dlg.plot.backgroundBrush().color()) is dark
            assert _is_dark(dlg.plot.getAxis("left").textPen().color()) is not dark
    finally:
        theme.apply("light")
        QApplication.processEvents()
        services.shutdown()
