"""The ten problems of issue 14, each reproduced as the user met them: typing character by
character, clicking the real buttons."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest
from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtWidgets import QInputDialog, QMessageBox

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- 1: Qt WebEngine as root ------------------------------------------------------------------
def test_webengine_gets_no_sandbox_as_root_with_a_warning(caplog):
    from studio.app import webengine_sandbox_env

    env = {"QTWEBENGINE_CHROMIUM_FLAGS": "--disable-gpu"}
    with caplog.at_level(logging.WARNING, logger="studio.app"):
        msg = webengine_sandbox_env(env, euid=0)
    assert env["QTWEBENGINE_CHROMIUM_FLAGS"] == "--disable-gpu --no-sandbox"
    assert msg and "root" in msg and any("no-sandbox" in r.getMessage() for r in caplog.records)
    assert webengine_sandbox_env(env, euid=0) is None  # already there: nothing to add
    user = {}
    assert webengine_sandbox_env(user, euid=1000) is None and user == {}


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_web_view_as_root_does_not_kill_the_process():
    """What the user hit: as root, the first web view aborted the whole studio."""
    code = textwrap.dedent(
        """
        from studio.app import make_qapp
        app = make_qapp()
        from PySide6.QtCore import QTimer
        from PySide6.QtWebEngineWidgets import QWebEngineView
        view = QWebEngineView()
        done = []
        view.loadFinished.connect(lambda ok: (done.append(ok), app.quit()))
        view.setHtml("<p>netron</p>")
        view.show()
        QTimer.singleShot(60000, app.quit)
        app.exec()
        print("LOADED", done)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("QTWEBENGINE_")}
    env.update(QT_QPA_PLATFORM="offscreen", PYTHONPATH=ROOT)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LOADED [True]" in out.stdout


# -- 2 and 8: step forms ------------------------------------------------------------------------
@pytest.fixture
def recipe_panel(qtbot, tmp_path):
    from studio.state import AppState
    from studio.ui.recipe_view import RecipeView

    class NoServices:
        pool = None

        def __init__(self):
            self.ran = []

        def run_recipe(self, recipe):
            self.ran.append(recipe)

    state = AppState()
    state.set_model("zoo:mlp", {"kind": "torch", "input_spec": "x:float32[batch,16]; batch=4"})
    services = NoServices()
    view = RecipeView(state, services)
    qtbot.addWidget(view)
    view.resize(1000, 700)
    view.show()
    return state, services, view


def _add(state, view, name, params=None):
    i = state.add_step(name, params)
    view.steps.setCurrentRow(i)
    return i


def test_typing_a_value_keeps_focus_and_stores_what_was_typed(recipe_panel, qtbot):
    state, _, view = recipe_panel
    i = _add(state, view, "prune_channels")
    editor = view._form.fields["ratio"].editor
    editor.setFocus()
    editor.selectAll()
    qtbot.keyClicks(editor, "0.25")
    assert view._form.fields["ratio"].editor is editor and editor.hasFocus()
    assert editor.text() == "0.25"
    # Nothing is stored while typing ("0.2" must never reach the recipe) ...
    assert state.recipe.steps[i].params.get("ratio") != 0.2
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    # ... Enter commits the whole value.
    assert state.recipe.steps[i].params["ratio"] == 0.25


def test_an_invalid_value_disables_run_and_says_where(recipe_panel, qtbot):
    state, services, view = recipe_panel
    _add(state, view, "prune_channels")
    editor = view._form.fields["ratio"].editor
    editor.setFocus()
    editor.selectAll()
    qtbot.keyClicks(editor, "7.5")
    assert not view.btn_run.isEnabled()
    assert "step 1 (prune_channels): ratio:" in view.problem.text()
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.mouseClick(view.btn_run, Qt.MouseButton.LeftButton)
    view.run()  # Ctrl+R
    assert services.ran == []
    editor.selectAll()
    qtbot.keyClicks(editor, "0.5")
    assert view.btn_run.isEnabled() and view.problem.isHidden()
    view.run()  # Ctrl+R right after typing: the typed value is committed first
    assert services.ran and services.ran[-1].steps[0].params["ratio"] == 0.5


def test_benchmark_dims_accept_yaml_flow_syntax(recipe_panel, qtbot):
    state, _, view = recipe_panel
    editor = view.bench_form.fields["dims"].editor
    editor.setFocus()
    editor.clear()
    qtbot.keyClicks(editor, "{batch: 4}")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    assert state.recipe.benchmark.dims == {"batch": 4}


