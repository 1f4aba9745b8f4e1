"""The studio window driven with real worker processes: open, graph, profile, select, overlay."""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import QSettings


@pytest.fixture(scope="module")
def studio(qapp, tmp_path_factory, wait):
    wait_until = wait
    """One window with zoo:resnet opened and profiled by real workers (shared: workers are slow)."""
    home = tmp_path_factory.mktemp("studio-window")
    old = os.environ.get("ACCEL_STUDIO_HOME")
    os.environ["ACCEL_STUDIO_HOME"] = str(home)
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.main_window import MainWindow

    state = AppState()
    services = Services(state, db=str(home / "studio.db"))
    settings = QSettings(str(home / "studio.ini"), QSettings.Format.IniFormat)
    win = MainWindow(state, services, settings=settings)
    win.resize(1400, 900)
    win.show()
    failures: list[str] = []
    services.jobFailed.connect(lambda kind, msg: failures.append(f"{kind}: {msg}"))
    win.open_initial_model()  # first start: the demo model
    wait_until(lambda: state.graph is not None or failures, 240)
    assert not failures, failures
    wait_until(lambda: bool(win.graph_view._items), 60)
    win.profile()
    wait_until(lambda: state.profile is not None or failures, 240)
    assert not failures, failures
    yield win
    win.close()
    services.shutdown()
    if old is None:
        os.environ.pop("ACCEL_STUDIO_HOME", None)
    else:
        os.environ["ACCEL_STUDIO_HOME"] = old


def test_first_start_opens_the_demo_and_shows_its_graph(studio):
    state, gv = studio.state, studio.graph_view
    assert state.model_source == "zoo:resnet"
    assert state.model_info["num_params"] > 100_000
    assert len(state.graph.nodes) > 20
    shown = gv._items
    assert len(shown) > 5
    # Default view opens container modules: some stage is expanded into a frame.
    assert gv._frames, "no module group was opened by default"
    assert "zoo:resnet" in studio.settings.value("recent_models")


def test_profile_fills_the_chart_and_tables(studio):
    pv = studio.panels["profile"]
    prof = studio.state.profile
    assert prof.total_ms > 0
    assert pv.top_rows and all(r.name for r in pv.top_rows)
    assert pv.top_rows[0].self_ms >= pv.top_rows[-1].self_ms
    assert pv.layers_model.rowCount() == len(prof.rows)
    assert pv.ops_model.rowCount() == len(prof.ops) > 0


def test_bar_click_selects_the_node_in_the_graph(studio, wait):
    wait_until = wait
    pv, gv, state = studio.panels["profile"], studio.graph_view, studio.state
    # Pick a bar whose module sits inside a group that is closed now, so selecting it
    # has to open the group and lay it out again.
    # Only rows that are modules of the graph: "(unattributed)" (time outside any module)
    # can be the slowest row on a busy machine and has no node to select.
    groups = gv.graph.groups if gv.graph is not None else {}
    closed = [i for i, r in enumerate(pv.top_rows) if r.name in groups]
    index = closed[0] if closed else 0
    name = pv.top_rows[index].name
    pv.click_bar(index)
    assert state.selected == name
    wait_until(lambda: gv.selected_unit() is not None, 30)
    unit = gv.selected_unit()
    node = gv._view_nodes[unit]
    # The selected box is the module itself or one of its ops.
    assert node.module_path == name or node.module_path.startswith(name + ".")
    assert pv.bar_color(index).name() == "#e8590c"
    # and the layer table shows the same row selected
    row = pv.layers.currentIndex()
    src = pv.layers_proxy.mapToSource(row)
    assert pv.layers_model.rows[src.row()].name == name


def test_latency_overlay_colours_nodes_by_time(studio):
    gv, state = studio.graph_view, studio.state
    state.set_overlay("latency")
    assert gv.overlay_box.currentData() == "latency"
    values = {k: v for k, v in gv._values.items() if k in gv._items}
    assert len(values) >= 3
    hot = max(values, key=values.get)
    cold = min(values, key=values.get)
    assert values[hot] > values[cold]
    # Hotter nodes are redder: less green in the heat colour.
    assert gv.node_fill(hot).green() < gv.node_fill(cold).green()
    state.set_overlay("params")
    pvals = gv.overlay_values("params")
    conv = [k for k, n in gv._view_nodes.items() if n.num_params]
    assert conv and all(pvals[k] == gv._view_nodes[k].num_params for k in conv)
    state.set_overlay("none")


