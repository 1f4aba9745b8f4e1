"""The Recipe panel's palette and step problems come from accel.plan (no pass or model-kind
names in the widget): a pass that cannot follow the current form is disabled with the plan's
reason, and a click puts a pass where the plan places it."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from accel.models.forms import COMPILED
from accel.plan import passes_after
from accel.recipe import Step


@pytest.fixture
def panel(qtbot):
    from studio.state import AppState
    from studio.ui.recipe_view import RecipeView

    class NoServices:
        pool = None

        def run_recipe(self, recipe):
            raise AssertionError("not run in this test")

    state = AppState()
    state.set_model("zoo:mlp", {"kind": "torch", "input_spec": "x:float32[batch,16]; batch=4"})
    view = RecipeView(state, NoServices())
    qtbot.addWidget(view)
    return state, view


def _steps(state, *passes):
    state.update_steps([Step.model_validate({"pass": p}) for p in passes])


def test_palette_disables_a_pass_that_cannot_follow_the_form_with_the_plans_reason(panel):
    state, view = panel
    item = view._palette_items["torchscript"]
    assert not item.isDisabled()  # an eager model: torchscript can follow
    _steps(state, "compile")
    # torchscript cannot take a compiled module, and placed before compile it would hand
    # compile a TorchScript module, which compile cannot take either: nowhere to put it.
    reason = dict(passes_after(COMPILED, state.recipe.device))["torchscript"]
    assert reason and "before the compile step" in reason
    assert item.isDisabled()
    assert item.data(0, Qt.ItemDataRole.UserRole + 1) == reason
    assert reason in item.toolTip(0)
    view._add_from_palette(item)  # a disabled pass is not added
    assert [s.pass_name for s in state.recipe.steps] == ["compile"]


def test_a_click_inserts_where_the_plan_places_the_pass(panel):
    state, view = panel
    _steps(state, "compile")
    item = view._palette_items["torch_export"]  # cannot follow compile, can precede it
    assert not item.isDisabled() and "Added before step 1 (compile)" in item.toolTip(0)
    view._add_from_palette(item)
    assert [s.pass_name for s in state.recipe.steps] == ["torch_export", "compile"]
    assert view.btn_run.isEnabled() and view.problem.isHidden()


def test_step_problems_are_the_plans(panel):
    state, view = panel
    _steps(state, "onnxruntime", "export_onnx")
    reason = dict(passes_after("eager", state.recipe.device))["onnxruntime"]
    assert view.steps.item(0).toolTip() == reason
    assert not view.btn_run.isEnabled() and f"step 1: {reason}" in view.problem.text()


def test_a_typo_in_a_layer_list_is_shown_with_the_opened_models_layers(panel):
    state, view = panel
    step = Step.model_validate({"pass": "quantize_dynamic_int8", "params": {"exclude": ["fc_1"]}})
    state.update_steps([step])
    # No layers known (e.g. a cached model info from before): nothing to check.
    assert view.steps.item(0).toolTip() != "" and "fc_1" not in view.steps.item(0).toolTip()
    layers = [["fc1", "Linear"], ["act1", "ReLU"], ["fc2", "Linear"]]
    state.set_model("zoo:mlp", {"kind": "torch", "layers": layers})
    state.update_steps([step])
    tip = view.steps.item(0).toolTip()
    assert "exclude pattern(s) ['fc_1']" in tip and "Close names: act1, fc1, fc2" in tip
    assert not view.btn_run.isEnabled() and "step 1:" in view.problem.text()
    # The banner keeps what to change; the sample of names is in its tooltip.
    banner = view.problem.text()
    assert "Close names: act1, fc1, fc2" in banner and "Names look like" not in banner
    assert "Names look like: fc1, act1, fc2" in view.problem.toolTip()
    # Layers of another model than the recipe's: not used.
    model = state.recipe.model.model_copy(update={"source": "zoo:lstm"})
    state.set_recipe(state.recipe.model_copy(update={"model": model}))
    assert "fc_1" not in view.steps.item(0).toolTip()
