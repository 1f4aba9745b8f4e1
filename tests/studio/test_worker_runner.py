"""The real runner in a worker: a crash in a pass keeps the steps finished before it."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.store import Repository
from studio.workers.pool import WorkerPool

PLUGIN = str(Path(__file__).with_name("fault_passes.py"))


def _recipe(*faults: str) -> dict:
    return {
        "name": "faulty",
        "model": {"source": "zoo:mlp"},
        "benchmark": {"warmup": 1, "iters": 2},
        "steps": [{"pass": "test_fault", "params": {"fault": f}} for f in faults],
    }


@pytest.mark.parametrize("fault", ["segfault", "exit"])
def test_runner_step_crash_keeps_completed_steps(tmp_path, fault):
    repo = Repository.open(tmp_path / "r.db")
    with WorkerPool(repo, devices=[], cpu_workers=1) as pool:
        h = pool.submit(
            "run_recipe",
            {"recipe": _recipe("", fault), "out": str(tmp_path / "run")},
            plugins=[PLUGIN],
            device="cpu",
            timeout_s=120,
        )
        out = h.wait(180)
    assert out.status == "crashed", out
    d = repo.get_run(out.run_id)
    assert d.status == "crashed" and d.run.model_source == "zoo:mlp"
    assert d.recipe is not None and d.recipe["name"] == "faulty"
    assert d.environment.get("torch", "").startswith("2.")
    base, first, second = d.steps
    assert base.index == -1 and base.metrics["num_params"] == 2109450
    assert first.status == "succeeded" and first.parity_passed is True
    assert first.parity[0].metrics["max_abs"] == 0.0
    assert any(a.sha256 and a.bytes for a in first.artifacts)
    assert all(Path(a.path).is_file() for a in first.artifacts)
    assert second.status == "crashed"
    assert "injecting fault" in d.log_tail
    assert repo.integrity_check() == "ok"
    repo.close()
