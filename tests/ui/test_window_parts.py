"""Window parts without workers: themes, layout, drops, the open dialog, Netron, the CLI."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QDropEvent, QPalette


class FakePool:
    """Stands in for WorkerPool: records submissions, runs nothing."""

    lanes = []

    def __init__(self) -> None:
        self.submitted: list[tuple[str, dict]] = []
        self._listeners = []

    def subscribe(self, fn):
        self._listeners.append(fn)
        return lambda: None

    def submit(self, kind, params=None, **kw):
        self.submitted.append((kind, dict(params or {})))

        class H:
            job_id = f"job{len(self.submitted)}"
            run_id = None

        return H()

    def cancel(self, job_id, reason=""):
        pass

    def shutdown(self, **kw):
        pass


@pytest.fixture
def window(qtbot, tmp_path):
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.main_window import MainWindow

    state = AppState()
    pool = FakePool()
    services = Services(state, pool=pool, open_store=False)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(state, services, settings=settings)
    qtbot.addWidget(win)
    win.pool = pool
    yield win
    win.netron_view.release()


def test_first_start_opens_the_demo_then_the_last_model(window):
    window.open_initial_model()
    opened = lambda: [(kind, p["model"]) for kind, p in window.pool.submitted]  # noqa: E731
    assert opened() == [("inspect", "zoo:resnet")]
    window.settings.setValue("last_model", "zoo:mlp")
    window.open_initial_model()
    assert opened()[-1] == ("inspect", "zoo:mlp")
    window.open_initial_model("m.onnx")
    assert opened()[-1] == ("inspect", "m.onnx")


def test_theme_menu_switches_palette_and_is_remembered(window, qapp):
    window.set_theme("dark")
    qapp.processEvents()
    assert qapp.palette().color(QPalette.ColorRole.Window).lightness() < 100
    gv = window.graph_view
    assert gv.palette().color(QPalette.ColorRole.Window).lightness() < 100
    assert gv._dark  # the graph's own colours follow
    assert window.settings.value("theme") == "dark"
    assert window.theme_actions["dark"].isChecked()
    window.set_theme("light")
    assert qapp.palette().color(QPalette.ColorRole.Window).lightness() > 150
    window.set_theme("system")
    assert window.theme_actions["system"].isChecked()


def test_layout_is_saved_and_restored(window, tmp_path, qtbot):
    from studio.ui.main_window import MainWindow

    window.docks["history"].hide()
    window.save_layout()
    again = MainWindow(window.state, window.services, settings=window.settings)
    qtbot.addWidget(again)
    assert again.docks["history"].isHidden()
    assert not again.docks["model"].isHidden()
    again.reset_layout()
    assert not again.docks["history"].isHidden()


def test_shortcuts(window):
    keys = {
        "open": window.act_open,
        "profile": window.act_profile,
        "run": window.act_run,
        "find": window.act_find,
        "fit": window.act_fit,
    }
    assert keys["open"].shortcut().toString() == "Ctrl+O"
    assert keys["profile"].shortcut().toString() == "Ctrl+P"
    assert keys["run"].shortcut().toString() == "Ctrl+R"
    assert keys["find"].shortcut().toString() == "Ctrl+F"
    assert keys["fit"].shortcut().toString() == "F"


def _drop(win, paths):
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    ev = QDropEvent(
        QPointF(10, 10),
        Qt.DropAction.CopyAction,
        md,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    win.dropEvent(ev)


def test_dropping_a_model_file_opens_it(window, tmp_path):
    f = tmp_path / "net.onnx"
    f.write_bytes(b"")
    _drop(window, [tmp_path / "notes.txt", f])
    assert [(k, p["model"]) for k, p in window.pool.submitted] == [("inspect", str(f))]


def test_dropping_a_recipe_loads_it_and_opens_its_model(window, tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text("name: dropped\nmodel: {source: zoo:mlp}\nsteps:\n  - pass: channels_last\n")
    _drop(window, [r])
    assert window.state.recipe.name == "dropped"
    assert window.state.recipe_path == str(r)
    assert [s.pass_name for s in window.state.recipe.steps] == ["channels_last"]
    assert window.pool.submitted[-1][1]["model"] == "zoo:mlp"


def test_open_dialog_builds_sources_and_validates_the_spec(qtbot):
    from studio.ui.open_model_dialog import OpenModelDialog

    dlg = OpenModelDialog(recent=["a.onnx"])
    qtbot.addWidget(dlg)
    dlg.tabs.setCurrentIndex(1)
    assert dlg.source() == "zoo:resnet"
    dlg.tabs.setCurrentIndex(2)
    dlg.factory.setText("my_pkg.nets:build(width=8)")
    dlg.weights.setText("w.pt")
    dlg.spec.setText("x:float32[1,3")
    assert dlg.spec_error.text()
    assert not dlg.buttons.button(dlg.buttons.StandardButton.Open).isEnabled()
    dlg.spec.setText("x:float32[1,3,8,8]")
    assert dlg.spec_error.text() == ""
    assert dlg.source() == "my_pkg.nets:build(width=8)@w.pt"
    assert dlg.input_spec() == "x:float32[1,3,8,8]"


def test_about_lists_library_versions():
    from studio.ui.main_window import about_html, library_versions

    v = library_versions()
    assert "PySide6" in v and "Python" in v
    assert v["PySide6"] in about_html()


def test_panel_that_fails_to_build_becomes_a_label_with_the_reason(window):
    from PySide6.QtWidgets import QLabel

    from studio.ui.main_window import load_panel

    w = load_panel("studio.ui.no_such_panel", "NoSuchView", window.state, window.services)
    assert w.objectName() == "placeholder_NoSuchView"
    assert "could not be loaded: ModuleNotFoundError" in w.findChild(QLabel).text()


def test_gui_command_honours_db(monkeypatch):
    import studio.app
    from studio import cli

    seen = {}
    monkeypatch.setattr(studio.app, "run_gui", lambda **kw: seen.update(kw) or 0)
    assert cli.main(["--db", "x.db"]) == 0
    assert seen == {"db": "x.db", "model": None, "recipe": None}
    assert cli.main(["--db", "y.db", "gui", "zoo:mlp"]) == 0
    assert seen["db"] == "y.db" and seen["model"] == "zoo:mlp"


def test_netron_serves_locally_without_consent_or_telemetry(window, qtbot, tmp_path):
    pytest.importorskip("netron")
    from studio.ui import netron_view

    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph), str(path))
    nv = window.netron_view
    window.state.set_model(str(path), {"kind": "onnx", "onnx_path": str(path)})
    assert nv.target_file() == str(path)
    assert not nv.export_btn.isVisible()
    nv.show_file(str(path))
    assert nv.url().startswith("http://localhost:")
    if not netron_view.HAVE_WEBENGINE:
        return
    loaded = []
    nv.web.loadFinished.connect(loaded.append)
    qtbot.waitUntil(lambda: bool(loaded), timeout=60000)
    assert loaded[0] is True
    out = []
    qtbot.waitUntil(lambda: _js(nv, "document.cookie", out), timeout=20000)
    assert "consent=" in out[-1]
    # Netron's "packaged" mode starts analytics: its beacon is stubbed, and any request
    # that is not to the local server is blocked (the list holds only non-local URLs).
    assert all(not netron_view.is_local_url(u) for u in nv.interceptor.blocked)
    sent = []
    qtbot.waitUntil(
        lambda: _js(nv, "String(navigator.sendBeacon).includes('native code')", sent), timeout=20000
    )
    assert sent[-1] in ("False", "false")
    body = []
    qtbot.waitUntil(lambda: _js(nv, "document.body.innerText", body), timeout=20000)
    assert "cookies" not in body[-1].lower()


def _js(nv, code, out):
    if getattr(nv, "_js_pending", False):
        return False
    nv._js_pending = True

    def done(result):
        nv._js_pending = False
        out.append(str(result))

    nv.web.page().runJavaScript(code, 0, done)
    return bool(out)


def test_netron_offers_export_for_torch_models(window):
    nv = window.netron_view
    window.state.set_model("zoo:resnet", {"kind": "torch"})
    window.center.setCurrentWidget(nv)
    assert nv.target_file() is None
    assert nv.export_btn.isEnabled()
    nv.export()
    kind, params = window.pool.submitted[-1]
    assert kind == "export_onnx" and params["model"] == "zoo:resnet"
    assert params["out"].endswith(".onnx")


def test_keep_in_float_on_an_onnx_model_uses_node_names(window):
    gv, state = window.graph_view, window.state
    state.set_model("m.onnx", {"kind": "onnx"})
    i = gv.keep_in_float("fc", ["/fc/Gemm"])
    assert state.recipe.steps[i].pass_name == "quantize_onnx_static"
    assert state.recipe.steps[i].params["exclude"] == ["/fc/Gemm"]
    state.set_model("zoo:mlp", {"kind": "torch"})
    j = gv.keep_in_float("fc1")
    # A torch model never reuses the ONNX step: module paths mean nothing there.
    assert j != i and state.recipe.steps[j].pass_name == "quantize_static_int8"
    assert state.recipe.steps[j].params["exclude"] == ["fc1"]
    assert gv.keep_in_float("") == -1


def test_diff_step_picker_lists_saved_steps_and_diffs_the_pick(window, monkeypatch):
    from accel.graph.diff import GraphDiff

    gv, services = window.graph_view, window.services
    assert not gv.diff_step_box.isEnabled()  # no run yet
    monkeypatch.setattr(
        services, "diff_steps", lambda run_id=None: [(0, "1. fold_batchnorm"), (2, "3. bf16")]
    )
    asked = []
    monkeypatch.setattr(
        services, "diff_run", lambda run_id=None, step_index=None: asked.append(step_index) or "j"
    )
    window.state.currentRunChanged.emit("run1")
    box = gv.diff_step_box
    assert [box.itemText(i) for i in range(box.count())] == ["1. fold_batchnorm", "3. bf16"]
    assert box.isEnabled() and gv.diff_step() == 2  # default: the last saved model
    gv.diff_box.setChecked(True)
    assert asked == [2]
    box.setCurrentIndex(0)
    box.activated.emit(0)  # the user picks step 1
    assert asked == [2, 0] and gv.diff_box.isChecked()
    gv.set_diff({"diff": GraphDiff().to_dict(), "step": "step_02_bf16", "step_index": 2})
    assert gv.diff_step() == 2  # the combo follows the diff shown
    assert "step_02_bf16" in gv._diff_label
    gv.diff_box.setChecked(False)
