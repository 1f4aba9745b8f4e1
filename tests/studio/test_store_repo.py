"""Repository API: runs, events, NaN flags, filters, search, compare, delete, export."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math

import pytest

from studio.store import Repository, RunDetail, RunFilter, RunNotFound, RunRecord
from studio.store import db as dbmod


@pytest.fixture
def repo(tmp_path):
    r = Repository.open(tmp_path / "studio.db")
    yield r
    r.close()


def _events(run_dir: str, nan_metric: bool = False) -> list[dict]:
    return [
        {
            "event": "run_started",
            "run_dir": run_dir,
            "model_source": "zoo:mlp",
            "model_kind": "torch",
            "device": "cpu",
            "recipe": {"name": "fp16-fast", "steps": [{"pass": "fp16"}]},
            "environment": {"torch": "2.13", "cpu": "test cpu"},
            "num_steps": 1,
            "baseline": {"latency_p50_ms": 4.0, "size_bytes": 4000.0},
        },
        {"event": "step_started", "index": 0, "pass_name": "fp16", "params": {"keep": ["fc"]}},
        {"event": "progress", "index": 0, "fraction": 0.5, "message": "half"},
        {
            "event": "step_finished",
            "index": 0,
            "pass_name": "fp16",
            "status": "succeeded",
            "duration_s": 0.25,
            "metrics": {
                "latency_p50_ms": 2.0,
                "speedup": 2.0,
                "accuracy": float("nan") if nan_metric else 0.9,
                "note": "text is not a metric",
            },
            "parity": {
                "passed": False,
                "first_failure": "logits",
                "outputs": [
                    {"name": "logits", "max_abs": 0.5, "cosine": 0.9, "passed": False},
                    {"name": "aux", "max_abs": 1e-6, "nan_count": 0, "passed": True},
                ],
            },
            "artifacts": [
                {"kind": "model", "path": f"{run_dir}/model.pt", "sha256": "ab" * 32, "bytes": 6}
            ],
            "details": {"backend": "eager"},
        },
        {"event": "run_finished", "status": "succeeded", "duration_s": 1.5, "summary": {"best": 0}},
    ]


def _record(repo: Repository, tmp_path, **kw) -> RunDetail:
    run = repo.create_run(
        model_source="zoo:mlp", recipe={"name": "fp16-fast", "steps": [{"pass": "fp16"}]}, **kw
    )
    run_dir = tmp_path / run.id
    run_dir.mkdir()
    (run_dir / "model.pt").write_bytes(b"weights")
    for ev in _events(str(run_dir), nan_metric=True):
        repo.record_event(run.id, ev)
    return repo.get_run(run.id)


def test_run_events_are_recorded_with_steps_metrics_parity_artifacts(repo, tmp_path):
    d = _record(repo, tmp_path, tags=["fp16", "demo"], notes="first try")
    assert isinstance(d, RunDetail) and isinstance(d.run, RunRecord)
    assert d.status == "succeeded"
    assert d.run.model_source == "zoo:mlp" and d.run.recipe_name == "fp16-fast"
    assert d.run.tags == ["demo", "fp16"]
    assert d.environment["cpu"] == "test cpu"
    assert d.run.duration_s == pytest.approx(1.5)
    assert [s.index for s in d.steps] == [-1, 0]
    base, step = d.steps
    # Events in the flat form of runs recorded before the typed timing: still readable, the
    # timing keys become the step's StepTiming (studio.store.timing_keys).
    assert base.pass_name == "baseline" and base.metrics == {"size_bytes": 4000.0}
    assert base.timing.mode == "baseline" and base.timing.p50_ref_ms == 4.0
    assert step.params == {"keep": ["fc"]} and step.duration_s == pytest.approx(0.25)
    assert step.timing.speedup == 2.0 and step.timing.p50_step_ms == 2.0
    assert "speedup" not in step.metrics and "note" not in step.metrics
    assert math.isnan(step.metrics["accuracy"])  # NaN survives as a flag
    assert step.parity_passed is False
    by_name = {p.output_name: p for p in step.parity}
    assert by_name["logits"].passed is False and by_name["logits"].metrics["max_abs"] == 0.5
    assert by_name["aux"].metrics == {"max_abs": 1e-6, "nan_count": 0.0}
    assert step.worst_parity() == ("logits", "max_abs", 0.5)
    assert step.artifacts[0].kind == "model" and step.artifacts[0].bytes == 6
    assert step.details == {"backend": "eager"}


def test_nan_is_stored_as_flag_not_float(repo, tmp_path):
    d = _record(repo, tmp_path)
    with repo.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT key, value, is_nan FROM metrics WHERE key = 'accuracy'"
        ).fetchall()
    assert rows == [("accuracy", None, 1)]
    assert math.isnan(d.steps[1].metrics["accuracy"])


def test_orm_rows_never_leak(repo, tmp_path):
    d = _record(repo, tmp_path)

    def walk(obj):
        assert not hasattr(obj, "_sa_instance_state"), type(obj)
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name))
        elif isinstance(obj, list | tuple):
            for v in obj:
                walk(v)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)

    walk(d)
    walk(repo.list_runs())
    walk(repo.compare([d.id]))


def test_prefix_lookup_and_clear_errors(repo, tmp_path):
    d = _record(repo, tmp_path)
    assert repo.get_run(d.id[:8]).id == d.id
    with pytest.raises(RunNotFound, match="studio history"):
        repo.get_run("ffffffff")
    with pytest.raises(RunNotFound, match="at least 4"):
        repo.get_run("a")


def test_list_filter_and_search(repo, tmp_path):
    a = repo.create_run(
        model_source="zoo:resnet", recipe={"name": "int8"}, tags=["quant"], notes="Nightly check"
    )
    b = repo.create_run(
        model_source="zoo:mlp", recipe={"name": "fp16"}, tags=["fp16"], name="baseline mlp"
    )
    c = repo.create_run(
        model_source="my_pkg.nets:build", recipe={"name": "prune_50"}, device="cuda:0"
    )
    repo.set_status(a.id, "failed", error="boom")
    repo.set_status(b.id, "running")
    ids = lambda runs: [r.id for r in runs]  # noqa: E731
    assert ids(repo.list_runs()) == [c.id, b.id, a.id]  # newest first
    assert ids(repo.list_runs(oldest_first=True, limit=2)) == [a.id, b.id]
    assert ids(repo.list_runs(limit=1, offset=1)) == [b.id]
    assert ids(repo.list_runs(RunFilter(status=("failed",)))) == [a.id]
    assert ids(repo.list_runs(RunFilter(model="resnet"))) == [a.id]
    assert ids(repo.list_runs(RunFilter(recipe="prune"))) == [c.id]
    assert ids(repo.list_runs(RunFilter(tags=("fp16",)))) == [b.id]
    assert ids(repo.list_runs(RunFilter(device="cuda"))) == [c.id]
    assert ids(repo.search("nightly")) == [a.id]  # notes, case-insensitive
    assert ids(repo.search("QUANT")) == [a.id]  # tags
    assert ids(repo.search("baseline mlp")) == [b.id]  # all words
    assert ids(repo.search("baseline resnet")) == []
    assert ids(repo.search("100%")) == []  # LIKE wildcards are escaped
    assert repo.count_runs() == 3 and repo.count_runs(RunFilter(status=("running", "failed"))) == 2
    future = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    assert repo.count_runs(RunFilter(since=future)) == 0


def test_update_tags_notes(repo, tmp_path):
    r = repo.create_run(model_source="zoo:mlp", tags=["a"])
    r2 = repo.update_run(r.id, add_tags=["b", "a"], notes="ok", name="n")
    assert r2.tags == ["a", "b"] and r2.notes == "ok" and r2.name == "n"
    r3 = repo.update_run(r.id[:8], remove_tags=["a"])
    assert r3.tags == ["b"]
    assert repo.list_runs(RunFilter(tags=("a",))) == []


def test_final_status_closes_running_steps(repo):
    r = repo.create_run(model_source="zoo:mlp")
    repo.record_event(r.id, {"event": "step_started", "index": 0, "pass_name": "p", "params": {}})
    repo.set_status(r.id, "crashed", exit_code=-11, signal="SIGSEGV", log_tail="Fatal Python error")
    d = repo.get_run(r.id)
    assert d.status == "crashed" and d.exit_code == -11 and d.signal == "SIGSEGV"
    assert d.log_tail == "Fatal Python error"
    assert d.steps[0].status == "crashed"
    assert d.run.finished_at is not None and d.run.duration_s is not None
    with pytest.raises(ValueError, match="unknown run status"):
        repo.set_status(r.id, "exploded")


def test_compare_side_by_side(repo, tmp_path):
    a = _record(repo, tmp_path)
    b = repo.create_run(model_source="zoo:mlp")
    repo.record_event(
        b.id,
        {
            "event": "step_finished",
            "index": 0,
            "pass_name": "fp16",
            "status": "failed",
            "duration_s": 0.1,
            "metrics": {"speedup": 0.5},
            "parity": None,
            "artifacts": [],
            "error": "bad",
        },
    )
    cmp = repo.compare([a.id, b.id[:8]])
    assert cmp.columns == [a.id, b.id]
    assert [t.speedup for t in cmp.timings[(0, "fp16")]] == [2.0, 0.5]
    base_a, base_b = cmp.timings[(-1, "baseline")]
    assert base_a.p50_ref_ms == 4.0 and base_b is None
    assert cmp.rows[(-1, "baseline", "size_bytes")] == [4000.0, None]
    assert cmp.parity[(0, "fp16")] == [False, None]
    assert list(cmp.rows)[0][0] == -1  # baseline first


def test_delete_run_with_and_without_files(repo, tmp_path):
    a = _record(repo, tmp_path)
    b = _record(repo, tmp_path)
    child = repo.create_run(model_source="zoo:mlp", parent_run_id=a.id)
    assert repo.delete_run(a.id) == []
    assert (tmp_path / a.id / "model.pt").exists()  # files kept unless asked
    assert repo.get_run(child.id).run.parent_run_id is None  # link cleared, child kept
    removed = repo.delete_run(b.id, delete_files=True)
    assert removed == [str(tmp_path / b.id / "model.pt")]
    assert not (tmp_path / b.id).exists()
    with pytest.raises(RunNotFound):
        repo.get_run(b.id)
    with repo.engine.connect() as conn:  # cascades removed the children rows
        for table in ("steps", "metrics", "parity_results", "artifacts"):
            n = conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one()
            assert n == 0, table


def test_export_run_is_plain_json(repo, tmp_path):
    d = _record(repo, tmp_path, tags=["x"])
    repo.record_profile(
        [{"name": "fc1", "op_type": "Linear", "time_ms": 0.5, "percent": 60.0, "params": 10}],
        run_id=d.id,
        step_index=0,
        device="cpu",
    )
    out = repo.export_run_json(d.id, tmp_path / "run.json")
    doc = json.loads(out.read_text())  # strict JSON: NaN was turned into a string
    assert doc["format"] == "accel-studio.run/1"
    assert doc["run"]["id"] == d.id and doc["run"]["tags"] == ["x"]
    step = doc["steps"][1]
    assert step["metrics"]["accuracy"] == "NaN" and step["timing"]["speedup"] == 2.0
    assert doc["profiles"][0]["rows"][0]["name"] == "fc1"
    assert doc["recipe"]["name"] == "fp16-fast"


def test_profiles_for_model_and_step(repo, tmp_path):
    rows = [
        {"name": f"layer{i}", "op_type": "Conv2d", "time_ms": float(i), "flops": 1e6, "custom": i}
        for i in range(3)
    ]
    p = repo.record_profile(
        rows, model_source="zoo:resnet", device="cpu", summary={"total_ms": 3.0}
    )
    assert [r.name for r in p.rows] == ["layer0", "layer1", "layer2"]
    assert p.rows[2].extra == {"custom": 2}
    got = repo.get_profiles(model_source="zoo:resnet")
    assert len(got) == 1 and got[0].summary == {"total_ms": 3.0}
    assert repo.get_profiles(model_source="zoo:mlp") == []
    with pytest.raises(ValueError):
        repo.record_profile(rows)


def test_models_and_recipes_are_deduplicated(repo):
    r1 = repo.create_run(model_source="zoo:mlp", recipe={"name": "a", "steps": [1]})
    r2 = repo.create_run(model_source="zoo:mlp", recipe={"steps": [1], "name": "a"})
    assert r1.recipe_hash == r2.recipe_hash
    assert len(repo.list_models()) == 1


def test_db_url_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv(dbmod.DB_ENV, raising=False)
    assert dbmod.resolve_db_url(tmp_path / "a.db") == f"sqlite:///{tmp_path / 'a.db'}"
    assert dbmod.resolve_db_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    monkeypatch.setenv(dbmod.DB_ENV, str(tmp_path / "env.db"))
    assert dbmod.resolve_db_url(None).endswith("env.db")
    monkeypatch.delenv(dbmod.DB_ENV)
    monkeypatch.setattr(dbmod, "settings_path", lambda: tmp_path / "settings.json")
    (tmp_path / "settings.json").write_text(json.dumps({"database": str(tmp_path / "set.db")}))
    assert dbmod.resolve_db_url(None).endswith("set.db")
    (tmp_path / "settings.json").unlink()
    monkeypatch.setenv("ACCEL_STUDIO_HOME", str(tmp_path / "home"))
    assert dbmod.resolve_db_url(None) == f"sqlite:///{tmp_path / 'home' / 'studio.db'}"
    monkeypatch.delenv("ACCEL_STUDIO_HOME")


def test_sqlite_connection_settings(repo):
    with repo.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == dbmod.BUSY_TIMEOUT_MS


def test_writes_begin_immediate_reads_deferred(repo):
    from sqlalchemy import event

    seen: list[str] = []

    def record(conn, cursor, statement, *rest):
        seen.append(" ".join(statement.split()[:2]))

    event.listen(repo.engine, "before_cursor_execute", record)
    repo.create_run(model_source="zoo:mlp")
    writes = [s for s in seen if s.startswith("BEGIN")]
    seen.clear()
    repo.list_runs()
    reads = [s for s in seen if s.startswith("BEGIN")]
    assert writes == ["BEGIN IMMEDIATE"] and reads == ["BEGIN DEFERRED"]


def test_in_memory_database_works():
    r = Repository.open("sqlite://")
    run = r.create_run(model_source="zoo:mlp", tags=["mem"])
    assert r.get_run(run.id).run.tags == ["mem"] and r.count_runs() == 1
    r.close()
