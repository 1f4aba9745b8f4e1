"""The store on a real PostgreSQL server (env ACCEL_TEST_POSTGRES_URL; skipped without one)."""

from __future__ import annotations

import math
import os
import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from studio.store import Repository, RunFilter
from studio.store.models import Base

URL = os.environ.get("ACCEL_TEST_POSTGRES_URL")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not URL,
        reason="no PostgreSQL server: set ACCEL_TEST_POSTGRES_URL "
        "(e.g. postgresql+psycopg://postgres@127.0.0.1:54329/accel_test; .ci/postgres.sh starts one)",
    ),
]


@pytest.fixture
def pg_url():
    pytest.importorskip(
        "psycopg", reason="psycopg is not installed (pip install 'psycopg[binary]')"
    )
    """A fresh database on the server for each test, dropped afterwards."""
    base = make_url(URL)
    name = f"accel_t_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield base.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_postgres_migrates_to_orm_metadata(pg_url):
    repo = Repository.open(pg_url)
    with repo.engine.connect() as conn:
        assert (
            compare_metadata(
                MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata
            )
            == []
        )
    repo.close()


def test_postgres_round_trip(pg_url, tmp_path):
    repo = Repository.open(pg_url)
    run = repo.create_run(
        model_source="zoo:mlp", recipe={"name": "pg", "x": float("nan")}, tags=["pg"], notes="Hello"
    )
    repo.record_event(
        run.id,
        {
            "event": "run_started",
            "run_dir": str(tmp_path),
            "model_source": "zoo:mlp",
            "model_kind": "torch",
            "device": "cpu",
            "recipe": {"name": "pg"},
            "environment": {"nan": float("nan")},
            "num_steps": 1,
            "baseline": {"latency_p50_ms": 3.0, "size_bytes": 5e9},
        },
    )
    repo.record_event(
        run.id,
        {
            "event": "step_finished",
            "index": 0,
            "pass_name": "p",
            "status": "succeeded",
            "duration_s": 0.1,
            "metrics": {"acc": float("nan"), "speedup": 1.5},
            "parity": {
                "passed": True,
                "outputs": [{"name": "o", "max_abs": float("nan"), "passed": True}],
            },
            "artifacts": [
                {"kind": "model", "path": "/x", "sha256": "0" * 64, "bytes": 5_000_000_000}
            ],
        },
    )
    repo.set_status(run.id, "succeeded")
    d = repo.get_run(run.id[:8])
    assert d.status == "succeeded" and d.environment == {"nan": "NaN"}
    step = d.steps[1]
    assert math.isnan(step.metrics["acc"]) and step.timing.speedup == 1.5
    assert math.isnan(step.parity[0].metrics["max_abs"])
    assert step.artifacts[0].bytes == 5_000_000_000  # BIGINT
    assert [r.id for r in repo.search("hello")] == [run.id]
    assert repo.count_runs(RunFilter(tags=("pg",))) == 1
    assert [t.speedup for t in repo.compare([run.id]).timings[(0, "p")]] == [1.5]
    repo.delete_run(run.id)
    assert repo.count_runs() == 0
    repo.close()
