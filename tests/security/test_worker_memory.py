"""Issue 15 (10): workers have a memory cap; a runaway job ends as "out of memory" with the
figure, and the next job runs."""

from __future__ import annotations

from pathlib import Path

from studio.workers.pool import WorkerPool
from studio.workers.watchdog import default_memory_limit

HOG = str(Path(__file__).with_name("memory_hog_job.py"))
FAULTS = str(Path(__file__).parents[1] / "studio" / "fault_jobs.py")


def test_runaway_worker_is_stopped_at_the_cap_and_the_next_job_runs():
    limit = 400 << 20
    with WorkerPool(None, cpu_workers=1, devices=[], memory_limit_bytes=limit) as pool:
        out = pool.submit("memory_hog", {"seconds": 120}, plugins=[HOG]).wait(120)
        assert out.status == "crashed" and out.error_type == "OutOfMemory"
        assert "out of memory" in out.error and "limit of 400 MiB" in out.error
        nxt = pool.submit("fake_run", {"steps": 1}, plugins=[FAULTS]).wait(60)
        assert nxt.status == "succeeded"


def test_memory_cap_setting(monkeypatch):
    monkeypatch.setenv("ACCEL_WORKER_MEMORY_MB", "512")
    assert default_memory_limit() == 512 << 20
    monkeypatch.setenv("ACCEL_WORKER_MEMORY_MB", "0")
    assert default_memory_limit() == 0
    monkeypatch.delenv("ACCEL_WORKER_MEMORY_MB")
    import psutil

    assert default_memory_limit() == int(psutil.virtual_memory().total * 0.75)
