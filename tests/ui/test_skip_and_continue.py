"""'Skip and continue' in the GUI: the recipe panel's on_step_error checkbox, and re-running a
run that stopped at a failing step with on_step_error: skip (pytest-qt, no worker)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from PySide6.QtCore import QObject, Qt, Signal


class _Bridge(QObject):
    jobQueued = Signal(str, str)
    jobStarted = Signal(str, str)
    jobEvent = Signal(str, dict)
    jobLog = Signal(str, dict)
    jobFinished = Signal(str, object)


class _Services(QObject):
    runQueued = Signal(str, str)

    def __init__(self) -> None:
        super().__init__()
        self.bridge = _Bridge()
        self.pool = None
        self.runs: list[tuple[object, dict]] = []

    def run_recipe(self, recipe, **kwargs) -> None:
        self.runs.append((recipe, kwargs))

    def open_model(self, *a, **k) -> None:
        pass


@pytest.fixture
def state(qapp):
    from studio.state import AppState

    s = AppState()
    s.set_model("zoo:mlp", {"kind": "torch", "input_spec": "x:float32[batch,64]; batch=1..8:2"})
    return s


def test_checkbox_sets_the_recipes_on_step_error(qtbot, state):
    from studio.ui.recipe_view import RecipeView

    view = RecipeView(state, _Services())
    qtbot.addWidget(view)
    assert state.recipe.on_step_error == "stop"
    assert not view.skip_check.isChecked()
    view.skip_check.click()
    assert view.skip_check.isChecked()
    assert state.recipe.on_step_error == "skip"
    view.skip_check.click()
    assert state.recipe.on_step_error == "stop"
    # A recipe loaded with skip shows it checked.
    state.set_recipe(state.recipe.model_copy(update={"on_step_error": "skip"}))
    assert view.skip_check.isChecked()


def test_a_run_stopped_at_a_failing_step_can_be_rerun_skipping_it(qtbot, state):
    from studio.ui.runs_view import RunsView

    services = _Services()
    view = RunsView(state, services)
    qtbot.addWidget(view)
    recipe = {"name": "r", "model": {"source": "zoo:mlp"}, "steps": [{"pass": "fp16"}]}
    services.runQueued.emit("job1", "run1")
    e = view.entries["job1"]
    e.recipe = recipe
    services.bridge.jobStarted.emit("job1", "run_recipe")
    assert not view.btn_rerun_skip.isEnabled()  # running
    services.bridge.jobEvent.emit(
        "job1",
        {
            "event": "run_failed",
            "error": "step 1 (fp16): boom",
            "error_type": "RuntimeError",
            "index": 0,
        },
    )
    outcome = SimpleNamespace(status="failed", run_id="run1", error="step 1: boom")
    services.bridge.jobFinished.emit("job1", outcome)
    assert view.btn_rerun_skip.isEnabled()
    qtbot.mouseClick(view.btn_rerun_skip, Qt.MouseButton.LeftButton)
    ((sent, kwargs),) = services.runs
    assert sent["on_step_error"] == "skip" and sent["steps"] == recipe["steps"]
    assert kwargs == {"parent_run_id": "run1"}
    assert "on_step_error" not in recipe  # the stored run's recipe is unchanged

    # A run that failed before any step (loading the model) has no step to skip.
    services.runQueued.emit("job2", "run2")
    view.entries["job2"].recipe = recipe
    services.bridge.jobEvent.emit(
        "job2",
        {"event": "run_failed", "error": "no model", "error_type": "ModelLoadError", "index": None},
    )
    services.bridge.jobFinished.emit(
        "job2", SimpleNamespace(status="failed", run_id="run2", error="x")
    )
    view.queue.setCurrentItem(view.entries["job2"].item)
    assert not view.btn_rerun_skip.isEnabled()
