"""Typed job specs: the worker protocol's flat JSON in and out, one ModelRef, clear errors."""

from __future__ import annotations

import json

import pytest

from accel.job_registry import declaration, declared
from accel.job_specs import (
    AnalyzeJob,
    GraphDiffJob,
    InspectJob,
    JobParamsError,
    ProfileJob,
    RunRecipeJob,
)
from accel.jobs import JOBS
from accel.recipe import ModelRef

MLP_SPEC = "x:float32[8,1024]"


def test_flat_params_fold_into_one_model_ref_and_back():
    params = {"model": "zoo:mlp", "input_spec": MLP_SPEC, "trust_pickle": True, "iters": 3}
    job = ProfileJob.from_params(params)
    assert job.model == ModelRef(source="zoo:mlp", input_spec=MLP_SPEC, trust_pickle=True)
    assert job.iters == 3 and job.layers and not job.benchmark
    back = job.to_params()
    assert back["model"] == "zoo:mlp" and back["input_spec"] == MLP_SPEC
    assert back["trust_pickle"] is True and "device" not in back
    assert ProfileJob.from_params(json.loads(json.dumps(back))) == job
    # the nested form and a mapping input spec give the same ref
    nested = {
        "model": {
            "source": "zoo:mlp",
            "input_spec": {"inputs": [{"name": "x", "shape": [8, 1024], "dtype": "float32"}]},
        }
    }
    assert InspectJob.from_params(nested).model.input_spec == MLP_SPEC
    # no opt-in: trust_pickle is False and left out of the JSON
    plain = InspectJob.from_params({"model": "zoo:mlp"})
    assert plain.model.trust_pickle is False and "trust_pickle" not in plain.to_params()


@pytest.mark.parametrize(
    ("cls", "params", "words"),
    [
        (ProfileJob, {"model": "zoo:mlp", "iters": 0}, ["profile job", "iters", "greater"]),
        (ProfileJob, {"model": "zoo:mlp", "itres": 3}, ["itres", "unknown parameter", "iters"]),
        (ProfileJob, {"model": "zoo:mlp", "layers": False}, ["nothing to do"]),
        (InspectJob, {"input_spec": MLP_SPEC}, ["inspect job", "model", "missing"]),
        (InspectJob, {"model": "  "}, ["empty source"]),
        (InspectJob, {"model": "zoo:mlp", "input_spec": "x:float32[8,"}, ["input_spec", "]"]),
        (InspectJob, {"model": "zoo:mlp", "device": "gpu"}, ["device", "cuda:N"]),
        (AnalyzeJob, {"model": "zoo:mlp", "method": "fast"}, ["analyze job", "method", "local"]),
        (AnalyzeJob, {"model": "zoo:mlp", "min_cosine": 2}, ["min_cosine"]),
        (GraphDiffJob, {"model": "zoo:mlp"}, ["run_dir", "missing"]),
        (RunRecipeJob, {"recipe": {}, "trust": True}, ["run_recipe job", "trust", "unknown"]),
        (InspectJob, ["zoo:mlp"], ["JSON object"]),
    ],
)
def test_bad_params_say_what_to_change(cls, params, words):
    with pytest.raises(JobParamsError) as info:
        cls.from_params(params)
    for word in words:
        assert word in str(info.value)


def test_every_model_job_function_parses_through_its_spec():
    # the job functions reject bad params before loading anything
    for kind in ("inspect", "profile", "analyze", "export_onnx", "graph_diff"):
        with pytest.raises(JobParamsError, match=f"{kind} job: .*unknown parameter"):
            JOBS[kind]({"model": "zoo:mlp", "no_such": 1}, lambda e: None, lambda: False)
    with pytest.raises(JobParamsError, match="recipe"):
        JOBS["run_recipe"]({}, lambda e: None, lambda: False)


def test_every_job_spec_is_declared_once_with_its_use_case():
    import accel.job_specs as specs

    classes = [
        c
        for c in vars(specs).values()
        if isinstance(c, type) and issubclass(c, specs.JobParams) and c.kind
    ]
    assert len(classes) >= 10
    for cls in classes:
        decl = declaration(cls.kind)
        assert decl.params is cls and decl.use_case is not None, cls.kind
        assert JOBS[cls.kind] is decl.run
    # the warm worker serves only declared light jobs; recipe runs are recorded as runs
    warm = {k for k, d in declared().items() if d.warm}
    assert warm == {"inspect", "profile", "export_onnx", "graph_diff", "analyze"}
    assert declaration("run_recipe").records_run and not declaration("inspect").records_run
    with pytest.raises(KeyError, match="unknown job kind 'nope'; known: .*inspect"):
        declaration("nope")


def test_a_declared_result_round_trips_to_its_type():
    from accel.job_results import BisectResult, ProfileResult

    assert declaration("profile").result == ProfileResult.from_dict
    assert declaration("bisect").typed_result({"steps": []}) == BisectResult([])
    assert declaration("graph_diff").typed_result({"a": 1}) == {"a": 1}  # no type: the JSON


def test_analyze_job_honours_trust_pickle(tmp_path):
    # A full pickle loads only with the caller's opt-in; analyze used to drop it (issue 16).
    torch = pytest.importorskip("torch")
    from accel.errors import ModelLoadError

    path = tmp_path / "net.pt"
    torch.save(torch.nn.Sequential(torch.nn.Linear(4, 2)), path)
    params = {
        "model": str(path),
        "input_spec": "x:float32[2,4]",
        "pass_name": "quantize_dynamic_int8",
        "data": "synthetic(batches=1)",
    }
    with pytest.raises(ModelLoadError, match="trust_pickle"):
        JOBS["analyze"](params, lambda e: None, lambda: False)
    out = JOBS["analyze"]({**params, "trust_pickle": True}, lambda e: None, lambda: False)
    assert out["ranking"] == ["0"]


def test_run_recipe_job_sends_only_the_callers_opt_ins():
    job = RunRecipeJob.from_params({"recipe": "r.yaml", "trust_pickle": True, "device": "cuda:1"})
    assert job.to_params() == {"recipe": "r.yaml", "trust_pickle": True, "device": "cuda:1"}
    plain = RunRecipeJob.from_params({"recipe": {"name": "x", "model": {"trust_pickle": True}}})
    assert plain.trust_pickle is False and "trust_pickle" not in plain.to_params()


def test_serve_test_job_params_round_trip_and_bad_numbers():
    from accel.job_specs import ServeTestJob

    params = {
        "artifact_kind": "onnx",
        "artifact_path": "/runs/r/model.onnx",
        "input_spec": "x:float32[batch,6]; batch=1..8:2",
        "clients": [16, 1, 4, 4],
        "duration_s": 2,
    }
    job = ServeTestJob.from_params(params)
    assert job.clients == [1, 4, 16] and job.batches is None and job.max_requests == 2000
    assert ServeTestJob.from_params(json.loads(json.dumps(job.to_params()))) == job
    for bad, words in (
        ({"clients": [0, 2]}, ["serve_test job", "clients", ">= 1"]),
        ({"duration_s": 0}, ["duration_s", "greater"]),
        ({"input_spec": "x:float32[batch,"}, ["input_spec"]),
        ({"prot": 8000}, ["prot", "unknown parameter", "port"]),
        ({"port": 0}, ["port", "greater"]),
    ):
        with pytest.raises(JobParamsError) as info:
            JOBS["serve_test"]({**params, **bad}, lambda e: None, lambda: False)
        for word in words:
            assert word in str(info.value)
