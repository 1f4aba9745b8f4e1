"""Migrations: empty database -> head matches the ORM; start-up migrates once, with a backup."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from studio.store import Repository
from studio.store import db as dbmod
from studio.store.models import NAMING_CONVENTION, Base


def test_upgrade_empty_database_matches_orm_metadata(tmp_path):
    engine = dbmod.make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    assert dbmod.current_revision(engine) is None
    assert dbmod.migrate(engine) == dbmod.head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(
            MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata
        )
    assert diff == []
    engine.dispose()


def test_every_constraint_is_named(tmp_path):
    engine = dbmod.make_engine(f"sqlite:///{tmp_path / 'n.db'}")
    dbmod.migrate(engine)
    insp = inspect(engine)
    names = []
    for table in insp.get_table_names():
        if table == "alembic_version":
            continue
        names += [fk["name"] for fk in insp.get_foreign_keys(table)]
        names += [uq["name"] for uq in insp.get_unique_constraints(table)]
        names += [ck["name"] for ck in insp.get_check_constraints(table)]
        names.append(insp.get_pk_constraint(table)["name"])
    assert names and all(names), names
    assert "ck_runs_status" in names and "fk_steps_run_id_runs" in names
    assert set(NAMING_CONVENTION) == {"ix", "uq", "ck", "fk", "pk"}
    engine.dispose()


def test_migration_backs_up_an_old_database(tmp_path, monkeypatch):
    path = tmp_path / "studio.db"
    repo = Repository.open(path)
    run = repo.create_run(model_source="zoo:mlp")
    repo.close()
    # Pretend the file is at an older revision: start-up must copy it before upgrading.
    con = sqlite3.connect(path)
    con.execute("UPDATE alembic_version SET version_num = 'old0'")
    con.commit()
    con.close()
    monkeypatch.setattr(dbmod, "head_revision", lambda: "0001")
    monkeypatch.setattr(dbmod, "_known_revision", lambda rev: True)  # 'old0': an older one
    from alembic import command

    stamps = []
    monkeypatch.setattr(command, "upgrade", lambda cfg, rev: stamps.append(rev))
    engine = dbmod.make_engine(f"sqlite:///{path}")
    dbmod.migrate(engine)
    engine.dispose()
    backups = list(tmp_path.glob("studio.db.bak-old0-*"))
    assert len(backups) == 1 and stamps == ["head"]
    con = sqlite3.connect(backups[0])
    assert con.execute("SELECT id FROM runs").fetchall() == [(run.id,)]
    con.close()


def test_fresh_database_is_not_backed_up_and_second_open_does_nothing(tmp_path):
    path = tmp_path / "studio.db"
    Repository.open(path).close()
    Repository.open(path).close()
    assert list(tmp_path.glob("*.bak-*")) == []


def test_concurrent_startups_migrate_once(tmp_path):
    path = tmp_path / "race.db"
    code = "import sys; from studio.store import Repository; Repository.open(sys.argv[1]).close()"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path)], stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errs
    engine = dbmod.make_engine(f"sqlite:///{path}")
    assert dbmod.current_revision(engine) == dbmod.head_revision()
    engine.dispose()


def test_upgrade_from_first_revision_keeps_runs_and_backs_up(tmp_path):
    from alembic import command

    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    engine = dbmod.make_engine(url)
    cfg = dbmod.alembic_config(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.exec_driver_sql(
            "INSERT INTO runs (id, name, kind, status, device, environment, baseline, summary, job_params,"
            " run_dir, notes, error, error_type, signal, log_tail, created_at)"
            " VALUES ('r1', 'old', 'run_recipe', 'succeeded', 'cpu', '{}', '{}', '{}', '{}', '', 'n', '', '', '', '',"
            " '2026-01-01 00:00:00')"
        )
    engine.dispose()
    repo = Repository.open(path)
    assert dbmod.current_revision(repo.engine) == dbmod.head_revision() != "0001"
    run = repo.get_run("r1")
    assert run.run.name == "old" and run.run.notes == "n"
    repo.close()
    (backup,) = tmp_path.glob("old.db.bak-0001-*")
    con = sqlite3.connect(backup)
    assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [("0001",)]
    con.close()
