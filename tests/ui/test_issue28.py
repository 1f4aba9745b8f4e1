"""Issue 28, the window as a new user tried it: what the offscreen platform can check
(the crash on Delete itself only shows on a real display: tests/display)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QItemSelectionModel, QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication, QInputDialog, QMessageBox


@pytest.fixture
def history(qtbot, tmp_path):
    from studio.state import AppState
    from studio.store import Repository
    from studio.ui.history_view import HistoryView

    repo = Repository.open(str(tmp_path / "h.db"))
    for i in range(3):
        repo.create_run(model_source="zoo:mlp", name=f"run-{i}", status="succeeded")

    class S:
        pass

    services = S()
    services.repo = repo
    state = AppState()
    view = HistoryView(state, services)
    qtbot.addWidget(view)
    view.resize(1000, 400)
    view.show()
    view.reload()
    view.table.selectionModel().select(
        view.model.index(0, 0),
        QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
    )
    yield state, repo, view
    repo.close()


# -- 1: the check box of the delete question was deleted by Python under the dialog --------
def test_the_delete_questions_check_box_belongs_to_the_dialog(history):
    from shiboken6 import Shiboken

    from studio.ui.delete_dialog import confirm_delete_box

    _, _, view = history
    box, files = confirm_delete_box(view, view.selected_ids(), view.model.rows)
    assert files.parent() is box
    assert not Shiboken.ownedByPython(files)  # Python would delete it when its name goes
    box.deleteLater()


# -- 13: Enter never deletes; speedup sorts fastest first; tagging keeps the selection --------
def test_enter_on_the_focused_delete_button_deletes_nothing(history, qtbot):
    from PySide6.QtTest import QTest

    _, repo, view = history
    seen = []

    def press_enter_on_delete():
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, press_enter_on_delete)
            return
        delete = box.button(QMessageBox.StandardButton.Yes)
        delete.setFocus()
        seen.append(delete.text())
        QTest.keyClick(delete, Qt.Key.Key_Return)
        if box.isVisible():  # Enter did nothing at all: close it so the test ends
            seen.append("still open")
            box.reject()

    QTimer.singleShot(0, press_enter_on_delete)
    qtbot.mouseClick(view.btn_delete, Qt.MouseButton.LeftButton)
    assert seen == ["Delete 1 run"]  # Enter closed the dialog, with Cancel
    assert repo.count_runs() == 3


def test_the_first_click_on_speedup_sorts_the_fastest_first(history, qtbot):
    _, _, view = history
    header = view.table.horizontalHeader()
    col = view.model.COLUMNS.index("speedup [95% CI]")
    view.table.scrollTo(view.model.index(0, col))
    x = header.sectionViewportPosition(col) + header.sectionSize(col) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=_point(x, 5))
    assert view.model.sorted_by == ("speedup [95% CI]", True)  # descending: highest first
    col = view.model.COLUMNS.index("p50 ms")
    x = header.sectionViewportPosition(col) + header.sectionSize(col) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=_point(x, 5))
    assert view.model.sorted_by == ("p50 ms", False)  # ascending: lowest first


def _point(x: int, y: int):
    from PySide6.QtCore import QPoint

    return QPoint(x, y)


def test_tagging_keeps_the_selection(history, qtbot, monkeypatch):
    _, repo, view = history
    view.table.selectionModel().select(
        view.model.index(2, 0),
        QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
    )
    chosen = view.selected_ids()
    assert len(chosen) == 2
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("fast", True))
    qtbot.mouseClick(view.btn_tag, Qt.MouseButton.LeftButton)
    assert all("fast" in repo.get_run(r).run.tags for r in chosen)
    assert view.selected_ids() == chosen and view.btn_delete.isEnabled()


# -- 4: Run on an empty recipe is disabled, saying why ------------------------------------------
@pytest.fixture
def window(qtbot, tmp_path):
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.main_window import MainWindow
    from tests.ui.test_window_parts import FakePool

    state = AppState()
    pool = FakePool()
    services = Services(state, pool=pool, open_store=False)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(state, services, settings=settings)
    qtbot.addWidget(win)
    win.pool = pool
    yield win
    win.netron_view.release()


def test_run_action_on_an_empty_recipe_is_disabled_and_says_why(window, qtbot):
    assert not window.state.recipe.steps
    assert not window.act_run.isEnabled()
    assert "add at least one step" in window.act_run.toolTip()
    assert "add at least one step" in window.act_run.statusTip()
    window.run_recipe()  # even called directly: refused, said in the status bar
    assert window.pool.submitted == []
    assert "add at least one step" in window.statusBar().currentMessage()
    window.state.add_step("bf16")
    assert window.act_run.isEnabled()
    assert window.act_run.toolTip().startswith("Run the recipe")


# -- 2: the first window and a remembered one fit the screen ------------------------------------
def test_first_size_and_remembered_geometry_fit_the_screen():
    from PySide6.QtCore import QRect, QSize

    from studio.ui.window_geometry import clamped, first_size

    laptop = QRect(0, 0, 1366, 768)
    assert first_size(laptop) == QSize(1366, 768)
    assert first_size(QRect(0, 0, 1920, 1080)) == QSize(1400, 900)
    # remembered on a big monitor at (500, 200), opened on the laptop with a 30 px title bar
    got = clamped(QRect(500, 200, 1400, 930), laptop, QSize(0, 30))
    assert got == QRect(0, 0, 1366, 738)


# -- 6, 8: greyed-out passes say why on click; deleting a step moves no button; New recipe ------
@pytest.fixture
def recipe_view(qtbot):
    from studio.state import AppState
    from studio.ui.recipe_view import RecipeView

    state = AppState()
    state.set_model("zoo:mlp", {"kind": "torch", "input_spec": "x:float32[batch,1024]"})

    class S:
        pool = None

    view = RecipeView(state, S())
    qtbot.addWidget(view)
    view.resize(480, 640)
    view.show()
    messages: list[str] = []
    state.status.connect(messages.append)
    yield state, view, messages


def test_a_click_on_a_greyed_out_pass_says_why(recipe_view, qtbot):
    state, view, messages = recipe_view
    item = view._palette_items["onnxruntime"]
    assert item.isDisabled()
    view.palette.scrollToItem(item)
    pos = view.palette.visualItemRect(item).center()
    qtbot.mouseClick(view.palette.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    reason = item.data(0, Qt.ItemDataRole.UserRole + 1)
    assert reason and reason in view.palette_hint.text()
    assert messages and reason in messages[-1] and "onnxruntime" in messages[-1]
    assert reason in item.toolTip(0)


def test_deleting_a_step_leaves_the_step_buttons_in_place(recipe_view, qtbot):
    state, view, _ = recipe_view
    for name in ("export_onnx", "onnxruntime"):
        view._add_from_palette(view._palette_items[name])
    qtbot.wait(50)
    before = view.btn_remove.mapTo(view, view.btn_remove.rect().topLeft())
    view.steps.setCurrentRow(0)
    qtbot.mouseClick(view.btn_remove, Qt.MouseButton.LeftButton)  # onnxruntime now lacks ONNX
    qtbot.wait(50)
    assert view.problem.isVisible()  # the banner came
    assert view.btn_remove.mapTo(view, view.btn_remove.rect().topLeft()) == before


def test_new_recipe_starts_empty_for_the_same_model(recipe_view, qtbot):
    state, view, _ = recipe_view
    view._add_from_palette(view._palette_items["bf16"])
    qtbot.mouseClick(view.btn_new, Qt.MouseButton.LeftButton)
    assert state.recipe.steps == [] and state.recipe.model.source == "zoo:mlp"


# -- 7: Deploy / Serve test follow a History selection after a restart; History has Deploy -------
@pytest.fixture
def restarted(qtbot, tmp_path):
    """A window opened on a database that already holds a deployable run and a failed one."""
    from studio.services import Services
    from studio.state import AppState
    from studio.store import Repository
    from studio.ui.main_window import MainWindow
    from tests.ui.test_serve_test_dialog import _record_run

    repo = Repository.open(str(tmp_path / "studio.db"))
    good = _record_run(repo, tmp_path, "exported", "onnx", "export_onnx", tmp_path / "m.onnx")
    bad = repo.create_run(model_source="zoo:mlp", name="broke", status="failed").id
    repo.close()
    state = AppState()
    services = Services(state, db=str(tmp_path / "studio.db"))
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(state, services, settings=settings)
    qtbot.addWidget(win)
    yield win, good, bad
    services.shutdown()
    win.netron_view.release()


def _click_run(qtbot, history, run_id):
    row = next(i for i, r in enumerate(history.model.rows) if r.id == run_id)
    rect = history.table.visualRect(history.model.index(row, 2))
    qtbot.mouseClick(history.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def test_deploy_follows_the_history_selection_and_says_why(restarted, qtbot, monkeypatch):
    win, good, bad = restarted
    history = win.panels["history"]
    win.show()
    assert not win.act_deploy.isEnabled() and "select one succeeded run" in win.act_deploy.toolTip()
    _click_run(qtbot, history, bad)
    assert not win.act_deploy.isEnabled() and "failed" in win.act_deploy.statusTip()
    assert not history.btn_deploy.isEnabled() and "failed" in history.btn_deploy.toolTip()
    _click_run(qtbot, history, good)
    assert win.state.current_run_id == good
    assert win.act_deploy.isEnabled() and history.btn_deploy.isEnabled()
    deployed = []
    monkeypatch.setattr(win.services, "deploy_triton", lambda rid, out, force: deployed.append(rid))
    import studio.ui.window_recipe as wr

    out = str(win.services.runs_root())  # any folder; the deploy itself is recorded only
    monkeypatch.setattr(wr.QFileDialog, "getExistingDirectory", lambda *a, **k: out + "/triton")
    qtbot.mouseClick(history.btn_deploy, Qt.MouseButton.LeftButton)
    assert deployed == [good]


# -- 9: Compare keeps each run's own step numbers -----------------------------------------------
def test_compare_shows_each_runs_own_step_numbers(qtbot, tmp_path):
    import pyqtgraph as pg
    from PySide6.QtWidgets import QTableWidget

    from studio.ui.compare_view import CompareView
    from tests.ui.test_compare_history_theme import _step, _store

    # A: fold_batchnorm → export_onnx → onnxruntime; B: export_onnx → quantize_onnx_dynamic
    a = [
        _step(0, "fold_batchnorm", 9.0),
        _step(1, "export_onnx", 8.0),
        _step(2, "onnxruntime", 5.0),
    ]
    b = [_step(0, "export_onnx", 7.0), _step(1, "quantize_onnx_dynamic", 3.0)]
    repo, ids = _store(tmp_path / "c.db", [("a", a), ("b", b)])
    view = CompareView(repo, ids)
    qtbot.addWidget(view)
    table = view.findChild(QTableWidget, "compareTable")
    labels = [table.verticalHeaderItem(i).text() for i in range(table.rowCount())]
    heads = {label.split(" · ")[0] for label in labels} - {"0. baseline"}
    assert heads == {
        "1 | –. fold_batchnorm",
        "2 | 1. export_onnx",  # A's step 2 beside B's step 1, on one row
        "3 | –. onnxruntime",
        "– | 2. quantize_onnx_dynamic",  # B's second step keeps its number 2
    }
    baseline_rows = sum(1 for x in labels if x.startswith("0. baseline"))
    assert labels.index(next(x for x in labels if "fold" in x)) == baseline_rows  # after them
    chart = view.findChild(pg.PlotWidget, "latencyChart")
    ticks = [label for _, label in chart.getAxis("bottom")._tickLevels[0]]
    assert ticks == ["original"] + sorted(
        heads, key=lambda h: labels.index(next(x for x in labels if x.startswith(h)))
    )
    repo.close()


# -- 3: the Pareto legend and the "fastest" verdict are off the points ----------------------------
def test_pareto_legend_and_verdict_do_not_cover_the_points(qtbot, tmp_path):
    import pyqtgraph as pg

    from studio.ui.compare_view import CompareView
    from tests.ui.test_compare_history_theme import _step, _store

    a = [_step(0, "bf16", 6.0), _step(1, "compile", 4.0)]
    b = [_step(0, "bf16", 5.0), _step(1, "compile", 3.0)]
    repo, ids = _store(tmp_path / "c.db", [("a", a), ("b", b)])
    view = CompareView(repo, ids)
    qtbot.addWidget(view)
    view.show()
    qtbot.wait(50)
    plot = view.findChild(pg.PlotWidget, "paretoChart").getPlotItem()
    legend_box = plot.legend.sceneBoundingRect()
    assert len(plot.legend.items) == 3  # two runs and the front
    assert not legend_box.intersects(plot.getViewBox().sceneBoundingRect())
    texts = [i for i in plot.items if isinstance(i, pg.TextItem)]
    assert not any("fastest" in t.toPlainText() for t in texts)
    assert "fastest" in plot.titleLabel.text
    repo.close()


# -- 5: an opset the exporter cannot write is refused while typing, said once ---------------------
def test_an_impossible_opset_is_refused_in_the_form_and_said_once(recipe_view, qtbot):
    state, view, _ = recipe_view
    view._add_from_palette(view._palette_items["export_onnx"])
    view.steps.setCurrentRow(0)
    editor = view._form.fields["opset"].editor
    toggle = view._form.fields["opset"].toggle
    if toggle is not None and not toggle.isChecked():
        toggle.setChecked(True)
    editor.setFocus()
    editor.selectAll() if hasattr(editor, "selectAll") else None
    qtbot.keyClicks(editor.lineEdit() if hasattr(editor, "lineEdit") else editor, "17")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    error = view._form.fields["opset"].error
    assert not error.isHidden() and "writes opsets 18 to 23" in error.text()
    assert state.recipe.steps[0].params.get("opset") is None  # never stored
    assert not view.btn_run.isEnabled()
    assert view.problem.text().count("writes opsets 18 to 23") == 1
    assert "writes opsets 18 to 23" in view.btn_run.toolTip()


# -- 11: the bad-file error goes with the next success ----------------------------------------------
def test_a_bad_file_error_is_cleared_by_a_later_successful_run(qtbot):
    from PySide6.QtCore import QObject, Signal

    from studio.state import AppState
    from studio.ui.model_view import ModelView

    class FakeServices(QObject):
        jobFailed = Signal(str, str)
        runFinished = Signal(str, object)

    class Outcome:
        ok = True

    state = AppState()
    services = FakeServices()
    state.set_model("zoo:mlp", {"kind": "torch", "input_spec": "x:float32[batch,1024]"})
    view = ModelView(state, services)
    qtbot.addWidget(view)
    state.modelFailed.emit("cannot read /tmp/bad.onnx: not an ONNX file\nprotobuf: truncated")
    assert "not an ONNX file" in view.status.text() and "protobuf" not in view.status.text()
    assert "protobuf" in view.status.toolTip()  # the whole message on hover
    services.runFinished.emit("job1", Outcome())
    assert view.status.text() == "" and view.status.toolTip() == ""


# -- 10: the Serve test dialog keeps its fields' size while a test runs ---------------------------
def test_serve_test_dialog_is_not_squashed_while_it_runs(qtbot):
    from PySide6.QtCore import QObject, Signal

    from studio.state import AppState
    from studio.ui.serve_test_dialog import ServeTestDialog

    class FakeServices(QObject):
        jobProgress = Signal(str, str, float, str)
        serveTestFinished = Signal(str, str, object, str)
        repo = None
        state = AppState()

    services = FakeServices()
    dlg = ServeTestDialog(services, "abcdef123456")
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.wait(20)
    before = [w.height() for w in (dlg.clients, dlg.batches, dlg.duration, dlg.btn_start)]
    dlg.job_id = "job1"  # as start() leaves it
    dlg.progress.setVisible(True)
    dlg.refresh()
    services.jobProgress.emit("job1", "serve_test", 0.3, "load test: 16 clients, " * 20)
    qtbot.wait(20)
    after = [w.height() for w in (dlg.clients, dlg.batches, dlg.duration, dlg.btn_start)]
    assert after == before
    assert all(w.height() >= w.sizeHint().height() for w in (dlg.clients, dlg.duration))
    assert "16 clients" in dlg.status.toolTip()


# -- 12: Optimize plot points have a hover label -----------------------------------------------------
def test_optimize_points_have_a_hover_label(qtbot):
    from accel.search.engine import TrialRecord
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.optimize_dialog import OptimizeDialog
    from tests.ui.test_window_parts import FakePool

    state = AppState()
    state.set_model("zoo:mlp", {"kind": "torch", "input_spec": "x:float32[batch,1024]"})
    dlg = OptimizeDialog(state, Services(state, pool=FakePool(), open_store=False))
    qtbot.addWidget(dlg)
    for n, (chain, speed, drop) in enumerate(
        [(("bf16",), 1.5, 0.0002), (("export_onnx", "onnxruntime"), 2.5, 0.00001)]
    ):
        t = TrialRecord(number=n, chain=chain, steps=[], origin="seed", status="ok")
        t.metrics = {"speedup": speed, "cosine_drop": drop}
        dlg._on_trial(t)
    for item in (dlg.scatter, dlg.front_scatter):
        assert item.opts["hoverable"]
        for point in item.points():
            tip = item.opts["tip"](x=point.pos().x(), y=point.pos().y(), data=point.data())
            trial = dlg.trials[int(point.data())]
            assert f"trial {trial.number}: {trial.label}" in tip and "speedup" in tip
    assert len(dlg.scatter.points()) + len(dlg.front_scatter.points()) == 2


# -- 12: Fit fits the whole graph, a tall one too ------------------------------------------------------
def test_fit_shows_a_tall_graph_whole(qtbot):
    from accel.graph.synthetic import synthetic_graph
    from studio.state import AppState
    from studio.ui.graph_view import GraphView
    from studio.ui.graph_view.style import READABLE_SCALE

    state = AppState()
    gv = GraphView(state, None)
    qtbot.addWidget(gv)
    gv.resize(760, 420)
    gv.show()
    with qtbot.waitSignal(gv.layoutReady, timeout=60000):
        state.set_graph(synthetic_graph(300, blocks=9))
    with qtbot.waitSignal(gv.layoutReady, timeout=60000):
        gv.expand_level()  # Expand: one more level open, too tall to read fitted
    qtbot.keyClick(gv.canvas, Qt.Key.Key_F)  # the F key, as a person fits it
    canvas = gv.canvas
    visible = canvas.mapToScene(canvas.viewport().rect()).boundingRect()
    items = gv.scene.itemsBoundingRect()
    assert len(gv._items) > 20 and items.height() * READABLE_SCALE > canvas.viewport().height()
    assert visible.contains(items)


# -- 12: node details break lines between words, never inside one --------------------------------
def _breaks_inside_words(browser) -> list[str]:
    doc = browser.document()
    found = []
    block = doc.begin()
    while block.isValid():
        text, layout = block.text(), block.layout()
        for i in range(1, layout.lineCount()):
            at = layout.lineAt(i).textStart()
            if 0 < at < len(text) and text[at - 1].isalnum() and text[at].isalnum():
                found.append(text[max(0, at - 8) : at] + "|" + text[at : at + 8])
        block = block.next()
    return found


def test_node_details_never_break_a_word(qtbot):
    from studio.state import AppState
    from studio.ui.graph_view import GraphView

    gv = GraphView(AppState(), None)
    qtbot.addWidget(gv)
    gv.resize(760, 420)
    gv.show()
    gv.details.setHtml(
        "<h3>fc1 Linear</h3><table cellspacing=4><tr><td>Parameters</td><td>1,049,600</td></tr>"
        "<tr><td>Shape</td><td>float32[batch, 1024] → float32[batch, 1024]</td></tr></table>"
    )
    gv.details.setFixedWidth(120)
    qtbot.wait(20)
    assert _breaks_inside_words(gv.details) == []


# -- every disabled action says why (tooltip and status tip) -------------------------------------
def test_every_disabled_button_and_action_of_a_fresh_window_says_why(window, qtbot):
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QAbstractButton

    window.show()
    qtbot.wait(20)
    silent = []
    for b in window.findChildren(QAbstractButton):
        if b.objectName() in ("ScrollLeftButton", "ScrollRightButton"):  # a tab bar's arrows
            continue
        if not b.isEnabled() and b.text() and not (b.toolTip() and b.statusTip()):
            silent.append(b.text())
    for a in window.findChildren(QAction):
        if a.text() and not a.isEnabled() and not (a.toolTip() and a.statusTip()):
            silent.append(a.text())
    assert silent == [], silent


def test_pareto_without_points_shows_a_message_not_empty_axes(qtbot, tmp_path):
    import pyqtgraph as pg

    from studio.store import Repository
    from studio.ui.compare_view import CompareView

    repo = Repository.open(str(tmp_path / "c.db"))
    ids = [repo.create_run(model_source="zoo:mlp", name=f"r{i}").id for i in range(2)]
    view = CompareView(repo, ids)
    qtbot.addWidget(view)
    plot = view.findChild(pg.PlotWidget, "paretoChart").getPlotItem()
    assert not plot.getAxis("left").isVisible() and not plot.getAxis("bottom").isVisible()
    texts = [i.toPlainText() for i in plot.items if isinstance(i, pg.TextItem)]
    assert any("no step has both" in t for t in texts)
    repo.close()