# -- 3, 4: History buttons ----------------------------------------------------------------------
@pytest.fixture
def history(qtbot, tmp_path):
    from studio.state import AppState
    from studio.store import Repository
    from studio.ui.history_view import HistoryView

    repo = Repository.open(str(tmp_path / "h.db"))
    ids = [
        repo.create_run(model_source="zoo:mlp", name=f"run-{i}", status="succeeded").id
        for i in range(2)
    ]

    class S:
        pass

    services = S()
    services.repo = repo
    state = AppState()
    view = HistoryView(state, services)
    qtbot.addWidget(view)
    view.show()
    view.reload()
    view.table.selectionModel().select(
        view.model.index(0, 0),
        QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
    )
    yield state, repo, view, ids
    repo.close()


def test_delete_button_asks_first_and_names_the_runs(history, qtbot, monkeypatch):
    state, repo, view, _ = history
    asked = []

    def cancel(box):
        asked.append(box.text())
        assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
        return QMessageBox.StandardButton.Cancel

    monkeypatch.setattr(QMessageBox, "exec", cancel)
    target = view.selected_ids()[0]
    qtbot.mouseClick(view.btn_delete, Qt.MouseButton.LeftButton)
    assert asked and target[:8] in asked[0]
    assert repo.count_runs() == 2  # nothing deleted
    deleted = []
    state.runsDeleted.connect(deleted.append)
    monkeypatch.setattr(QMessageBox, "exec", lambda box: QMessageBox.StandardButton.Yes)
    qtbot.mouseClick(view.btn_delete, Qt.MouseButton.LeftButton)
    assert repo.count_runs() == 1 and deleted == [[target]]


def test_tag_button_tags_the_selected_runs(history, qtbot, monkeypatch):
    _, repo, view, _ = history
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("baseline", True))
    target = view.selected_ids()[0]
    qtbot.mouseClick(view.btn_tag, Qt.MouseButton.LeftButton)
    assert "baseline" in repo.get_run(target).run.tags


def test_an_error_in_a_slot_reaches_the_status_bar_and_the_log(qtbot, caplog):
    from PySide6.QtWidgets import QPushButton

    from studio.ui.slots import on_click, report_slot_errors

    shown = []
    previous = report_slot_errors(shown.append)
    try:
        button = QPushButton("boom")
        qtbot.addWidget(button)

        def broken():
            raise RuntimeError("the slot failed")

        on_click(button.clicked, broken)
        with caplog.at_level(logging.ERROR, logger="studio.ui.slots"):
            qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert shown and "the slot failed" in shown[0]
        assert any("the slot failed" in r.getMessage() for r in caplog.records)
    finally:
        sys.excepthook = previous


# -- 5: stale state after a failed open ---------------------------------------------------------
def test_a_failed_open_leaves_no_message_over_the_graph_and_filters_reset(qtbot):
    from accel.graph.synthetic import synthetic_graph
    from studio.state import AppState
    from studio.ui.graph_view import GraphView
    from studio.ui.profile_view import ProfileView

    state = AppState()
    gv = GraphView(state, None)
    pv = ProfileView(state, None)
    for w in (gv, pv):
        qtbot.addWidget(w)
        w.show()
    state.set_model("zoo:mlp", {"kind": "torch"})
    with qtbot.waitSignal(gv.layoutReady, timeout=60000):
        state.set_graph(synthetic_graph(60, blocks=2))
    pv.filter.setFocus()
    qtbot.keyClicks(pv.filter, "fc1")
    state.modelLoading.emit("missing.onnx")
    state.modelFailed.emit("could not open missing.onnx: no such file")
    assert gv.message.isHidden()  # the graph on screen stays readable
    state.set_model("zoo:resnet", {"kind": "torch"})
    assert pv.filter.text() == ""  # the filter of the last model does not empty this one's


# -- 6: run artifacts in the data folder --------------------------------------------------------
def test_runs_go_next_to_the_database_not_the_working_directory(tmp_path, monkeypatch):
    from test_window_parts import FakePool

    from studio.services import Services
    from studio.state import AppState

    monkeypatch.chdir(tmp_path)
    pool = FakePool()
    db = tmp_path / "data" / "studio.db"
    db.parent.mkdir()
    state = AppState()
    services = Services(state, db=str(db), pool=pool)
    state.set_model("zoo:mlp", {"kind": "torch"})
    state.add_step("bf16")
    services.run_recipe()
    out = pool.submitted[-1][1]["out"]
    assert out.startswith(str(db.parent / "runs"))
    services.runs_dir = tmp_path / "elsewhere"
    services.run_recipe()
    assert pool.submitted[-1][1]["out"].startswith(str(tmp_path / "elsewhere"))
    services.repo.close()


