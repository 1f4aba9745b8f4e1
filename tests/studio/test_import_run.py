"""Recovery that works: a run the database failed to save (disk full) is kept in its folder
and `studio import-run` restores it — also into the database whose row the failed save left
running or crashed — while a record the studio did not write, or whose files changed, is
refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.cli import main
from studio.run_records import FILE_NAME as UNRECORDED_FILE
from studio.store import Repository
from studio.workers.pool import WorkerPool

RECIPE = {
    "name": "mlp",
    "model": {"source": "zoo:mlp", "input_spec": "x:float32[batch,1024]"},
    "benchmark": {"warmup": 0, "iters": 2, "rounds": 2, "min_time_s": 0},
    "steps": [{"pass": "bf16"}],
}


class DiskFull:
    """A repository whose writes fail once the run row exists (the disk filled up)."""

    def __init__(self, repo: Repository) -> None:
        self._repo = repo
        self.failing = False

    def __getattr__(self, name):
        fn = getattr(self._repo, name)
        if name not in ("create_run", "set_status", "record_event"):
            return fn

        def call(*args, **kwargs):
            if self.failing:
                raise OSError(28, "No space left on device")
            out = fn(*args, **kwargs)
            self.failing = name == "create_run"
            return out

        return call


@pytest.fixture(scope="module")
def studio_home(tmp_path_factory):
    """One data folder (and signing key) for the module: the same installation throughout."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(autouse=True)
def _same_installation(studio_home, monkeypatch):
    monkeypatch.setenv("ACCEL_STUDIO_HOME", str(studio_home))


@pytest.fixture(scope="module")
def lost_run(tmp_path_factory, studio_home):
    """A real run whose record the store lost: (database, run id, run folder)."""
    mp = pytest.MonkeyPatch()  # module scope: the per-test monkeypatch is not there yet
    mp.setenv("ACCEL_STUDIO_HOME", str(studio_home))
    try:
        yield _lose_a_run(tmp_path_factory.mktemp("lost"))
    finally:
        mp.undo()


def _lose_a_run(tmp: Path) -> tuple[Path, str, Path]:
    repo = Repository.open(tmp / "a.db")
    run_dir = tmp / "run"
    with WorkerPool(DiskFull(repo), cpu_workers=1, devices=[]) as pool:
        out = pool.submit("run_recipe", {"recipe": RECIPE, "out": str(run_dir)}, record=True).wait(
            300
        )
    assert out.status == "succeeded" and "No space left" in out.store_error, out
    assert out.record_file == str(run_dir / UNRECORDED_FILE)
    assert repo.get_run(out.run_id).status == "queued"  # what the failed save left
    repo.close()
    return tmp / "a.db", out.run_id, run_dir


def _copy_db(src: Path, dst: Path) -> Path:
    with Repository.open(src) as a:
        a.integrity_check()
    dst.write_bytes(src.read_bytes())
    return dst


def test_import_restores_the_row_a_failed_save_left_crashed(lost_run, tmp_path, capsys):
    db, run_id, run_dir = lost_run
    db = _copy_db(db, tmp_path / "same.db")
    with Repository.open(db) as repo:
        repo.set_status(run_id, "crashed", error="the studio was gone")  # a later start's view
    assert main(["--db", str(db), "import-run", str(run_dir)]) == 0, capsys.readouterr().err
    with Repository.open(db) as repo:
        d = repo.get_run(run_id)
        assert d.status == "succeeded" and d.run.error == ""
        assert [s.index for s in d.steps] == [-1, 0]
        assert d.steps[1].pass_name == "bf16" and d.steps[1].status in ("succeeded", "gate_failed")
        assert d.run.duration_s and d.run.duration_s > 0
    assert main(["--db", str(db), "import-run", str(run_dir)]) == 2  # twice: refused


def test_import_into_another_database(lost_run, tmp_path, capsys):
    _, run_id, run_dir = lost_run
    assert main(["--db", str(tmp_path / "b.db"), "import-run", str(run_dir)]) == 0, (
        capsys.readouterr().err
    )
    with Repository.open(tmp_path / "b.db") as other:
        assert other.get_run(run_id).status == "succeeded"


def _tampered(run_dir: Path, tmp_path: Path, change) -> Path:
    """A copy of the run folder with ``change(record, folder)`` applied."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    record = json.loads((copy / UNRECORDED_FILE).read_text())
    for e in record["events"]:
        if e.get("run_dir"):
            e["run_dir"] = str(copy)
        for art in e.get("artifacts") or []:
            art["path"] = art["path"].replace(str(run_dir), str(copy))
    change(record, copy)
    (copy / UNRECORDED_FILE).write_text(json.dumps(record))
    return copy


def test_a_forged_record_is_refused(tmp_path, capsys):
    """Written by hand, status succeeded, no step files: the studio did not write it."""
    folder = tmp_path / "forged"
    folder.mkdir()
    record = {
        "format": "accel-studio-unrecorded-run/1",
        "run": {"run_id": "a" * 32, "model_source": "zoo:mlp", "recipe": {"name": "x"}},
        "events": [{"event": "run_started", "run_dir": str(folder)}],
        "status": "succeeded",
        "final": {},
    }
    (folder / UNRECORDED_FILE).write_text(json.dumps(record))
    assert main(["--db", str(tmp_path / "c.db"), "import-run", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "not written by this studio installation" in err
    with Repository.open(tmp_path / "c.db") as repo:
        assert repo.list_runs() == []


@pytest.mark.parametrize("what", ["signature", "outputs", "artifact", "folder"])
def test_a_record_whose_run_changed_is_refused(lost_run, tmp_path, capsys, what):
    from studio.run_records import sign

    _, _, run_dir = lost_run

    def change(record, folder):
        step = next(folder.glob("step_00_*"))
        if what == "outputs":
            (step / "outputs.pt").unlink()
        elif what == "artifact":
            (step / "parity.json").write_text("{}")
        elif what == "folder":
            for e in record["events"]:  # names a folder it is not in
                if e.get("run_dir"):
                    e["run_dir"] = str(run_dir)
        record.pop("signature")
        if what != "signature":
            sign(record)  # signed, so only the file check can refuse it
        else:
            record["status"] = "succeeded"

    copy = _tampered(run_dir, tmp_path, change)
    assert main(["--db", str(tmp_path / "d.db"), "import-run", str(copy)]) == 2
    err = capsys.readouterr().err
    expected = {
        "signature": "signature",
        "outputs": "outputs are missing",
        "artifact": "differs from the one recorded",
        "folder": "lies in",
    }[what]
    assert expected in err, err
