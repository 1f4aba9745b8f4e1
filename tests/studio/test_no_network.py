"""The studio sends nothing anywhere: a recipe through every runtime (torch, ONNX Runtime,
OpenVINO + NNCF), in workers started with a fresh home folder (no telemetry consent file: the
libraries' defaults), attempts no connection and no name lookup beyond loopback."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from studio.workers.pool import WorkerPool

PLUGIN = str(Path(__file__).with_name("net_audit.py"))


@pytest.fixture
def audited(tmp_path, monkeypatch):
    """A pool whose workers record non-loopback network attempts into the returned file."""
    # /dev/shm: every job's box may write there (a job cannot write the test's folder)
    log = Path("/dev/shm") / f"accel-net-audit-{uuid.uuid4().hex}.log"
    log.touch()
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "ACCEL_TEST_NET_LOG": str(log),
        "ACCEL_TEST_NET_SOCKETS": "1",
        "ACCEL_STUDIO_HOME": str(home),
    }
    for name in ("CI", "TF_BUILD", "JENKINS_URL", "NNCF_CI", "DO_NOT_TRACK", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)  # the libraries' defaults, not a CI's
    pool = WorkerPool(None, devices=[], cpu_workers=1, env=env)
    try:
        yield pool, log, home
    finally:
        pool.shutdown()
        log.unlink(missing_ok=True)


def test_the_audit_sees_a_connection_attempt(audited):
    """The check itself: a worker that does try to connect out is caught."""
    pool, log, _ = audited
    out = pool.submit("try_connect", {"host": "192.0.2.1"}, plugins=[PLUGIN]).wait(60)
    assert out.status == "succeeded", out
    assert out.result["connected"] is False  # the job's box has no sockets at all
    assert "socket" in log.read_text()  # and the audit saw it try


def test_openvino_telemetry_cannot_load_in_a_worker(audited):
    pool, _, _ = audited
    out = pool.submit("import_telemetry", {}, plugins=[PLUGIN]).wait(60)
    assert out.result == {"imported": False, "error": out.result["error"]}
    assert "sends no telemetry" in out.result["error"]


RECIPE = {
    "name": "every-runtime",
    "model": {"source": "zoo:resnet"},
    "benchmark": {"warmup": 1, "iters": 2, "rounds": 2, "min_time_s": 0, "dims": {"batch": 1}},
    "gates": {"rtol": 1.0, "atol": 1.0, "min_cosine": 0.5},
    "on_step_error": "stop",
    "steps": [
        {"pass": "fold_batchnorm"},
        {"pass": "export_onnx"},
        {"pass": "onnxruntime"},
        {"pass": "quantize_onnx_dynamic"},
    ],
}
OPENVINO = {
    **RECIPE,
    "name": "openvino-nncf",
    "steps": [{"pass": "openvino"}, {"pass": "quantize_openvino", "params": {"samples": 4}}],
}


@pytest.mark.parametrize("recipe", [RECIPE, OPENVINO], ids=["torch-onnxruntime", "openvino"])
def test_a_recipe_through_every_runtime_makes_no_outside_connection(audited, tmp_path, recipe):
    pool, log, home = audited
    out = pool.submit(
        "run_recipe",
        {"recipe": recipe, "out": str(tmp_path / "run")},
        plugins=[PLUGIN],
        timeout_s=600,
    ).wait(700)
    assert out.status == "succeeded", (out.error, out.log_tail[-2000:])
    assert log.read_text() == ""
    # Nothing was written under the home folder by a library's consent/client-id logic.
    assert not (home / "intel").exists(), os.listdir(home)