def test_search_finds_and_reveals_nodes(studio, wait):
    wait_until = wait
    gv, state = studio.graph_view, studio.state
    gv.search.setText("conv")
    assert gv._matches and all(
        "conv"
        in (
            state.graph.node(m).name + state.graph.node(m).op + state.graph.node(m).module_path
        ).lower()
        for m in gv._matches
    )
    gv.find_next()
    target = gv._matches[0]
    wait_until(lambda: gv.selected_unit() is not None and state.selected == target, 30)
    gv.search.clear()


def test_expand_and_collapse_a_group(studio, wait):
    wait_until = wait
    gv = studio.graph_view
    boxes = [n.module_path for n in gv._view_nodes.values() if n.op == "group"]
    group = next(
        p
        for p in boxes
        if studio.state.graph.groups[p].nodes or studio.state.graph.groups[p].children
    )
    before = set(gv._items)
    gv.expand_group(group)
    wait_until(lambda: group in gv._frames, 30)
    assert f"group:{group}" not in gv._items
    assert set(gv._items) != before
    gv.collapse_group(group)
    wait_until(lambda: f"group:{group}" in gv._items, 30)


def test_keep_in_float_adds_the_module_to_a_quantization_step(studio):
    gv, state = studio.graph_view, studio.state
    steps_before = list(state.recipe.steps)
    i = gv.keep_in_float("layer1.0.conv1")
    step = state.recipe.steps[i]
    assert step.pass_name.startswith("quantize")
    assert step.params["exclude"] == ["layer1.0.conv1"]
    gv.keep_in_float("fc")
    assert len(state.recipe.steps) == len(steps_before) + 1
    assert state.recipe.steps[i].params["exclude"] == ["layer1.0.conv1", "fc"]
    state.update_steps(steps_before)


def test_model_view_validates_the_input_spec_inline(studio):
    mv = studio.panels["model"]
    assert "3,64,64" in mv.spec.text()
    mv.spec.setText("x:float32[batch,3")
    assert not mv._validate(mv.spec.text())
    assert mv.spec_error.isVisibleTo(mv) and mv.spec_error.text()
    assert not mv.apply_btn.isEnabled()
    mv.spec.setText("x:float32[2,3,32,32]")
    assert mv._validate(mv.spec.text())
    assert mv.apply_btn.isEnabled()
    mv.spec.setText(studio.state.input_spec)
    mv._validate(mv.spec.text())


def test_status_bar_shows_device_workers_and_database(studio):
    assert "cpu" in studio.device_label.text()
    assert studio.workers_label.text() == "workers: idle"
    assert "studio.db" in studio.db_label.toolTip()


def test_export_trace_writes_chrome_trace(studio, tmp_path):
    import json

    out = studio.panels["profile"].export_trace(str(tmp_path / "t.json"))
    data = json.loads(open(out).read())
    events = data["traceEvents"] if isinstance(data, dict) else data
    assert len(events) > 0


def test_parity_overlay_paints_the_worst_error_per_group(studio):
    gv, state = studio.graph_view, studio.state
    state.layer_parity = {"layer1.0.conv1": 1e-3, "layer1.0.conv2": 5e-2}
    state.set_overlay("parity")
    vals = gv.overlay_values("parity")
    assert vals, "parity overlay painted nothing"
    boxes = {gv._view_nodes[k].module_path: v for k, v in vals.items()}
    # A group holding both layers shows the worse error; no unrelated module is painted.
    for path, v in boxes.items():
        assert path.startswith("layer1"), path
        assert v in (1e-3, 5e-2)
    assert max(vals.values()) == 5e-2
    state.layer_parity = {}
    state.set_overlay("none")


