"""Crash isolation: 20 injected crashes in a row, no completed run or step lost."""

from __future__ import annotations

from pathlib import Path

from studio.store import Repository, RunFilter
from studio.workers.pool import WorkerPool

PLUGIN = str(Path(__file__).with_name("fault_jobs.py"))
FAULTS = ["segfault", "exit", "kill", "segfault", "hang"]  # kill: as the OOM killer does


def test_twenty_crashes_in_a_row_lose_nothing(tmp_path):
    repo = Repository.open(tmp_path / "faults.db")
    with WorkerPool(repo, devices=[], cpu_workers=2, cancel_grace_s=0.2, kill_grace_s=0.3) as pool:
        crashes, goods = [], []
        for i in range(20):
            fault = FAULTS[i % len(FAULTS)]
            crashes.append(
                pool.submit(
                    "fake_run",
                    {"steps": 3, "fault": fault, "fault_at": 2},
                    plugins=[PLUGIN],
                    record=True,
                    # only the hang needs its timeout; time enough to reach its step on a
                    # loaded machine (worker start-up included)
                    timeout_s=6.0 if fault == "hang" else None,
                    tags=["crash", fault],
                )
            )
            goods.append(
                pool.submit("fake_run", {"steps": 3}, plugins=[PLUGIN], record=True, tags=["good"])
            )
        outcomes = [h.wait(60) for h in crashes + goods]
    assert [o.status for o in outcomes[20:]] == ["succeeded"] * 20
    for o, fault in zip(outcomes[:20], FAULTS * 4):
        expected = "timed_out" if fault == "hang" else "crashed"
        assert o.status == expected, (fault, o)
        d = repo.get_run(o.run_id)
        assert d.status == expected
        # The two steps finished before the fault are kept; the third is marked as stopped.
        assert [s.status for s in d.steps[:3]] == ["succeeded"] * 3, fault  # baseline, 0, 1
        assert d.steps[3].status in ("crashed", "cancelled")
        assert d.steps[2].timing.speedup == 1.5
        assert "injecting fault" in d.log_tail
        if fault == "segfault":
            assert d.signal == "SIGSEGV" and "Segmentation fault" in d.log_tail
        elif fault == "kill":
            assert d.signal == "SIGKILL" and "out-of-memory" in d.run.error
        elif fault == "exit":
            assert d.exit_code == 7 and d.signal == ""
    assert repo.count_runs(RunFilter(tags=("good",), status=("succeeded",))) == 20
    for r in repo.list_runs(RunFilter(tags=("good",)), limit=100):
        assert len(repo.get_run(r.id).steps) == 4
    assert repo.integrity_check() == "ok"
    repo.close()
