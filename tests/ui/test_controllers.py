"""The feature controllers behind Services: each job goes back to the controller that
submitted it (by object, not by a name), the pool gets the kind from the spec's declaration,
a superseded result is dropped, and the GUI's deploy runs the declared deploy job."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("PySide6")

from studio.workers import JobOutcome  # noqa: E402


class FakePool:
    """Records submissions; a test ends jobs through ``services.router``."""

    lanes: list = []

    def __init__(self) -> None:
        self.submitted: list[tuple[str, str, dict]] = []
        self._ids = itertools.count(1)

    def subscribe(self, fn):
        return lambda: None

    def submit(self, kind, params=None, **kw):
        job_id = f"job{next(self._ids)}"
        self.submitted.append((job_id, kind, dict(params or {})))

        class Handle:
            pass

        h = Handle()
        h.job_id, h.run_id = job_id, None
        return h

    def cancel(self, job_id):
        pass

    def shutdown(self, **kw):
        pass


@pytest.fixture
def services(qtbot):
    from studio.services import Services
    from studio.state import AppState

    s = Services(AppState(), pool=FakePool(), open_store=False)
    s.state.model_source = "zoo:mlp"
    yield s
    s.shutdown()


def _done(job_id: str, result: dict, status: str = "succeeded", error: str = "") -> JobOutcome:
    return JobOutcome(job_id=job_id, kind="?", status=status, result=result, error=error)


def test_each_job_ends_at_the_controller_that_submitted_it(services):
    exported, failed = [], []
    services.onnxExported.connect(exported.append)
    services.jobFailed.connect(lambda name, msg: failed.append((name, msg)))
    export_id = services.export_onnx()
    profile_id = services.profile_current()
    kinds = {job_id: kind for job_id, kind, _ in services.pool.submitted}
    assert kinds == {export_id: "export_onnx", profile_id: "profile"}  # the declared kinds
    services.router.on_finished(profile_id, _done(profile_id, {}, "failed", "no torch"))
    services.router.on_finished(export_id, _done(export_id, {"path": "/x/model.onnx"}))
    assert exported == ["/x/model.onnx"]
    assert failed == [("profile", "no torch")]
    assert services.state.model_info["onnx_export"] == "/x/model.onnx"
    # a job nobody here submitted (another window's) is nobody's business
    services.router.on_finished("job99", _done("job99", {"path": "/y"}))
    assert exported == ["/x/model.onnx"]


def test_a_superseded_result_is_dropped(services):
    seen = []
    services.onnxExported.connect(seen.append)
    first = services.export_onnx()
    second = services.export_onnx()
    services.router.on_finished(first, _done(first, {"path": "/old.onnx"}))
    services.router.on_finished(second, _done(second, {"path": "/new.onnx"}))
    assert seen == ["/new.onnx"]


def test_bad_open_parameters_say_why_without_a_job(services):
    failed, model_failed = [], []
    services.jobFailed.connect(lambda name, msg: failed.append(name))
    services.state.modelFailed.connect(model_failed.append)
    assert services.open_model("zoo:mlp", "x:float32[8,") is None
    assert failed == ["open"] and "could not open zoo:mlp" in model_failed[0]
    assert services.pool.submitted == []


def test_deploy_without_a_store_says_so_and_runs_nothing(services):
    results = []
    services.deployFinished.connect(lambda run, res, err: results.append((run, res, err)))
    assert services.deploy_triton("abc", "/tmp/repo") is None
    assert results == [("abc", None, "no database: the run cannot be looked up")]
    assert services.pool.submitted == []


def test_deploy_runs_the_declared_job_and_reports_its_result(services, monkeypatch):
    from accel.job_specs import DeployJob

    art = {"kind": "onnx", "path": "/runs/r/model.onnx", "step": 0, "pass": "export_onnx"}
    spec = DeployJob(
        artifact_kind="onnx",
        artifact_path=art["path"],
        input_spec="x:float32[batch,4]",
        out="/tmp/repo",
        run_id="r1",
    )
    monkeypatch.setattr("studio.serve_test.deploy_spec", lambda repo, run, out, **kw: (spec, art))
    services.context.repo = object()  # looked up by the stubbed deploy_spec only
    results = []
    services.deployFinished.connect(lambda run, res, err: results.append((run, res, err)))
    job_id = services.deploy_triton("r1", "/tmp/repo")
    assert services.pool.submitted == [(job_id, "deploy", spec.to_params())]
    services.router.on_finished(job_id, _done(job_id, {"platform": "onnxruntime_onnx"}))
    assert results == [("r1", {"platform": "onnxruntime_onnx", "artifact": art}, "")]
    crashed = services.deploy_triton("r1", "/tmp/repo")
    services.router.on_finished(crashed, _done(crashed, {}, "crashed", "the worker died"))
    assert results[-1] == ("r1", None, "the worker died")


def test_a_decoder_is_profiled_generating_unless_the_box_is_off(services):
    def profiled() -> dict:
        services.profile_current()
        return services.pool.submitted[-1][2]

    assert not profiled().get("generate")  # zoo:mlp: no generation_split fact
    services.state.model_info = {"generation_split": None}  # a decoder LM
    assert profiled()["generate"] is True
    services.profiles.generate = False
    assert not profiled().get("generate")
