"""A run's stored serve test shows beside it in History: the batch sweep chart and the served
load table; a run without one shows nothing. No server runs here (the store holds a result)."""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, QObject, Signal

from studio.store.serve_tests import add_serve_test

REPORT = {
    "sweep": [
        {"batch": 1, "latency_ms": 0.4, "throughput": 2500.0},
        {"batch": 4, "latency_ms": 0.6, "throughput": 6600.0},
        {"batch": 8, "latency_ms": 0.8, "throughput": 10000.0},
    ],
    "preferred_batch_sizes": [4, 8],
    "max_queue_delay_us": 200,
    "max_batch_size": 8,
    "direct_p50_ms": 0.4,
    "load": [
        {"mode": "no batching", "clients": 16, "requests": 100, "errors": 0,
         "p50_ms": 20.0, "p99_ms": 50.0, "throughput": 80.0, "avg_batch": 1.0},
        {"mode": "dynamic batching", "clients": 16, "requests": 400, "errors": 0,
         "p50_ms": 15.0, "p99_ms": 30.0, "throughput": 200.0, "avg_batch": 6.5},
    ],
}  # fmt: skip


class _State(QObject):
    runsChanged = Signal()


class _Services:
    def __init__(self, repo):
        self.repo = repo


def _select(view, row):
    sm = view.table.selectionModel()
    sm.clearSelection()
    sm.select(
        view.model.index(row, 0),
        QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
    )


def test_history_shows_the_selected_runs_serve_test(qapp, tmp_path):
    from studio.store import Repository
    from studio.ui.history_view import HistoryView

    repo = Repository.open(tmp_path / "s.db")
    served = repo.create_run(model_source="zoo:mlp", recipe={"name": "served"})
    plain = repo.create_run(model_source="zoo:mlp", recipe={"name": "plain"})
    add_serve_test(repo, served.id, REPORT, {"kind": "onnx", "path": "/m.onnx"})
    view = HistoryView(_State(), _Services(repo))
    try:
        rows = {view.model.rows[i].id: i for i in range(view.model.rowCount())}
        _select(view, rows[served.id])
        sv = view.serve_view
        assert not sv.isHidden()
        assert "preferred [4, 8]" in sv.title.text() and "2.50x" in sv.title.text()
        items = sv.chart.getPlotItem().listDataItems()
        assert list(items[0].getData()[0]) == [0, 2, 3]  # log2 of the batch sizes 1, 4, 8
        ticks = sv.chart.getAxis("bottom")._tickLevels[0]
        assert [label for _, label in ticks] == ["1", "4", "8"]
        assert list(items[0].getData()[1]) == [2500.0, 6600.0, 10000.0]
        cells = [
            [sv.table.item(r, c).text() for c in range(sv.table.columnCount())]
            for r in range(sv.table.rowCount())
        ]
        # one row per client count, without / with dynamic batching side by side
        assert cells == [
            ["16", "80.0", "200.0", "2.50x", "20.0 / 50.0", "15.0 / 30.0", "6.50", "0"]
        ]
        assert "batches the dynamic batcher formed" in sv.table.horizontalHeaderItem(6).toolTip()
        # the chart follows the theme, also after it was drawn
        from PySide6.QtWidgets import QApplication

        from studio.ui import theme

        try:
            for key, dark in (("dark", True), ("light", False)):
                theme.apply(key)
                QApplication.processEvents()
                assert (sv.chart.backgroundBrush().color().lightness() < 128) is dark, key
        finally:
            theme.apply("light")
            QApplication.processEvents()
        _select(view, rows[plain.id])
        assert sv.isHidden()
    finally:
        view.close()
        repo.close()


def test_serve_results_stack_and_keep_numbers_whole_in_a_narrow_dock(qtbot, tmp_path):
    """A History dock at the window's side: the table goes under the chart and its columns
    keep their contents' width (the table scrolls sideways) instead of cutting the numbers."""
    from PySide6.QtWidgets import QBoxLayout

    from studio.store import Repository
    from studio.ui.serve_results import ServeResultsView

    repo = Repository.open(tmp_path / "n.db")
    run = repo.create_run(model_source="zoo:mlp", recipe={"name": "served"})
    add_serve_test(repo, run.id, REPORT, {"kind": "onnx", "path": "/m.onnx"})
    view = ServeResultsView(repo)
    qtbot.addWidget(view)
    view.show_run(run.id)
    view.resize(480, 420)
    view.show()
    qtbot.waitUntil(lambda: view.row.direction() == QBoxLayout.Direction.TopToBottom)
    table = view.table
    for j in range(table.columnCount()):
        assert table.columnWidth(j) >= table.sizeHintForColumn(j)
    view.resize(1300, 300)
    qtbot.waitUntil(lambda: view.row.direction() == QBoxLayout.Direction.LeftToRight)
    repo.close()


GEN_REPORT = {
    "workload": "generate",
    "prompt_tokens": 32,
    "new_tokens": 16,
    "load": [
        {"mode": "no continuous batching", "clients": 4, "requests": 8, "errors": 0,
         "tokens": 128, "tokens_per_s": 100.0, "ttft_p50_ms": 20.0, "ttft_p99_ms": 90.0,
         "tpot_p50_ms": 9.0},
        {"mode": "continuous batching", "clients": 4, "requests": 8, "errors": 2,
         "tokens": 128, "tokens_per_s": 250.0, "ttft_p50_ms": 12.0, "ttft_p99_ms": 30.0,
         "tpot_p50_ms": None},
    ],
}  # fmt: skip


def test_a_generation_serve_test_shows_tokens_per_s_and_ttft_without_a_sweep(qtbot, tmp_path):
    """A generation run's serve test: no sweep chart; per client count tokens/s, TTFT and TPOT
    without / with continuous batching. An infer test shown after it gets its columns back."""
    from studio.store import Repository
    from studio.ui.serve_results import GENERATION_COLUMNS, LOAD_COLUMNS, ServeResultsView

    repo = Repository.open(tmp_path / "g.db")
    gen = repo.create_run(model_source="hf:llama_small", recipe={"name": "gen"})
    fwd = repo.create_run(model_source="zoo:mlp", recipe={"name": "fwd"})
    add_serve_test(repo, gen.id, GEN_REPORT, {"kind": "model", "path": "/m.xml"})
    add_serve_test(repo, fwd.id, REPORT, {"kind": "onnx", "path": "/m.onnx"})
    view = ServeResultsView(repo)
    qtbot.addWidget(view)
    view.show()
    view.show_run(gen.id)
    assert not view.isHidden() and view.chart.isHidden()
    assert "32 prompt tokens, 16 new tokens" in view.title.text() and "2.50x" in view.title.text()
    headers = [view.table.horizontalHeaderItem(j).text() for j in range(view.table.columnCount())]
    assert headers == [label for label, _ in GENERATION_COLUMNS]
    cells = [view.table.item(0, c).text() for c in range(view.table.columnCount())]
    assert cells == ["4", "100.0", "250.0", "2.50x", "20.0 / 90.0", "12.0 / 30.0", "9.000 / -", "2"]
    view.show_run(fwd.id)
    assert not view.chart.isHidden() and view.table.columnCount() == len(LOAD_COLUMNS)
    assert view.table.horizontalHeaderItem(6).text() == "avg batch"
    repo.close()
