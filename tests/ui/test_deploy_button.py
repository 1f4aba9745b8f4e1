"""The Deploy button: a finished run's ONNX model becomes a Triton model repository."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

RECIPE = {
    "name": "mlp-export",
    "model": {"source": "zoo:mlp"},
    "device": "cpu",
    "benchmark": {"warmup": 1, "iters": 3, "dims": {"batch": 2}},
    "steps": [{"pass": "export_onnx"}],
}


@pytest.fixture
def studio_window(qtbot, tmp_path):
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.main_window import MainWindow

    state = AppState()
    services = Services(state, db=str(tmp_path / "studio.db"))
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(state, services, settings=settings)
    qtbot.addWidget(win)
    yield win
    services.shutdown()
    win.netron_view.release()


@pytest.mark.slow
def test_deploy_button_writes_a_repository_that_parses(studio_window, qtbot, tmp_path, monkeypatch):
    pytest.importorskip("tritonclient.grpc")
    from accel.deploy.triton import parse_config

    win = studio_window
    assert not win.act_deploy.isEnabled()  # no run selected yet
    finished = []
    win.services.runFinished.connect(lambda job, outcome: finished.append(outcome))
    win.services.run_recipe(RECIPE)
    qtbot.waitUntil(lambda: bool(finished), timeout=240_000)
    assert finished[0].ok, finished[0].error
    assert win.act_deploy.isEnabled()

    out = tmp_path / "triton"
    monkeypatch.setattr(
        "studio.ui.main_window.QFileDialog.getExistingDirectory", lambda *a, **k: str(out)
    )
    results = []
    win.services.deployFinished.connect(lambda rid, res, err: results.append((res, err)))
    win.act_deploy.trigger()
    qtbot.waitUntil(lambda: bool(results), timeout=120_000)
    res, err = results[0]
    assert not err and res["platform"] == "onnxruntime_onnx"
    cfg = parse_config((out / "model" / "config.pbtxt").read_text())
    assert cfg.max_batch_size > 0 and cfg.HasField("dynamic_batching")
    assert "wrote" in win.statusBar().currentMessage()

    # A run whose model is no file Triton serves says which step to add.
    results.clear()
    finished.clear()
    win.services.run_recipe({**RECIPE, "steps": [{"pass": "bf16"}]})
    qtbot.waitUntil(lambda: bool(finished), timeout=240_000)
    win.deploy_run(str(tmp_path / "other"))
    qtbot.waitUntil(lambda: bool(results), timeout=60_000)
    assert results[0][0] is None and "export_onnx" in results[0][1]
