"""Recipe, Runs and History panels with real worker processes:
build a recipe from the palette → run → history → re-run → compare → export the script and run it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from PySide6.QtCore import QItemSelectionModel

from accel.passes import list_passes
from studio.tables import RUN_STEP_HEADERS, TIMING_HEADERS
from tests.timing_rows import assert_table_agrees
from tests.ui.stall_meter import StallMeter


@pytest.fixture(scope="module")
def panels(qapp, tmp_path_factory):
    home = tmp_path_factory.mktemp("studio-recipe")
    old = os.environ.get("ACCEL_STUDIO_HOME")
    os.environ["ACCEL_STUDIO_HOME"] = str(home)
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.history_view import HistoryView
    from studio.ui.recipe_view import RecipeView
    from studio.ui.runs_view import RunsView

    state = AppState()
    services = Services(state, db=str(home / "studio.db"))
    state.set_model(
        "zoo:mlp", {"kind": "torch", "input_spec": "x:float32[batch,1024]; batch=1..256:8"}
    )
    recipe = state.recipe.model_copy(
        update={
            "name": "mlp-bf16-ort",
            "benchmark": state.recipe.benchmark.model_copy(update={"warmup": 1, "iters": 3}),
        }
    )
    state.set_recipe(recipe)
    views = {
        "recipe": RecipeView(state, services),
        "runs": RunsView(state, services),
        "history": HistoryView(state, services),
    }
    for name, v in views.items():
        v.resize(1100, 500)
        v.setWindowTitle(name)
        v.show()
    from studio.app import settle_garbage_collector

    settle_garbage_collector()  # as studio.app.run_gui does once the window is up
    yield state, services, views, home
    for v in views.values():
        v.close()
    services.shutdown()
    if old is None:
        os.environ.pop("ACCEL_STUDIO_HOME", None)
    else:
        os.environ["ACCEL_STUDIO_HOME"] = old


@pytest.mark.parametrize("cls", list_passes(), ids=lambda c: c.name)
def test_every_pass_gets_a_form_whose_defaults_round_trip(qapp, cls):
    from studio.ui.param_form import ParamForm

    form = ParamForm(cls.Config)
    params, errors = form.validate()
    assert errors == {} and params == {}
    assert cls.parse_config(params) == cls.parse_config({})


def test_form_shows_errors_inline_and_never_emits_invalid_values(qapp):
    from accel.recipe import Gates
    from studio.ui.param_form import ParamForm

    form = ParamForm(Gates, Gates().model_dump())
    seen = []
    form.changed.connect(seen.append)
    form.fields["atol"].editor.setText("-1")
    assert "atol" in form.errors() and not form.fields["atol"].error.isHidden()
    form.fields["atol"].editor.editingFinished.emit()  # Enter
    assert seen == [] and not form.is_valid()
    form.fields["atol"].editor.setText("0.01")
    assert seen == []  # typed, not committed yet
    form.fields["atol"].editor.editingFinished.emit()
    assert seen[-1] == {"atol": 0.01} and form.fields["atol"].error.isHidden()
    form.fields["min_top1"].toggle.setChecked(True)
    form.fields["min_top1"].editor.setText("0.9")
    form.fields["min_top1"].editor.editingFinished.emit()
    assert seen[-1] == {"atol": 0.01, "min_top1": 0.9}


def _palette_item(view, name):
    return view._palette_items[name]


def test_palette_records_steps_and_checks_their_order(panels):
    state, _services, views, _ = panels
    rv = views["recipe"]
    assert _palette_item(rv, "onnxruntime").isDisabled()  # needs an ONNX model first
    assert (
        "add an export_onnx step before it" in _palette_item(rv, "onnxruntime").toolTip(0).lower()
    )
    rv._add_from_palette(_palette_item(rv, "bf16"))
    rv._add_from_palette(_palette_item(rv, "export_onnx"))
    assert not _palette_item(rv, "onnxruntime").isDisabled()
    rv._add_from_palette(_palette_item(rv, "onnxruntime"))
    assert [s.pass_name for s in state.recipe.steps] == ["bf16", "export_onnx", "onnxruntime"]
    # a torch pass clicked now goes before the export; removing it restores the recipe
    rv._add_from_palette(_palette_item(rv, "channels_last"))
    assert [s.pass_name for s in state.recipe.steps] == [
        "bf16",
        "channels_last",
        "export_onnx",
        "onnxruntime",
    ]
    rv.steps.setCurrentRow(1)
    rv._remove()
    # the export step's form: choose the TorchScript exporter (fast) through the form
    rv.steps.setCurrentRow(1)
    combo = rv._form.fields["exporter"].editor
    combo.setCurrentIndex(combo.findData("torchscript"))
    assert state.recipe.steps[1].params == {"exporter": "torchscript"}
    # duplicate, disable, reorder and remove keep the recipe consistent
    rv.steps.setCurrentRow(0)
    rv._duplicate()
    assert [s.pass_name for s in state.recipe.steps] == [
        "bf16",
        "bf16",
        "export_onnx",
        "onnxruntime",
    ]
    rv.steps.setCurrentRow(1)
    rv._remove()
    rv.steps.setCurrentRow(2)
    rv._move(-1)  # onnxruntime before export_onnx: flagged, run disabled
    assert (
        not rv.btn_run.isEnabled()
        and "add an export_onnx step before it" in rv.problem.text().lower()
    )
    rv._move(1)
    assert rv.btn_run.isEnabled() and rv.problem.isHidden()
    assert [s.pass_name for s in state.recipe.steps] == ["bf16", "export_onnx", "onnxruntime"]


def test_step_order_checks_model_forms(panels):
    from accel.recipe import Step

    state, _services, views, _ = panels
    rv = views["recipe"]
    before = list(state.recipe.steps)
    state.update_steps([Step.model_validate({"pass": p}) for p in ("compile", "torch_export")])
    try:  # both torch passes, but torch_export cannot take a compiled module (accel.plan)
        assert not rv.btn_run.isEnabled() and "before the compile step" in rv.problem.text()
    finally:
        state.update_steps(before)
    assert rv.problem.isHidden()


def _run_and_wait(panels, wait, start):
    """Run a job to its end; return its outcome and the GUI thread's stall meter."""
    state, services, views, _ = panels
    done = []
    services.runFinished.connect(lambda job, outcome: done.append(outcome))
    with StallMeter() as meter:
        start()
        wait(lambda: bool(done), 300)
    return done[0], meter


