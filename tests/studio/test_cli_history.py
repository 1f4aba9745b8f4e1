"""CLI: `studio run` through the pool into the store, history/show/compare/rerun/tag/delete,
and Ctrl-C recording the run as cancelled."""

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
from studio.store import Repository
from tests.timing_rows import assert_table_agrees

FAULT_PASSES = str(Path(__file__).with_name("fault_passes.py"))


def _fill(db: Path) -> tuple[str, str]:
    repo = Repository.open(db)
    ids = []
    for speed, tag in ((2.0, "fast"), (0.5, "slow")):
        r = repo.create_run(
            model_source="zoo:mlp", recipe={"name": "bf16-mlp"}, tags=[tag], notes=f"{tag} one"
        )
        repo.record_event(
            r.id,
            {
                "event": "run_started",
                "run_dir": "",
                "model_source": "zoo:mlp",
                "model_kind": "torch",
                "device": "cpu",
                "recipe": {"name": "bf16-mlp"},
                "environment": {"torch": "2.x"},
                "num_steps": 1,
                "baseline": {"latency_p50_ms": 4.0},
            },
        )
        repo.record_event(
            r.id,
            {
                "event": "step_finished",
                "index": 0,
                "pass_name": "bf16",
                "status": "succeeded",
                "duration_s": 0.1,
                "metrics": {"latency_p50_ms": 4.0 / speed, "speedup": speed},
                "parity": {
                    "passed": True,
                    "outputs": [{"name": "out", "max_abs": 0.001, "passed": True}],
                },
                "artifacts": [],
            },
        )
        repo.record_event(r.id, {"event": "run_finished", "status": "succeeded", "duration_s": 1.0})
        ids.append(r.id)
    repo.close()
    return ids[0], ids[1]


def test_history_show_compare_tag_delete(tmp_path, capsys):
    db = tmp_path / "h.db"
    fast, slow = _fill(db)
    assert main(["--db", str(db), "history"]) == 0
    out = capsys.readouterr().out
    assert fast[:8] in out and slow[:8] in out and "bf16-mlp" in out
    assert main(["--db", str(db), "history", "--tag", "fast", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [fast]
    assert main(["--db", str(db), "history", "slow", "one"]) == 0
    out = capsys.readouterr().out
    assert slow[:8] in out and fast[:8] not in out
    assert main(["--db", str(db), "show", fast[:8]]) == 0
    out = capsys.readouterr().out
    assert "bf16" in out and " 2.00x" in out and "pass" in out and "out: max_abs=0.001" in out
    assert main(["--db", str(db), "compare", fast, slow[:6]]) == 0
    out = capsys.readouterr().out
    speed_line = next(line for line in out.splitlines() if "speedup" in line and "bf16" in line)
    assert speed_line.split()[-2:] == ["2.00x", "0.50x"]  # no interval stored: none shown
    assert main(["--db", str(db), "tag", fast, "+best", "--notes", "keep"]) == 0
    capsys.readouterr()
    assert main(["--db", str(db), "export-run", fast, "-o", str(tmp_path / "r.json")]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["run"]["tags"] == ["best", "fast"] and doc["run"]["notes"] == "keep"
    assert main(["--db", str(db), "delete", slow]) == 0
    assert main(["--db", str(db), "show", slow]) == 2  # a clear error, no traceback
    err = capsys.readouterr().err
    assert "no run" in err


def _recipe(tmp_path: Path, fault: str = "") -> Path:
    steps = (
        [{"pass": "test_fault", "params": {"fault": fault}}]
        if fault
        else [{"pass": "bf16", "params": {}}]
    )
    path = tmp_path / "recipe.json"
    path.write_text(
        json.dumps(
            {
                "name": "cli",
                "model": {"source": "zoo:mlp"},
                "benchmark": {"warmup": 1, "iters": 2},
                "steps": steps,
            }
        )
    )
    return path


def _studio(*args: str, env_extra: dict | None = None, **kw) -> subprocess.Popen:
    # Run in a temporary folder: runs without --out land in ./runs.
    kw.setdefault("cwd", Path(args[1]).parent)
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "studio", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kw,
    )


@pytest.mark.slow
def test_run_records_and_rerun_links(tmp_path):
    db = tmp_path / "run.db"
    p = _studio(
        "--db",
        str(db),
        "run",
        str(_recipe(tmp_path)),
        "--out",
        str(tmp_path / "out"),
        "--tag",
        "cli",
    )
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert "bf16" in out and "pass" in out
    # The printed table: each step's two p50s agree with its speedup interval.
    assert_table_agrees(out, 1)
    repo = Repository.open(db)
    (run,) = repo.list_runs()
    d = repo.get_run(run.id)
    assert d.status == "succeeded" and d.run.tags == ["cli"] and d.steps[1].pass_name == "bf16"
    t = d.steps[1].timing
    assert t.p50_step_ms > 0 and t.consistent() and d.steps[1].parity_passed is True
    assert d.steps[0].timing.mode == "baseline" and d.steps[0].timing.p50_ref_ms > 0
    p = _studio("--db", str(db), "rerun", run.id[:8])
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    rerun = repo.list_runs()[0]
    assert rerun.parent_run_id == run.id and rerun.status == "succeeded" and rerun.tags == ["cli"]
    repo.close()


@pytest.mark.slow
def test_ctrl_c_cancels_and_records_cancelled(tmp_path):
    db = tmp_path / "c.db"
    Repository.open(db).close()
    p = _studio(
        "--db",
        str(db),
        "run",
        str(_recipe(tmp_path, "slow")),
        env_extra={"ACCEL_STUDIO_PLUGINS": FAULT_PASSES},
        # Ctrl-C as a terminal sends it: a test run started in the background by a
        # non-interactive shell ignores SIGINT, and a child would inherit that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    repo = Repository.open(db)
    deadline = time.monotonic() + 120
    while True:  # wait until the slow step runs
        runs = repo.list_runs()
        if runs and any(s.status == "running" for s in repo.get_run(runs[0].id).steps):
            break
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "cancelling" in err
    d = repo.get_run(runs[0].id)
    assert d.status == "cancelled" and d.steps[-1].status == "cancelled"
    assert d.exit_code == 0  # stopped cooperatively
    repo.close()


def test_unreachable_database_is_a_clear_error(capsys):
    assert main(["--db", "postgresql+psycopg://me:hunter2@127.0.0.1:1/nodb", "history"]) == 2
    err = capsys.readouterr().err
    assert "cannot open the database" in err and "--db" in err
    assert "hunter2" not in err  # the password is not shown
