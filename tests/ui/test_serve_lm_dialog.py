"""The GUI's serve test of a generation run (issue 31, part 7): the Serve test dialog serves
the run's stateful LM token by token, with and without continuous batching, as a worker job;
it asks for clients, requests per client and a time bound (no batch sweep), says why it
cannot start, and reports tokens/s and TTFT when the test is stored. The slow test serves
the tiny decoder's stateful IR for real through Triton (two servers)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from studio.store import Repository
from studio.store.serve_tests import serve_tests
from tests.studio.test_serve_lm_cli import STATEFUL, _copy_ir, _record, stateful_ir  # noqa: F401
from tests.ui.test_serve_test_dialog import _Services as _FakeServices

needs_pytriton = pytest.mark.skipif(
    importlib.util.find_spec("pytriton") is None, reason="needs nvidia-pytriton"
)


class _Services(_FakeServices):
    """What the dialog reads, and a serve_test that records its call (no pool)."""

    def __init__(self, repo):
        super().__init__(repo)
        self.calls: list[tuple[str, dict]] = []

    def serve_test(self, run_id, **options):
        self.calls.append((run_id, options))
        return "job-1"


@pytest.fixture
def gen_runs(tmp_path):
    """A generation run ending in a stateful OpenVINO LM (recorded only) and one that does not."""
    repo = Repository.open(tmp_path / "gen.db")
    ir = tmp_path / "ir" / "model.xml"
    ir.parent.mkdir()
    ir.write_text("<net/>")  # recorded, never loaded by these tests
    pt = tmp_path / "model.pt"
    pt.write_bytes(b"x")
    lm = _record(repo, tmp_path, [("openvino_stateful", STATEFUL, ir)])
    torch_only = _record(repo, tmp_path, [("bf16", {}, pt)])
    yield repo, lm, torch_only
    repo.close()


@needs_pytriton
def test_the_dialog_asks_for_generation_settings_and_sends_them(qtbot, gen_runs):
    from studio.ui.serve_test_dialog import ServeTestDialog

    repo, lm, torch_only = gen_runs
    services = _Services(repo)
    dlg = ServeTestDialog(services, lm)
    qtbot.addWidget(dlg)
    dlg.show()
    assert dlg.windowTitle().startswith("Generation serve test")
    assert dlg.batches.isHidden() and not dlg.requests.isHidden()  # no batch sweep for an LM
    assert dlg.btn_start.isEnabled() and dlg.reason.isHidden(), dlg.reason.text()
    assert "continuous-batching" in dlg.status.text()
    for field, text in ((dlg.clients, "1,3"), (dlg.requests, "5"), (dlg.duration, "30")):
        field.setFocus()
        qtbot.keyClick(field, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
        qtbot.keyClicks(field, text)
        qtbot.keyClick(field, Qt.Key.Key_Tab)
    qtbot.mouseClick(dlg.btn_start, Qt.MouseButton.LeftButton)
    assert services.calls == [(lm, {"clients": [1, 3], "duration_s": 30.0, "requests": 5})]
    assert dlg.job_id == "job-1" and not dlg.btn_start.isEnabled()
    report = {
        "workload": "generate", "prompt_tokens": 8, "new_tokens": 4,
        "load": [
            {"mode": m, "clients": 3, "requests": 5, "errors": 0, "tokens": 60,
             "tokens_per_s": tps, "ttft_p50_ms": 20.0, "ttft_p99_ms": p99, "tpot_p50_ms": 5.0}
            for m, tps, p99 in (("no continuous batching", 40.0, 300.0),
                                ("continuous batching", 70.0, 90.0))
        ],
    }  # fmt: skip
    services.serveTestFinished.emit("job-1", lm, {"serve_test_id": 1, "report": report}, "")
    text = dlg.status.text()
    assert "70.0 tokens/s with continuous batching vs 40.0 without (1.75x)" in text, text
    assert "TTFT p99 90 ms vs 300 ms" in text and dlg.btn_start.isEnabled()

    # a generation run whose last model is not a stateful LM: the CLI's reason, no start
    bad = ServeTestDialog(services, torch_only)
    qtbot.addWidget(bad)
    assert not bad.btn_start.isEnabled() and "Add an openvino_stateful step" in bad.reason.text()


@needs_pytriton
def test_the_controller_submits_the_lm_job_and_a_failure_is_shown(qtbot, gen_runs):
    """Through the real services: the job is a serve_lm_test in a worker; the recorded IR is
    no model, so the worker fails and the dialog says so (the run is untouched)."""
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.serve_test_dialog import ServeTestDialog

    repo, lm, _ = gen_runs
    services = Services(AppState(), repo=repo, cpu_workers=1, warm_worker=False)
    try:
        dlg = ServeTestDialog(services, lm)
        qtbot.addWidget(dlg)
        dlg.clients.setText("1")
        dlg.requests.setValue(1)
        dlg.start()
        assert dlg.job_id
        assert any(j["kind"] == "serve_lm_test" for j in services.pool.jobs())
        qtbot.waitUntil(lambda: dlg.job_id is None, timeout=180_000)
        assert dlg.status.text().startswith("Serve test ended:"), dlg.status.text()
        assert serve_tests(repo, lm) == [] and repo.get_run(lm).run.status == "succeeded"
    finally:
        services.shutdown()


@needs_pytriton
@pytest.mark.slow  # two Triton servers
def test_a_real_generation_serve_test_from_the_dialog_is_stored(qtbot, stateful_ir, tmp_path):  # noqa: F811
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.serve_test_dialog import ServeTestDialog

    repo = Repository.open(tmp_path / "real.db")
    run = _record(
        repo, tmp_path, [("openvino_stateful", STATEFUL, _copy_ir(stateful_ir, tmp_path / "ir"))]
    )
    services = Services(AppState(), repo=repo, cpu_workers=1, warm_worker=False)
    try:
        dlg = ServeTestDialog(services, run)
        qtbot.addWidget(dlg)
        dlg.clients.setText("2")
        dlg.requests.setValue(2)
        dlg.start()
        qtbot.waitUntil(lambda: dlg.job_id is None, timeout=300_000)
        text = dlg.status.text()
        assert "2 client(s):" in text and "tokens/s with continuous batching" in text, text
        (test,) = serve_tests(repo, run)
        assert test.workload == "generate"
        off, on = test.generation_pair(2)
        assert off.tokens == on.tokens == 16 and off.errors == on.errors == 0
        assert Path(tmp_path / run / "serve_test.json").is_file()
    finally:
        services.shutdown()
        repo.close()