def _ensure_steps(state):
    """The palette test builds the recipe; when run alone, build the same one."""
    if [s.pass_name for s in state.recipe.steps] != ["bf16", "export_onnx", "onnxruntime"]:
        from accel.recipe import Step

        state.update_steps(
            [
                Step.model_validate({"pass": "bf16"}),
                Step.model_validate({"pass": "export_onnx", "params": {"exporter": "torchscript"}}),
                Step.model_validate({"pass": "onnxruntime"}),
            ]
        )


def test_run_shows_progress_steps_and_lands_in_history(panels, wait):
    state, services, views, _ = panels
    _ensure_steps(state)
    outcome, meter = _run_and_wait(panels, wait, views["recipe"].run)
    assert outcome.status == "succeeded", outcome.error
    meter.check("a recipe ran")
    runs = views["runs"]
    entry = next(iter(runs.entries.values()))
    assert entry.status == "succeeded" and entry.done == 3 and entry.total == 3
    assert runs.table.rowCount() == 4  # original + 3 steps
    parity_col = RUN_STEP_HEADERS.index("parity")
    assert runs.table.item(3, 1).text() == "onnxruntime"
    assert runs.table.item(3, parity_col).text() in ("pass", "FAIL")
    # every step row: the original's p50 and the step's from the comparison of its speedup
    cols = [RUN_STEP_HEADERS.index(h) for h in TIMING_HEADERS]
    for r in range(1, 4):
        ref, p50, speed = (runs.table.item(r, c).text() for c in cols)
        assert_table_agrees(f"{ref} {p50} {speed}", 1)
    assert "step 3 onnxruntime" in runs.log.toPlainText()
    history = views["history"]
    wait(lambda: (history.reload() or history.model.total) >= 1, 30)
    assert history.model.rows[0].status == "succeeded"


