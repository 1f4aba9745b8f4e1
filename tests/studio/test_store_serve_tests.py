"""Serve-test results in the store: migration 0004 from a 0003 database, round trip."""

from __future__ import annotations

import sqlite3

import pytest
from alembic import command

from studio.store import Repository
from studio.store import db as dbmod
from studio.store.repo import RunNotFound
from studio.store.serve_tests import add_serve_test, serve_tests

REPORT = {
    "sweep": [
        {"batch": 1, "latency_ms": 0.4, "throughput": 2500.0},
        {"batch": 8, "latency_ms": 0.8, "throughput": 10000.0},
    ],
    "preferred_batch_sizes": [8],
    "max_queue_delay_us": 200,
    "max_batch_size": 8,
    "direct_p50_ms": 0.4,
    "load": [
        {"mode": "no batching", "clients": 4, "requests": 100, "errors": 0,
         "p50_ms": 2.0, "p99_ms": 5.0, "throughput": 80.0},
        {"mode": "dynamic batching", "clients": 4, "requests": 400, "errors": 1,
         "p50_ms": 1.5, "p99_ms": 3.0, "throughput": 400.0, "avg_batch": 3.25},
    ],
}  # fmt: skip


def test_upgrade_from_0003_keeps_runs_and_adds_serve_tests(tmp_path):
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    engine = dbmod.make_engine(url)
    cfg = dbmod.alembic_config(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0003")
        conn.exec_driver_sql(
            "INSERT INTO runs (id, name, kind, status, device, environment, baseline, summary,"
            " job_params, run_dir, notes, error, error_type, signal, log_tail, owner, created_at)"
            " VALUES ('r1', 'old', 'run_recipe', 'succeeded', 'cpu', '{}', '{}', '{}', '{}', '',"
            " '', '', '', '', '', '', '2026-01-01 00:00:00')"
        )
    engine.dispose()
    repo = Repository.open(path)
    assert dbmod.current_revision(repo.engine) == "0006" == dbmod.head_revision()
    assert repo.get_run("r1").run.name == "old"
    assert serve_tests(repo, "r1") == []
    add_serve_test(repo, "r1", REPORT, {"kind": "onnx", "path": "/m.onnx"})
    repo.close()
    (backup,) = tmp_path.glob("old.db.bak-0003-*")
    con = sqlite3.connect(backup)
    assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [("0003",)]
    con.close()


def test_downgrade_to_0003_and_upgrade_again(tmp_path):
    path = tmp_path / "rt.db"
    repo = Repository.open(path)
    run = repo.create_run(model_source="zoo:mlp")
    add_serve_test(repo, run.id, REPORT)
    repo.close()
    url = f"sqlite:///{path}"
    engine = dbmod.make_engine(url)
    cfg = dbmod.alembic_config(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003")
    tables = set(sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall())
    assert ("serve_tests",) not in tables and ("runs",) in tables
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    engine.dispose()
    repo = Repository.open(path)
    assert repo.get_run(run.id).run.id == run.id and serve_tests(repo, run.id) == []
    repo.close()


def test_serve_test_round_trip_and_cascade(tmp_path):
    repo = Repository.open(tmp_path / "s.db")
    run = repo.create_run(model_source="zoo:mlp")
    first = add_serve_test(repo, run.id, REPORT, {"kind": "onnx", "path": "/m.onnx"})
    second = add_serve_test(repo, run.id, {**REPORT, "max_queue_delay_us": 300})
    (new, old) = serve_tests(repo, run.id)
    assert (new.id, old.id) == (second, first)
    assert old.artifact_kind == "onnx" and old.artifact_path == "/m.onnx"
    assert [(p.batch, p.throughput) for p in old.sweep] == [(1, 2500.0), (8, 10000.0)]
    assert old.preferred_batch_sizes == [8] and old.max_queue_delay_us == 200
    off, on = old.load
    assert (off.dynamic_batching, on.dynamic_batching) == (False, True)
    assert on.errors == 1 and on.overhead_ms == pytest.approx(1.1)
    assert (off.avg_batch, on.avg_batch) == (None, 3.25)  # None: a report without the metric
    assert old.speedup(4) == pytest.approx(5.0) and old.speedup(16) is None
    with pytest.raises(RunNotFound):
        add_serve_test(repo, "nope", REPORT)
    repo.delete_run(run.id)
    assert serve_tests(repo, run.id) == []
    with repo.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM serve_test_load").scalar() == 0
    repo.close()


def test_cli_serve_test_stores_its_report(tmp_path, monkeypatch, capsys):
    """The CLI writes the report through the store (the server itself is tested in
    tests/accel/test_deploy_triton.py; here the boxed worker job returns a fixed report)."""
    from accel.deploy.serve import LoadPoint, ServeReport
    from accel.deploy.triton import SweepPoint
    from accel.models import InputSpec
    from studio import cli, serve_test, usecases

    db = tmp_path / "c.db"
    repo = Repository.open(db)
    run = repo.create_run(model_source="zoo:mlp")
    repo.close()
    art = {"kind": "onnx", "path": str(tmp_path / "m.onnx"), "step": 0, "pass": "export_onnx"}
    spec = InputSpec.parse("x:float32[batch,4]; batch=1..4:1")
    monkeypatch.setattr(serve_test, "servable_run", lambda r, rid: (r.get_run(rid), art, spec))
    report = ServeReport(
        sweep=[SweepPoint(1, 0.5, 2000.0), SweepPoint(4, 1.0, 4000.0)],
        preferred_batch_sizes=[4],
        max_queue_delay_us=250,
        max_batch_size=4,
        direct_p50_ms=0.5,
        load=[LoadPoint("no batching", 2, 10, 0, 3.0, 4.0, 50.0)],
    )
    jobs = []
    monkeypatch.setattr(usecases, "run_boxed", lambda job, emit=None: jobs.append(job) or report)
    assert cli.main(["--db", str(db), "serve-test", run.id, "--clients", "2"]) == 0
    assert "batch sweep" in capsys.readouterr().out
    assert jobs[0].clients == [2] and jobs[0].port is None  # the GUI job's spec
    assert cli.main(["--db", str(db), "serve-test", run.id, "--duration", "0"]) == 2
    assert "duration_s" in capsys.readouterr().err  # the job spec says which number
    repo = Repository.open(db)
    (stored,) = serve_tests(repo, run.id)
    repo.close()
    assert [p.batch for p in stored.sweep] == [1, 4] and stored.max_queue_delay_us == 250
    assert stored.load[0].clients == 2 and stored.load[0].overhead_ms == pytest.approx(2.5)


GEN_REPORT = {
    "workload": "generate",
    "prompt_tokens": 32,
    "new_tokens": 16,
    "load": [
        {"mode": "no continuous batching", "clients": 4, "requests": 8, "errors": 0,
         "tokens": 128, "tokens_per_s": 100.0, "ttft_p50_ms": 20.0, "ttft_p99_ms": 90.0,
         "tpot_p50_ms": 9.0},
        {"mode": "continuous batching", "clients": 4, "requests": 8, "errors": 1,
         "tokens": 112, "tokens_per_s": 250.0, "ttft_p50_ms": 12.0, "ttft_p99_ms": 30.0,
         "tpot_p50_ms": float("nan")},
    ],
}  # fmt: skip


def test_upgrade_from_0005_adds_generation_serve_tests(tmp_path):
    """0006 on a 0005 database: its serve tests stay ("infer"), generation tests can be added."""
    path = tmp_path / "old5.db"
    url = f"sqlite:///{path}"
    engine = dbmod.make_engine(url)
    cfg = dbmod.alembic_config(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0005")
        conn.exec_driver_sql(
            "INSERT INTO runs (id, name, kind, status, device, environment, baseline, summary,"
            " job_params, run_dir, notes, error, error_type, signal, log_tail, owner, created_at)"
            " VALUES ('r5', 'old', 'run_recipe', 'succeeded', 'cpu', '{}', '{}', '{}', '{}', '',"
            " '', '', '', '', '', '', '2026-01-01 00:00:00')"
        )
        conn.exec_driver_sql(
            "INSERT INTO serve_tests (run_id, created_at, artifact_kind, artifact_path,"
            " preferred_batch_sizes, max_queue_delay_us, max_batch_size)"
            " VALUES ('r5', '2026-01-01 00:00:00', 'onnx', '/m.onnx', '[]', 0, 8)"
        )
    engine.dispose()
    repo = Repository.open(path)
    assert dbmod.current_revision(repo.engine) == "0006"
    run = repo.get_run("r5")
    (old,) = serve_tests(repo, run.id)
    assert old.workload == "infer" and old.generation == [] and old.prompt_tokens is None
    add_serve_test(repo, run.id, GEN_REPORT, {"kind": "model", "path": "/m.xml"})
    new = serve_tests(repo, run.id)[0]
    repo.close()
    assert new.workload == "generate" and (new.prompt_tokens, new.new_tokens) == (32, 16)
    assert new.load == [] and new.sweep == []
    off, on = new.generation_pair(4)
    assert off is not None and on is not None
    assert not off.continuous_batching and on.continuous_batching
    assert (on.tokens, on.errors, on.ttft_p99_ms) == (112, 1, 30.0)
    assert on.tpot_p50_ms is None  # NaN is kept as NULL
    assert new.generation_gain(4) == pytest.approx(2.5)
    assert new.generation_gain(1) is None