@pytest.mark.slow
def test_diff_mode_colours_what_a_run_changed(studio, wait, screenshots_dir, monkeypatch):
    from accel.recipe import load_recipe

    monkeypatch.setenv("ACCEL_SAVE_STEP_MODELS", "1")  # the worker saves each step's model

    state, services, gv = studio.state, studio.services, studio.graph_view
    recipe = load_recipe(
        {
            "name": "diff-test",
            "model": {"source": "zoo:resnet"},
            "device": "cpu",
            "benchmark": {"warmup": 1, "iters": 2},
            "steps": [{"pass": "fold_batchnorm"}, {"pass": "export_onnx"}],
        }
    )
    done = []
    services.runFinished.connect(lambda job, outcome: done.append(outcome))
    services.run_recipe(recipe)
    wait(lambda: bool(done), 400)
    assert done[0].ok, done[0].error
    failures = []
    services.jobFailed.connect(lambda kind, msg: failures.append(msg))
    gv.diff_box.setChecked(True)
    wait(lambda: gv._diff is not None or failures, 240)
    assert not failures, failures
    # BatchNorm folded into the convs: the original's batch_norm nodes are fused away.
    bn = [n.id for n in state.graph.nodes if "batch_norm" in n.op]
    assert bn and all(gv._diff_status.get(b) in ("fused", "removed") for b in bn)
    painted = {uid: gv.diff_of(uid) for uid in gv._items}
    assert any(painted.values())
    assert "fused" in gv.legend.text()
    os.makedirs(screenshots_dir, exist_ok=True)
    gv.grab().save(os.path.join(screenshots_dir, "graph_diff.png"))
    # Both steps saved a model (fold_batchnorm as model.pt2): pick the first one.
    box = gv.diff_step_box
    assert [box.itemText(i) for i in range(box.count())] == ["1. fold_batchnorm", "2. export_onnx"]
    assert gv.diff_step() == 1
    first = gv._diff
    box.setCurrentIndex(0)
    box.activated.emit(0)
    wait(lambda: (gv._diff is not None and gv._diff is not first) or failures, 240)
    assert not failures, failures
    assert "step_00_fold_batchnorm" in gv._diff_label and gv.diff_step() == 0
    assert bn and all(gv._diff_status.get(b) in ("fused", "removed") for b in bn)
    gv.diff_box.setChecked(False)


@pytest.mark.slow
def test_export_to_onnx_for_netron(studio, wait, screenshots_dir):
    from pathlib import Path

    nv = studio.netron_view
    studio.center.setCurrentWidget(nv)
    exported = []
    studio.services.onnxExported.connect(exported.append)
    assert nv.export_btn.isEnabled()
    nv.export()
    wait(lambda: bool(exported) or nv.export_btn.isEnabled(), 300)
    assert exported, nv.label.text()
    path = Path(exported[0])
    assert path.suffix == ".onnx" and path.stat().st_size > 1000
    assert nv.target_file() == str(path)
    assert nv.served == str(path) and nv.url()
    if nv.web is not None:
        # Netron sets the page title to the model file once it has parsed it.
        wait(lambda: path.name in nv.web.title(), 90)
        try:
            wait(lambda: False, 3)  # let Netron draw
        except TimeoutError:
            pass
    nv.grab().save(f"{screenshots_dir}/netron.png")
    studio.center.setCurrentWidget(studio.graph_view)


def test_screenshots_of_each_panel(studio, screenshots_dir, wait):
    """PNGs of the window and of each panel (light and dark) for people to look at."""
    studio.state.set_overlay("latency")
    studio.graph_view.fit()
    shots = {
        "window": studio,
        "graph": studio.graph_view,
        "profile": studio.panels["profile"],
        "model": studio.panels["model"],
    }
    for theme in ("light", "dark"):
        studio.set_theme(theme)
        # Palette changes reach widgets through posted events: deliver them before grabbing.
        from PySide6.QtWidgets import QApplication

        for _ in range(3):
            QApplication.processEvents()
        studio.repaint()
        for name, w in shots.items():
            path = os.path.join(
                screenshots_dir, f"{name}_{theme}.png" if theme == "dark" else f"{name}.png"
            )
            assert w.grab().save(path), path
            assert os.path.getsize(path) > 1000
    studio.set_theme("system")
    studio.state.set_overlay("none")