def test_rerun_compare_and_export(panels, wait, tmp_path):
    state, services, views, _ = panels
    runs, history = views["runs"], views["history"]
    outcome, _ = _run_and_wait(panels, wait, runs.rerun_selected)
    assert outcome.status == "succeeded"
    history.reload()
    assert history.model.total == 2
    first, second = history.model.rows
    assert first.parent_run_id == second.id  # newest first: the re-run points at its parent
    sel = history.table.selectionModel()
    for row in (0, 1):
        sel.select(
            history.model.index(row, 0),
            QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
        )
    assert history.btn_compare.isEnabled()
    history.compare_selected()
    cmp = history._compare
    assert cmp.findChild(object, "compareTable").rowCount() > 0
    pts = cmp.pareto_points()
    assert len(pts) == 6 and cmp.front  # 3 steps x 2 runs, a non-empty Pareto front
    # tag, notes and exports
    history.tag_selected("baseline")
    history.reload()
    assert all("baseline" in r.tags for r in history.model.rows)
    history.model.setData(
        history.model.index(0, history.model.COLUMNS.index("notes")), "looks good"
    )
    assert history.repo.get_run(history.model.rows[0].id).run.notes == "looks good"
    for row in (0, 1):
        sel.select(
            history.model.index(row, 0),
            QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
        )
    md = history.export_selected("md", str(tmp_path / "runs.md"))
    assert "| 3 | onnxruntime |" in open(md).read()
    csv_path = history.export_selected("csv", str(tmp_path / "runs.csv"))
    assert len(open(csv_path).read().splitlines()) == 1 + 2 * 4
    history.search.setText("looks")
    history.reload()
    assert history.model.total == 1
    history.search.setText("")
    history.pass_edit.setText("onnxruntime")
    history.reload()
    assert history.model.total == 2
    history.pass_edit.setText("qat")
    history.reload()
    assert history.model.total == 0
    history.pass_edit.setText("")
    history.reload()
    cmp.close()


def test_exported_script_runs_and_reproduces(panels, wait, tmp_path):
    state, *_ = panels
    from studio.ui.script_dialog import ScriptDialog

    dlg = ScriptDialog(state)
    wait(lambda: bool(dlg.script), 120)
    assert "import torch" in dlg.script and "accel" not in dlg.script.replace("Accel Studio", "")
    path = tmp_path / "recipe.py"
    assert dlg.save(str(path))
    out = subprocess.run(
        [sys.executable, str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "onnxruntime" in out.stdout
    for d in ("step_00_bf16", "step_01_export_onnx", "step_02_onnxruntime"):
        assert (tmp_path / "out" / d / "outputs.pt").is_file()
    dlg.close()


def test_screenshots(panels, screenshots_dir, wait):
    state, services, views, _ = panels
    from studio.ui.script_dialog import ScriptDialog

    for name, v in views.items():
        v.grab().save(os.path.join(screenshots_dir, f"panel_{name}.png"))
    dlg = ScriptDialog(state)
    dlg.show()
    wait(lambda: bool(dlg.script), 120)
    dlg.grab().save(os.path.join(screenshots_dir, "dialog_script.png"))
    dlg.close()
    h = views["history"]
    sel = h.table.selectionModel()
    for row in range(min(2, h.model.rowCount())):
        sel.select(
            h.model.index(row, 0),
            QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
        )
    h.compare_selected()
    cmp = h._compare
    from PySide6.QtWidgets import QTabWidget

    tabs = cmp.findChild(QTabWidget)
    for i, tag in enumerate(("metrics", "latency", "pareto")):
        tabs.setCurrentIndex(i)
        wait(lambda: True, 1)
        cmp.grab().save(os.path.join(screenshots_dir, f"compare_{tag}.png"))
    cmp.close()
