"""4 processes recording 200 runs each at once: nothing lost, never "database is locked"."""

from __future__ import annotations

import subprocess
import sys

from studio.store import Repository, RunFilter

WRITER = r"""
import sys
from studio.store import Repository
repo = Repository.open(sys.argv[1])
worker, n = sys.argv[2], int(sys.argv[3])
for i in range(n):
    run = repo.create_run(model_source="zoo:mlp", recipe={"name": "r"}, tags=[f"w{worker}"])
    repo.record_event(run.id, {"event": "step_finished", "index": 0, "pass_name": "p", "status": "succeeded",
                               "duration_s": 0.0, "metrics": {"i": i}, "parity": None, "artifacts": []})
    repo.set_status(run.id, "succeeded")
    if i % 50 == 0:
        repo.list_runs(limit=20)  # readers interleave with writers
print("done", worker)
"""


def test_four_processes_record_200_runs_each(tmp_path):
    path = tmp_path / "busy.db"
    Repository.open(path).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(w), "200"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(4)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert "database is locked" not in err
        assert p.returncode == 0, err
        assert out.startswith("done")
    repo = Repository.open(path)
    assert repo.count_runs() == 800
    for w in range(4):
        assert repo.count_runs(RunFilter(tags=(f"w{w}",), status=("succeeded",))) == 200
    with repo.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM metrics").scalar_one() == 800
    assert repo.integrity_check() == "ok"
    repo.close()
