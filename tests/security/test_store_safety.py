"""Issue 15, reproductions 5 and 6: a run that was not saved never says "succeeded"; runs of
a killed studio are recovered by any command that opens the store; a newer database says so
without copying itself on every call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from studio.cli import main
from studio.run_records import FILE_NAME as UNRECORDED_FILE
from studio.store import Repository, StoreError

PLUGIN = str(Path(__file__).parents[1] / "studio" / "fault_jobs.py")
RECIPE = {
    "name": "mlp",
    "model": {"source": "zoo:mlp", "input_spec": "x:float32[batch,1024]"},
    "benchmark": {"warmup": 0, "iters": 1, "rounds": 1, "min_time_s": 0},
    "steps": [{"pass": "bf16"}],
}


def _recipe_file(tmp_path: Path, **changes) -> Path:
    p = tmp_path / "r.json"
    p.write_text(json.dumps({**RECIPE, **changes}))
    return p


def _corrupt(db: Path) -> None:
    """Overwrite the middle pages of a SQLite file (its header stays valid)."""
    with Repository.open(db) as repo:
        for i in range(30):
            repo.create_run(model_source=f"zoo:mlp{i}", recipe={"name": "x" * 2000})
    size = db.stat().st_size
    with open(db, "r+b") as f:
        f.seek(4096 * 2)
        f.write(os.urandom(min(4096 * 4, size - 4096 * 2)))


def test_damaged_database_refuses_to_start_a_run(tmp_path, capsys):
    db = tmp_path / "studio.db"
    _corrupt(db)
    rc = main(["--db", str(db), "run", str(_recipe_file(tmp_path)), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "damaged" in err or "malformed" in err or "cannot" in err
    assert "succeeded" not in err
    assert not (tmp_path / "o").exists()  # no work was started


def test_read_only_database_refuses_to_start_a_run(tmp_path, capsys):
    db = tmp_path / "studio.db"
    Repository.open(db).close()
    url = f"sqlite:///file:{db}?mode=ro&uri=true"
    rc = main(["--db", url, "run", str(_recipe_file(tmp_path)), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot record runs" in err and "readonly" in err
    assert not (tmp_path / "o").exists()
    # reading the history still works
    assert main(["--db", url, "history"]) == 0
    # the migration lock went next to the database, not into a "file:" folder here
    assert not Path("file:").exists()


def test_lone_surrogate_recipe_name_is_a_clear_error(tmp_path, capsys):
    p = tmp_path / "r.yaml"
    p.write_text('name: "\\ud800"\nmodel: {source: zoo:mlp}\nsteps: [{pass: bf16}]\n')
    rc = main(["--db", str(tmp_path / "db.sqlite"), "run", str(p)])
    assert rc == 2 and "surrogate" in capsys.readouterr().err


class FailingStore:
    """A repository whose writes start failing after the run was created (disk full...)."""

    def __init__(self, repo: Repository, fail_after: str):
        self._repo = repo
        self._fail_after = fail_after
        self.failing = False

    def __getattr__(self, name):
        fn = getattr(self._repo, name)
        if name not in ("create_run", "set_status", "record_event"):
            return fn

        def call(*args, **kwargs):
            if self.failing:
                raise OSError(28, "No space left on device")
            out = fn(*args, **kwargs)
            if name == self._fail_after:
                self.failing = True
            return out

        return call


def test_cli_run_reports_an_unrecorded_run_with_a_failing_exit_code(tmp_path, capsys, monkeypatch):
    """The whole `studio run` path: the store fails after the run was created."""
    from studio.store import repo as repo_mod

    real = repo_mod.Repository.record_event

    def broken(self, run_id, event):
        if event.get("event") == "step_finished":
            raise OSError(5, "Input/output error")
        return real(self, run_id, event)

    monkeypatch.setattr(repo_mod.Repository, "record_event", broken)
    out_dir = tmp_path / "o"
    rc = main(
        [
            "--db",
            str(tmp_path / "db.sqlite"),
            "run",
            str(_recipe_file(tmp_path)),
            "--out",
            str(out_dir),
        ]
    )
    cap = capsys.readouterr()
    assert rc == 3, cap.err
    assert "NOT recorded" in cap.err and "studio import-run" in cap.err
    assert "succeeded, not recorded" in cap.out
    assert (out_dir / UNRECORDED_FILE).is_file()


_RECORDER = """
import sys, time
from studio.store import Repository
repo = Repository.open(sys.argv[1])
run = repo.create_run(model_source="zoo:mlp", recipe={"name": "x"})
repo.set_status(run.id, "running")
repo.record_event(run.id, {"event": "step_started", "index": 0, "pass_name": "bf16", "params": {}})
print(run.id, flush=True)
time.sleep(600)
"""


def test_runs_of_a_killed_studio_are_recovered_by_any_command(tmp_path, capsys):
    db = tmp_path / "studio.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _RECORDER, str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    run_id = proc.stdout.readline().strip()
    assert run_id, "the recorder did not start"
    with Repository.open(db) as repo:
        assert repo.get_run(run_id).status == "running"  # its studio is still alive
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1.5)  # so "now" and the last sign of life differ
    assert main(["--db", str(db), "history"]) == 0  # a read command recovers it
    with Repository.open(db) as repo:
        d = repo.get_run(run_id)
    assert d.status == "crashed" and "exited before the run finished" in (d.run.error or "")
    # The duration ends at the run's last recorded moment, not when it was noticed.
    assert d.run.duration_s is not None and d.run.duration_s < 1.0


def test_newer_database_says_so_without_repeated_backups(tmp_path):
    db = tmp_path / "studio.db"
    with Repository.open(db) as repo, repo.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_future'")
    for _ in range(3):
        with pytest.raises(StoreError, match="created by a newer version of the studio"):
            Repository.open(db)
    assert list(tmp_path.glob("studio.db.bak-*")) == []


def test_failing_migration_backs_up_once(tmp_path, monkeypatch):
    from studio.store import db as dbmod

    db = tmp_path / "studio.db"
    Repository.open(db).close()
    with Repository.open(db) as repo, repo.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0001'")

    def boom(*a, **k):
        raise RuntimeError("migration failed")

    monkeypatch.setattr("alembic.command.upgrade", boom)
    copies = []
    real_backup = dbmod.backup_sqlite
    monkeypatch.setattr(
        dbmod, "backup_sqlite", lambda path, tag: copies.append(tag) or real_backup(path, tag)
    )
    for _ in range(3):
        with pytest.raises(StoreError):
            Repository.open(db)
    assert copies == ["0001"]  # one copy, not one per start
    assert len(list(tmp_path.glob("studio.db.bak-0001-*"))) == 1


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="root ignores file permissions: a read-only folder cannot be made here",
)
def test_read_only_folder_still_shows_the_history(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "studio.db"
    with Repository.open(db) as repo:
        run = repo.create_run(model_source="zoo:mlp", recipe={"name": "x"})
    folder.chmod(0o555)
    db.chmod(0o444)
    try:
        assert main(["--db", str(db), "history"]) == 0
        assert run.id[:8] in capsys.readouterr().out
        rc = main(
            ["--db", str(db), "run", str(_recipe_file(tmp_path)), "--out", str(tmp_path / "o")]
        )
        assert rc == 2 and "cannot record runs" in capsys.readouterr().err
    finally:
        folder.chmod(0o755)


def test_read_only_open_reads_the_history(tmp_path):
    """The read-only path itself (reachable as root too): reads work, recording refuses."""
    db = tmp_path / "studio.db"
    with Repository.open(db) as repo:
        run = repo.create_run(model_source="zoo:mlp", recipe={"name": "x"})
    repo = Repository._open_read_only(db)
    try:
        assert repo.get_run(run.id).run.id == run.id
        with pytest.raises(StoreError, match="cannot record runs"):
            repo.check_writable()
    finally:
        repo.close()
