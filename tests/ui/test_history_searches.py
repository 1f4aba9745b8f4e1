"""History ▸ Searches: stored searches, their trials, and "Open as recipe" on a trial."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidget, QTabWidget

from studio.optimize import _trial_name
from studio.state import AppState
from studio.store import Repository


def _trial(repo, search_id, number, steps, speed, status="succeeded", interval=True):
    label = "+".join(s["pass"] for s in steps) or "original"
    recipe = {
        "name": f"search trial {number}: {label}",
        "model": {"source": "zoo:mlp"},
        "device": "cpu",
        "steps": steps,
        "gates": {"min_cosine": 0.999},
    }
    r = repo.create_run(
        model_source="zoo:mlp", recipe=recipe, name=_trial_name(search_id, number, label)
    )
    m = {"latency_p50_ms": 10.0 / speed, "speedup": speed}
    if interval:
        m.update(speedup_low=speed * 0.9, speedup_high=speed * 1.1)
    repo.record_event(
        r.id,
        {
            "event": "run_started",
            "run_dir": "",
            "model_source": "zoo:mlp",
            "model_kind": "torch",
            "device": "cpu",
            "recipe": recipe,
            "num_steps": len(steps),
            "baseline": {"latency_p50_ms": 10.0},
        },
    )
    summary = {
        "final_speedup": speed,
        "final_speedup_low": m.get("speedup_low"),
        "final_speedup_high": m.get("speedup_high"),
        "final_latency_p50_ms": m["latency_p50_ms"],
    }
    repo.record_event(
        r.id, {"event": "run_finished", "status": status, "duration_s": 1, "summary": summary}
    )
    repo.add_search_trial(search_id, r.id)
    return r.id


@pytest.fixture
def searches(tmp_path):
    repo = Repository.open(tmp_path / "s.db")
    repo.create_run(model_source="zoo:mlp", recipe={"name": "plain run"})  # not a trial
    repo.create_search(search_id="a" * 32, model_source="zoo:mlp", device="cpu", name="mlp")
    t0 = _trial(repo, "a" * 32, 0, [], 1.0)
    t1 = _trial(repo, "a" * 32, 1, [{"pass": "export_onnx"}], 2.5)
    t2 = _trial(
        repo, "a" * 32, 2, [{"pass": "export_onnx"}, {"pass": "quantize_onnx_dynamic"}], 0.0001
    )
    repo.finish_search("a" * 32, "finished", {"best": 1, "trial_runs": {"0": t0, "1": t1}})
    repo.create_search(
        search_id="b" * 32, model_source="zoo:transformer", objective="size", name="tf"
    )
    _trial(repo, "b" * 32, 0, [], 1.0, status="failed", interval=False)
    repo.finish_search("b" * 32, "no_feasible", {"best": None, "reason": "no trial met it"})
    yield repo, (t0, t1, t2)
    repo.close()


def _texts(table: QTableWidget, row: int) -> list[str]:
    return [table.item(row, j).text() for j in range(table.columnCount())]


def test_searches_tab_lists_searches_trials_and_opens_a_trial_recipe(qtbot, searches):
    from studio.ui.history_view import HistoryView

    repo, (t0, t1, t2) = searches

    class _Services:
        pass

    services = _Services()
    services.repo = repo
    state = AppState()
    view = HistoryView(state, services)
    qtbot.addWidget(view)
    view.show()
    tabs = view.findChild(QTabWidget, "historyTabs")
    assert tabs.tabText(1) == "Searches"
    tabs.setCurrentIndex(1)  # the user clicks the tab: the list loads
    table = view.findChild(QTableWidget, "searchesTable")
    assert table.rowCount() == 2
    rows = {_texts(table, i)[2]: _texts(table, i) for i in range(2)}
    mlp = rows["zoo:mlp"]
    assert mlp[0] == "aaaaaaaa mlp" and mlp[3:6] == ["latency", "finished", "3"]
    assert mlp[6] == "2.50x [2.25-2.75]"  # the best trial's speedup with its interval
    assert rows["zoo:transformer"][4:] == ["no_feasible", "1", "-"]
    # Selecting a search lists its trials (and only them).
    row = next(i for i in range(2) if table.item(i, 2).text() == "zoo:mlp")
    table.selectRow(row)
    trials = view.findChild(QTableWidget, "trialsTable")
    assert trials.rowCount() == 3
    assert {trials.item(i, 5).text() for i in range(3)} == {t[:8] for t in (t0, t1, t2)}
    assert {trials.item(i, 0).text()[:2] for i in range(3)} == {"#0", "#1", "#2"}
    # Speedups sort as numbers (0.0001 is shown as 0.00x, still sorted below 1.00x).
    trials.sortItems(4, Qt.SortOrder.DescendingOrder)
    assert [trials.item(i, 4).text() for i in range(3)] == [
        "2.50x [2.25-2.75]",
        "1.00x [0.90-1.10]",
        "0.00x [0.00-0.00]",
    ]
    assert not view.searches.open_btn.isEnabled()  # no trial selected yet
    trials.selectRow(2)
    assert view.searches.open_btn.isEnabled()
    qtbot.mouseClick(view.searches.open_btn, Qt.MouseButton.LeftButton)
    assert [s.pass_name for s in state.recipe.steps] == ["export_onnx", "quantize_onnx_dynamic"]
    assert state.recipe.model.source == "zoo:mlp"
