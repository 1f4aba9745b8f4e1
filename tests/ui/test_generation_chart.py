"""Tokens/s and TTFT against prompt length (issue 31): the series built from stored
generation runs, History's Generation tab and Compare's tab. Stored runs only (no worker)."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtWidgets import QLabel, QTabWidget

from studio.generation_sweep import short_labels, sweep_series
from studio.store import Repository


def _figures(tps: float, ttft: float) -> dict:
    return {
        "tokens_per_s": tps,
        "tokens_per_s_low": tps * 0.9,
        "tokens_per_s_high": tps * 1.1,
        "ttft_ms": ttft,
        "ttft_ms_low": ttft * 0.9,
        "ttft_ms_high": ttft * 1.2,
    }


def _run(repo: Repository, prompt: int | None, name: str = "gen", new: int = 16) -> str:
    bench = {"workload": "generate", "new_tokens": new}
    if prompt is not None:
        bench["prompt_tokens"] = prompt
    recipe = {"name": name, "benchmark": bench}
    n = prompt or 128
    r = repo.create_run(model_source="hf:llama_small", recipe=recipe)
    started = {
        "event": "run_started",
        "run_dir": "",
        "model_source": "hf:llama_small",
        "model_kind": "torch",
        "device": "cpu",
        "recipe": recipe,
        "environment": {},
        "num_steps": 2,
        "baseline": _figures(100.0 - n / 8, 2.0 * n),
    }
    repo.record_event(r.id, started)
    for index, pass_name, tps in ((0, "bf16", 120.0), (1, "static_kv_cache", 300.0 - n / 4)):
        step = {
            "event": "step_finished",
            "index": index,
            "pass_name": pass_name,
            "status": "succeeded",
            "duration_s": 0.1,
            "metrics": {**_figures(tps, 1.5 * n), "baseline_tokens_per_s": 99.0},
            "parity": {"passed": True, "outputs": []},
            "artifacts": [],
        }
        repo.record_event(r.id, step)
    repo.record_event(
        r.id, {"event": "run_finished", "status": "succeeded", "duration_s": 1, "summary": {}}
    )
    return r.id


@pytest.fixture
def sweep(tmp_path):
    repo = Repository.open(tmp_path / "g.db")
    ids = [_run(repo, n) for n in (32, 128, 512)]
    repo.create_run(model_source="zoo:mlp", recipe={"name": "forward"})  # not generation
    yield repo, ids
    repo.close()


def test_series_per_recipe_and_model_form_points_by_prompt_length(sweep):
    repo, ids = sweep
    details = [repo.get_run(i) for i in reversed(ids)]  # newest first, as the store lists
    series = {s.label: s for s in sweep_series(details)}
    assert set(series) == {
        "gen · hf:llama_small · 16 new · original",
        "gen · hf:llama_small · 16 new · 2 static_kv_cache",  # the last step, not bf16
    }
    final = series["gen · hf:llama_small · 16 new · 2 static_kv_cache"]
    assert final.xs() == [32, 128, 512]
    assert final.ys("tokens_per_s") == [292.0, 268.0, 172.0]
    assert final.points[0].interval("ttft_ms") == pytest.approx((43.2, 57.6))
    original = series["gen · hf:llama_small · 16 new · original"]
    assert original.ys("ttft_ms") == [64.0, 256.0, 1024.0]


def test_runs_of_other_settings_or_failed_runs_make_no_points(sweep, tmp_path):
    repo, ids = sweep
    other = _run(repo, 32, new=64)  # another new-token count: its own series
    default = _run(repo, None, name="defaults")  # no prompt_tokens: the default 128
    failed = repo.create_run(model_source="hf:llama_small", recipe={"name": "gen"}).id
    details = [repo.get_run(i) for i in (other, default, failed, *ids)]
    labels = {s.label: s.xs() for s in sweep_series(details)}
    assert labels["gen · hf:llama_small · 64 new · original"] == [32]
    assert labels["defaults · hf:llama_small · 16 new · original"] == [128]
    assert len(labels) == 6
    short, shared = short_labels(sweep_series(details))
    assert shared == "hf:llama_small" and "gen · 64 new · original" in short


def _plotted(chart, key: str) -> list[tuple[list[float], list[float]]]:
    plot = chart.findChild(pg.PlotWidget, f"generationChart_{key}")
    return [
        ([float(x) for x in item.xData], [float(y) for y in item.yData])
        for item in plot.getPlotItem().listDataItems()
        if item.name()
    ]


def test_compare_has_the_prompt_length_tab_for_generation_runs(qtbot, sweep):
    from studio.ui.compare_view import CompareView
    from studio.ui.generation_chart import GenerationCharts

    repo, ids = sweep
    view = CompareView(repo, ids)
    qtbot.addWidget(view)
    tabs = view.findChild(QTabWidget)
    assert tabs.tabText(tabs.count() - 1) == "Tokens/s, TTFT vs prompt"
    chart = view.findChild(GenerationCharts)
    lines = _plotted(chart, "tokens_per_s")
    assert ([32.0, 128.0, 512.0], [292.0, 268.0, 172.0]) in lines
    assert ([32.0, 128.0, 512.0], [96.0, 84.0, 36.0]) in lines  # the original's
    assert chart.plots["tokens_per_s"].getPlotItem().ctrl.logXCheck.isChecked()  # 32..512
    legend = chart.findChild(QLabel, "generationLegend").text().replace("\u200b", "")
    assert "2 static_kv_cache" in legend and "original" in legend
    assert legend.count("hf:llama_small") == 1  # what all series share: said once, on top
    assert legend.startswith("<b>gen · hf:llama_small · 16 new</b>")


def test_compare_of_forward_runs_has_no_generation_tab(qtbot, tmp_path):
    from studio.ui.compare_view import CompareView

    repo = Repository.open(tmp_path / "f.db")
    ids = [repo.create_run(model_source="zoo:mlp", recipe={"name": n}).id for n in "ab"]
    view = CompareView(repo, ids)
    qtbot.addWidget(view)
    tabs = view.findChild(QTabWidget)
    assert "prompt" not in tabs.tabText(tabs.count() - 1)
    repo.close()


def test_history_generation_tab_charts_the_selected_runs_else_the_listed(qtbot, sweep):
    from types import SimpleNamespace

    from PySide6.QtCore import QObject, Signal

    from studio.ui.history_view import HistoryView

    class State(QObject):
        runsChanged = Signal()  # noqa: N815 - Qt naming

    repo, ids = sweep
    view = HistoryView(State(), SimpleNamespace(repo=repo))
    qtbot.addWidget(view)
    view.tabs.setCurrentIndex(2)
    assert view.tabs.tabText(2) == "Generation"
    qtbot.waitUntil(lambda: "the filters list" in view.generation.note.text())
    series = {s.label for s in view.generation.series}
    assert len(series) == 2 and "the filters list" in view.generation.note.text()
    assert len(_plotted(view.generation, "ttft_ms")[0][0]) == 3
    view.tabs.setCurrentIndex(0)
    view.select_runs(ids[:2])
    view.tabs.setCurrentIndex(2)
    qtbot.waitUntil(lambda: "the 2 selected runs" in view.generation.note.text())
    assert sorted(len(x) for x, _y in _plotted(view.generation, "ttft_ms")) == [2, 2]


def test_history_reads_the_runs_off_the_gui_thread_and_drops_an_overtaken_read(qtbot, sweep):
    import threading

    from studio.ui.generation_chart import GenerationCharts

    repo, ids = sweep
    gate, first_done, readers = threading.Event(), threading.Event(), []

    class SlowRepo:  # the first read (all listed runs) waits until the second has been shown
        def list_runs(self, *a, **k):
            readers.append(threading.current_thread())
            gate.wait(10)
            return repo.list_runs(*a, **k)

        def get_run(self, run_id):
            try:
                return repo.get_run(run_id)
            finally:
                first_done.set()

    charts = GenerationCharts()
    qtbot.addWidget(charts)
    charts.load_history(SlowRepo(), [], None)  # returns at once: the read is on a thread
    assert charts.note.text() == "Reading the runs…" and charts.series == []
    charts.load_history(repo, ids[:2], None)
    qtbot.waitUntil(lambda: "the 2 selected runs" in charts.note.text())
    gate.set()
    qtbot.waitUntil(first_done.is_set)
    qtbot.wait(100)  # the overtaken read's result reaches the GUI thread and is dropped
    assert "the 2 selected runs" in charts.note.text()
    assert sorted(len(x) for x, _y in _plotted(charts, "ttft_ms")) == [2, 2]
    assert readers and readers[0] is not threading.main_thread()
