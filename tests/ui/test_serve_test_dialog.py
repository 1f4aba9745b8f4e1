"""The GUI's serve test of a finished run (History ▸ Serve test…, Recipe ▸ Serve test run…):
disabled with the reason when it cannot run, dispatched as a worker job (never the GUI
thread), stored like the CLI's and shown in History; the slow test serves zoo:mlp for real
with 2 clients and checks that Cancel stops the Triton server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QItemSelectionModel, QObject, Signal

from studio.store import Repository
from studio.store.serve_tests import serve_tests

SPEC = "x:float32[batch,1024]; batch=1..4:2"
FAKE_JOB = str(Path(__file__).with_name("fake_serve_job.py"))


def _record_run(repo, tmp_path, name: str, artifact_kind: str, pass_name: str, path: Path):
    run = repo.create_run(model_source="zoo:mlp", recipe={"name": name}, input_spec=SPEC)
    run_dir = tmp_path / run.id
    run_dir.mkdir()
    repo.record_event(
        run.id,
        {
            "event": "run_started",
            "run_dir": str(run_dir),
            "model_source": "zoo:mlp",
            "model_kind": "torch",
            "input_spec": SPEC,
            "device": "cpu",
            "recipe": {"name": name},
            "environment": {},
            "num_steps": 1,
            "baseline": {"latency_p50_ms": 1.0},
        },
    )
    repo.record_event(
        run.id,
        {
            "event": "step_finished",
            "index": 0,
            "pass_name": pass_name,
            "status": "succeeded",
            "duration_s": 0.1,
            "metrics": {"latency_p50_ms": 1.0},
            "parity": {"passed": True, "outputs": []},
            "artifacts": [{"kind": artifact_kind, "path": str(path), "sha256": "", "bytes": 1}],
            "details": {},
        },
    )
    repo.record_event(run.id, {"event": "run_finished", "status": "succeeded", "duration_s": 1})
    return run.id


@pytest.fixture
def runs(tmp_path):
    """A database with an ONNX run of zoo:mlp (servable) and a bf16 one (not)."""
    import torch

    from accel.models.zoo import build_zoo_model

    onnx = tmp_path / "mlp.onnx"
    torch.onnx.export(
        build_zoo_model("mlp").eval(),
        (torch.randn(2, 1024),),
        str(onnx),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        dynamo=False,
    )
    pt = tmp_path / "model.pt"
    pt.write_bytes(b"not servable")
    repo = Repository.open(tmp_path / "serve.db")
    served = _record_run(repo, tmp_path, "onnx", "onnx", "export_onnx", onnx)
    plain = _record_run(repo, tmp_path, "bf16", "model", "bf16", pt)
    yield repo, served, plain
    repo.close()


class _State(QObject):
    runsChanged = Signal()
    status = Signal(str)


class _Services(QObject):
    """Just what History and the dialog read: no pool (nothing may be submitted)."""

    jobProgress = Signal(str, str, float, str)
    serveTestFinished = Signal(str, str, object, str)

    def __init__(self, repo):
        super().__init__()
        self.repo = repo
        self.state = _State()


def _select(view, run_id):
    rows = {view.model.rows[i].id: i for i in range(view.model.rowCount())}
    sm = view.table.selectionModel()
    sm.clearSelection()
    sm.select(
        view.model.index(rows[run_id], 0),
        QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
    )


def test_serve_test_is_disabled_with_the_reason(qtbot, runs, monkeypatch):
    from studio import serve_test as st
    from studio.ui.history_view import HistoryView
    from studio.ui.serve_test_dialog import ServeTestDialog

    repo, served, plain = runs
    view = HistoryView(_State(), _Services(repo))
    qtbot.addWidget(view)
    button = view.serve_test.button
    assert not button.isEnabled() and "select one" in button.toolTip()
    _select(view, plain)
    assert not button.isEnabled()
    assert "export_onnx" in button.toolTip() and "bf16" in button.toolTip()
    _select(view, served)
    assert button.isEnabled(), button.toolTip()
    dlg = view.serve_test.open()
    qtbot.addWidget(dlg)
    assert dlg.btn_start.isEnabled() and dlg.reason.isHidden()

    # The dialog of an unservable run says why and cannot start.
    bad = ServeTestDialog(view.services, plain)
    qtbot.addWidget(bad)
    assert not bad.btn_start.isEnabled() and not bad.reason.isHidden()
    assert "export_onnx" in bad.reason.text()

    # Without PyTriton nothing can be served, whatever the run.
    real = st.importlib.util.find_spec
    monkeypatch.setattr(
        st.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pytriton" else real(name, *a),
    )
    st.pytriton_missing.cache_clear()
    try:
        _select(view, plain)
        _select(view, served)
        assert not button.isEnabled() and "nvidia-pytriton" in button.toolTip()
        dlg.refresh()
        assert not dlg.btn_start.isEnabled() and "nvidia-pytriton" in dlg.reason.text()
    finally:
        monkeypatch.undo()
        st.pytriton_missing.cache_clear()


def test_bad_counts_are_refused_before_any_job(qtbot, runs):
    from studio.ui.serve_test_dialog import ServeTestDialog

    repo, served, _ = runs
    dlg = ServeTestDialog(_Services(repo), served)  # no pool: a submit would raise
    qtbot.addWidget(dlg)
    dlg.clients.setText("1,four")
    dlg.start()
    assert "whole numbers" in dlg.status.text() and dlg.job_id is None
    dlg.clients.setText("0,2")
    dlg.start()
    assert ">= 1" in dlg.status.text() and dlg.job_id is None


@pytest.fixture
def services(runs, tmp_path):
    from studio.services import Services
    from studio.state import AppState

    repo = runs[0]
    svc = Services(AppState(), repo=repo, cpu_workers=1, warm_worker=False)
    yield svc
    svc.shutdown()


def test_serve_test_runs_as_a_worker_job_and_lands_in_history(qtbot, runs, services, monkeypatch):
    """The job runs in a worker process (a stand-in job there returns a fixed report), the
    result is stored by the studio and History's serve results refresh."""
    from studio.ui.history_view import HistoryView

    monkeypatch.setenv("ACCEL_STUDIO_PLUGINS", FAKE_JOB)
    repo, served, _ = runs
    view = HistoryView(services.state, services)
    qtbot.addWidget(view)
    _select(view, served)
    assert view.serve_view.isHidden()  # no serve test yet
    dlg = view.serve_test.open()
    qtbot.addWidget(dlg)
    dlg.clients.setText("2")
    dlg.batches.setText("1,2")
    dlg.start()
    assert dlg.job_id and not dlg.btn_start.isEnabled() and dlg.btn_cancel.isEnabled()
    assert any(j["kind"] == "serve_test" for j in services.pool.jobs())  # queued, not run here
    done = []
    services.serveTestFinished.connect(lambda *a: done.append(a))
    qtbot.waitUntil(lambda: bool(done), timeout=120_000)
    job_id, run_id, info, error = done[0]
    assert not error and run_id == served
    report = info["report"]
    assert report["worker_pid"] != os.getpid()  # ran in a worker process
    assert report["params"]["clients"] == [2] and report["params"]["batches"] == [1, 2]
    assert report["params"]["artifact_kind"] == "onnx" and report["params"]["run_id"] == served
    (stored,) = serve_tests(repo, served)
    assert stored.id == info["serve_test_id"] and stored.speedup(2) == pytest.approx(1.8)
    assert Path(info["saved_to"]).is_file()  # serve_test.json in the run folder, as the CLI
    qtbot.waitUntil(lambda: not view.serve_view.isHidden(), timeout=5000)
    assert "1.80x" in view.serve_view.title.text()
    assert "1.80x" in dlg.status.text() and dlg.btn_start.isEnabled()


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _tritonservers() -> list:
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "tritonserver" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.slow
def test_real_serve_test_of_zoo_mlp_and_cancel_stops_the_server(qtbot, runs, services):
    pytest.importorskip("pytriton")
    from studio.ui.serve_test_dialog import ServeTestDialog

    repo, served, _ = runs
    done = []
    services.serveTestFinished.connect(lambda *a: done.append(a))
    dlg = ServeTestDialog(services, served)
    qtbot.addWidget(dlg)
    dlg.clients.setText("2")
    dlg.batches.setText("1,2")
    dlg.duration.setValue(1.0)
    dlg.start()
    qtbot.waitUntil(lambda: bool(done), timeout=300_000)
    _, _, info, error = done[0]
    assert not error, error
    load = info["report"]["load"]
    assert {(p["mode"], p["clients"]) for p in load} == {
        ("no batching", 2),
        ("dynamic batching", 2),
    }
    assert all(p["errors"] == 0 and p["requests"] > 0 for p in load)
    (stored,) = serve_tests(repo, served)
    assert {p.clients for p in stored.load} == {2} and stored.speedup(2) is not None
    # the batches Triton formed reach the store through the worker job
    off, on = stored.pair(2)
    assert off.avg_batch == pytest.approx(1.0) and 1.0 <= on.avg_batch <= 2.0

    # Cancel while the clients load the server: the job ends and its Triton server is gone.
    done.clear()
    dlg.duration.setValue(120.0)
    dlg.start()
    qtbot.waitUntil(lambda: "client" in dlg.status.text(), timeout=300_000)
    servers = _tritonservers()
    assert servers  # serving now
    dlg.cancel()
    qtbot.waitUntil(lambda: bool(done), timeout=60_000)
    assert done[0][2] is None and "cancel" in done[0][3].lower()
    qtbot.waitUntil(lambda: not any(_alive(p) for p in servers), timeout=30_000)
    assert len(serve_tests(repo, served)) == 1  # nothing stored for the cancelled one