# -- 7: Run shows the run -----------------------------------------------------------------------
def test_run_button_brings_the_runs_panel_forward_with_the_run_selected(qtbot, tmp_path):
    from PySide6.QtCore import QSettings
    from test_window_parts import FakePool

    from studio.services import Services
    from studio.state import AppState
    from studio.ui.main_window import MainWindow

    class RunPool(FakePool):
        def submit(self, kind, params=None, **kw):
            h = super().submit(kind, params, **kw)
            h.run_id = f"run{len(self.submitted)}"
            return h

    state = AppState()
    services = Services(state, pool=RunPool(), open_store=False)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(state, services, settings=settings)
    qtbot.addWidget(win)
    win.show()
    win.docks["runs"].hide()
    state.set_model("zoo:mlp", {"kind": "torch"})
    state.add_step("bf16")
    rv, runs = win.panels["recipe"], win.panels["runs"]
    qtbot.mouseClick(rv.btn_run, Qt.MouseButton.LeftButton)
    assert win.docks["runs"].isVisible()
    assert runs._selected() is not None and runs._selected().run_id == "run1"
    assert runs.btn_cancel.isEnabled()
    win.netron_view.release()


# -- 9: bf16 then export_onnx -------------------------------------------------------------------
def test_bf16_before_an_onnx_export_is_flagged_on_the_step(recipe_panel):
    state, _, view = recipe_panel
    state.add_step("bf16")
    state.add_step("export_onnx")
    assert not view.warning.isHidden()
    assert "float32" in view.warning.text() and "onnx_fp16" in view.warning.text()
    assert view.steps.item(1).text().startswith("⚠")
    assert view.btn_run.isEnabled()  # a warning, not an error


# -- 10: readable at ordinary sizes -------------------------------------------------------------
def test_window_fits_a_laptop_screen_with_readable_pass_names(qtbot, tmp_path, recipe_panel):
    from PySide6.QtCore import QSettings
    from test_window_parts import FakePool

    from studio.services import Services
    from studio.state import AppState
    from studio.ui.main_window import MainWindow

    state = AppState()
    services = Services(state, pool=FakePool(), open_store=False)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(state, services, settings=settings)
    qtbot.addWidget(win)
    hint = win.minimumSizeHint()
    assert hint.width() <= 1366 and hint.height() <= 768
    win.netron_view.release()
    _, _, view = recipe_panel
    fm = view.palette.fontMetrics()
    widest = max(fm.horizontalAdvance(name) for name in view._passes)
    assert view.palette.viewport().width() > widest + 30  # names are never elided


def test_fit_shows_a_small_collapsed_graph_whole(qtbot):
    from accel.graph.synthetic import synthetic_graph
    from studio.state import AppState
    from studio.ui.graph_view import GraphView

    state = AppState()
    gv = GraphView(state, None)
    qtbot.addWidget(gv)
    gv.resize(760, 420)
    gv.show()
    with qtbot.waitSignal(gv.layoutReady, timeout=60000):
        state.set_graph(synthetic_graph(300, blocks=9))
    with qtbot.waitSignal(gv.layoutReady, timeout=60000):
        gv.collapse_all()
    gv.fit()
    canvas = gv.canvas
    visible = canvas.mapToScene(canvas.viewport().rect()).boundingRect()
    assert len(gv._items) <= 12
    assert visible.contains(gv.scene.itemsBoundingRect())


def test_compare_numbers_are_formatted_for_people():
    from studio.ui.compare_view import fmt_metric

    assert fmt_metric("size_bytes", 696618 * 4) == "2.7 MiB"
    assert fmt_metric("num_params", 696618) == "696.62k"
    assert fmt_metric("latency_p50_ms", 1.23456) == "1.235"
    assert fmt_metric("speedup", 1.5) == "1.50×"
    assert "e+" not in fmt_metric("accuracy", 0.91)


def test_profile_chart_labels_fit_the_axis_so_none_is_dropped(qtbot):
    from PySide6.QtGui import QFontMetrics

    from accel.profile.results import LayerProfile, ModelProfile
    from studio.state import AppState
    from studio.ui.profile_view import ProfileView

    state = AppState()
    view = ProfileView(state, None)
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.show()
    rows = [
        LayerProfile(name=f"encoder.layers.{i}.attention.output_projection", type="Linear",
                     self_ms=20.0 - i, inclusive_ms=20.0 - i)
        for i in range(15)
    ]  # fmt: skip
    state.set_model("zoo:mlp", {"kind": "torch"})
    state.set_profile(ModelProfile(kind="torch", rows=rows, total_ms=200.0, device="cpu"))
    left = view.plot.getAxis("left")
    labels = [text for _, text in left._tickLevels[0]]
    assert len(labels) == len(view.top_rows) >= 5
    fm = QFontMetrics(left.style.get("tickFont") or view.plot.font())
    # pyqtgraph skips any label wider than the axis: every one must fit.
    assert all(fm.horizontalAdvance(t) <= left.width() - 10 for t in labels)


def test_open_dialog_comes_back_with_the_last_zoo_model(qtbot):
    from studio.ui.open_model_dialog import OpenModelDialog

    dlg = OpenModelDialog(None, recent=[], last="zoo:lstm")
    qtbot.addWidget(dlg)
    assert dlg.zoo.currentItem().data(Qt.ItemDataRole.UserRole) == "zoo:lstm"
