"""One use-case layer: the CLI commands run the job specs and functions the GUI's workers run,
and `studio profile --store` saves a profile the way the studio's Profile action does."""

from __future__ import annotations

import pytest

import accel.jobs as jobs
from accel.job_results import ProfileResult
from accel.job_specs import AnalyzeJob, InspectJob, ProfileJob
from studio.cli import main
from studio.usecases import model_job, store_profile

MLP_SPEC = "x:float32[8,1024]"
QUICK = ["--iters", "2", "--warmup", "1", "--threads", "1"]


@pytest.fixture
def spy(monkeypatch):
    """Records the spec each use-case function gets, from a worker's job or from the CLI."""
    import dataclasses

    from accel import job_registry

    calls: list = []
    for name in ("profile", "analyze", "inspect"):
        decl = job_registry.declaration(name)

        def wrapper(job, emit, cancel, real=decl.use_case):
            calls.append(job)
            return real(job, emit, cancel)

        new = dataclasses.replace(decl, use_case=wrapper)
        monkeypatch.setitem(job_registry._DECLARED, name, new)
    return calls


@pytest.fixture
def boxed(monkeypatch):
    """Records the spec each CLI command hands to a (confined) worker."""
    import studio.usecases as usecases

    calls: list = []
    real = usecases.run_boxed

    def wrapper(spec, emit=None):
        calls.append(spec)
        return real(spec, emit)

    monkeypatch.setattr(usecases, "run_boxed", wrapper)
    return calls


def test_cli_commands_run_the_workers_use_cases(spy, boxed, capsys, tmp_path):
    assert main(["profile", "zoo:mlp", *QUICK]) == 0
    assert main(["graph", "zoo:mlp"]) == 0
    args = ["analyze", "zoo:mlp", "--input", "x:float32[2,1024]", "--pass"]
    args += ["quantize_dynamic_int8", "--data", "synthetic(batches=1)", "--max-layers", "1"]
    assert main(args) == 0
    # The commands build the specs and a worker runs them: nothing runs in this process.
    assert spy == []
    assert [type(j) for j in boxed] == [ProfileJob, InspectJob, AnalyzeJob]
    assert [j.model.source for j in boxed] == ["zoo:mlp"] * 3
    assert boxed[0].benchmark and not boxed[0].layers and boxed[0].threads == 1
    assert boxed[2].model.input_spec == "x:float32[2,1024]" and boxed[2].max_layers == 1
    # The worker's job function parses the same JSON into the same spec and calls the same
    # function.
    spy.clear()
    params = model_job(InspectJob, "zoo:mlp", graph=False).to_params()
    out = jobs.JOBS["inspect"](params, lambda e: None, lambda: False)
    assert spy == [InspectJob.from_params(params)] and out["info"]["source"] == "zoo:mlp"


def test_cli_profile_store_reads_back_like_the_studios(tmp_path, capsys):
    from studio.store import Repository

    db = tmp_path / "studio.db"
    argv = ["--db", str(db), "profile", "zoo:mlp", "--input", MLP_SPEC, *QUICK, "--store"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "per-layer profile" in out and "stored: profile" in out  # --store implies --layers

    # The studio's Profile action: the params Services.profile_current submits, run as a
    # worker runs them, the result stored as Services._record_profile stores it.
    gui_spec = model_job(ProfileJob, "zoo:mlp", MLP_SPEC, trace_path=None, iters=2, threads=1)
    gui_result = jobs.JOBS["profile"](gui_spec.to_params(), lambda e: None, lambda: False)
    repo = Repository.open(str(db))
    try:
        store_profile(repo, ProfileResult.from_dict(gui_result))
        cli_rec, gui_rec = repo.get_profiles(model_source="zoo:mlp")
    finally:
        repo.close()
    assert cli_rec.model_id == gui_rec.model_id  # same model row: source, kind, hash, spec
    assert cli_rec.device == gui_rec.device == "cpu"

    def shape(rec):
        return [(r.name, r.op_type, r.flops, r.params) for r in rec.rows]

    assert shape(cli_rec) == shape(gui_rec)
    assert {r.name for r in cli_rec.rows} == {"", "fc1", "act1", "fc2", "act2", "fc3"} | {
        "(unattributed)"
    }
    # times are stored (the "(unattributed)" rest may be negative: profiler overhead)
    assert all(r.time_ms is not None for r in cli_rec.rows)
    assert all(r.time_ms > 0 for r in cli_rec.rows if r.name.startswith("fc"))
    assert set(gui_rec.summary) == {"total_ms", "total_flops"}
    assert set(cli_rec.summary) == {"total_ms", "total_flops", "benchmark"}
    assert cli_rec.summary["benchmark"]["p50_ms"] > 0


def test_profile_without_store_writes_no_database(tmp_path, capsys):
    db = tmp_path / "studio.db"
    assert main(["--db", str(db), "profile", "zoo:mlp", *QUICK]) == 0
    assert "stored" not in capsys.readouterr().out and not db.exists()


def test_bad_input_spec_is_a_clear_cli_error(capsys):
    assert main(["profile", "zoo:mlp", "--input", "x:float32[8,", *QUICK]) == 2
    err = capsys.readouterr().err
    assert "input_spec" in err and "]" in err


def test_session_grants_only_what_the_person_allowed():
    from studio.usecases import Session, UnconfirmedCode

    session = Session()
    recipe = {
        "model": {"source": "my_pkg.nets:build", "trust_pickle": True},
        "data": {"calibration": "my_data.py:batches"},
        "steps": [{"pass": "bf16"}],
    }
    with pytest.raises(UnconfirmedCode) as info:
        session.run_spec(recipe, out="runs/x")
    assert info.value.refs == ["my_pkg.nets:build", "my_data.py:batches"]
    session.opened("my_pkg.nets:build")  # opened as the model: its factory is theirs
    assert session.unconfirmed_code(recipe) == ["my_data.py:batches"]
    session.confirm(["my_data.py:batches"])
    params = session.run_spec(recipe, out="runs/x").to_params()
    assert params["trust_recipe_code"] is True
    assert "trust_pickle" not in params  # the recipe's own trust_pickle grants nothing
    assert not session.model_spec(ProfileJob, "m.pt").model.trust_pickle
    session.opened("m.pt", trust_pickle=True)
    assert session.model_spec(ProfileJob, "m.pt", iters=3).to_params() == {
        **model_job(ProfileJob, "m.pt", trust_pickle=True, iters=3).to_params()
    }
    recipe_pt = {"model": {"source": "m.pt"}, "steps": []}
    assert session.run_spec(recipe_pt, out="o").to_params()["trust_pickle"] is True


def test_job_events_read_back_as_typed_events():
    from accel.events import Log, Progress
    from studio.usecases import typed_event

    events: list = []
    jobs.JOBS["inspect"]({"model": "zoo:mlp"}, events.append, lambda: False)
    typed = [typed_event(e) for e in events]
    assert typed and all(isinstance(e, Progress) and e.index == -1 for e in typed)
    assert [e.message for e in typed] == ["loading the model", "building the graph"]
    assert typed_event(Log("info", "hi").to_dict()) == Log("info", "hi")
    assert typed_event({"event": "plugin_thing", "x": 1}) is None
