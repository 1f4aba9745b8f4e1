"""The warm worker: light jobs reuse one process with torch imported; it is replaced after
it dies, after a cancelled job and after a job that left it too big; runs stay fresh."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from studio.workers.pool import WARM_KINDS, WorkerPool

PLUGIN = str(Path(__file__).with_name("fault_jobs.py"))


def _pool(**kw) -> WorkerPool:
    kw.setdefault("cpu_workers", 1)
    kw.setdefault("devices", [])
    kw.setdefault("cancel_grace_s", 0.3)
    kw.setdefault("kill_grace_s", 0.3)
    return WorkerPool(None, warm=True, **kw)


def _wait_dead(pid: int, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of ours counts as dead
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_two_model_opens_share_the_warm_worker_and_it_is_replaced_after_a_kill():
    with _pool() as pool:
        first = pool.submit("inspect", {"model": "zoo:mlp"}, device="cpu").wait(120)
        second = pool.submit("inspect", {"model": "zoo:lstm"}, device="cpu").wait(120)
        assert first.ok and second.ok, (first.error, second.error)
        assert first.result["graph"] and second.result["info"]["source"] == "zoo:lstm"
        assert first.pid is not None and second.pid == first.pid
        assert first.exit_code == 0

        os.kill(first.pid, signal.SIGKILL)  # the idle warm worker dies (OOM killer, a user)
        assert _wait_dead(first.pid)
        third = pool.submit("inspect", {"model": "zoo:mlp"}, device="cpu").wait(120)
        fourth = pool.submit("inspect", {"model": "zoo:mlp"}, device="cpu").wait(120)
        assert third.ok and fourth.ok, (third.error, fourth.error)
        assert third.pid not in (None, first.pid)
        assert fourth.pid == third.pid


def test_a_worker_that_dies_during_a_job_crashes_it_and_is_replaced(monkeypatch):
    monkeypatch.setattr("studio.workers.pool.WARM_KINDS", WARM_KINDS | {"fake_run"})
    with _pool() as pool:
        ok = pool.submit("fake_run", {"steps": 1}, plugins=[PLUGIN]).wait(60)
        crash = pool.submit("fake_run", {"steps": 1, "fault": "kill"}, plugins=[PLUGIN]).wait(60)
        after = pool.submit("fake_run", {"steps": 1}, plugins=[PLUGIN]).wait(60)
        assert ok.ok and after.ok
        assert crash.status == "crashed" and crash.pid == ok.pid and crash.signal == "SIGKILL"
        assert after.pid != ok.pid


def test_cancelled_job_and_big_worker_are_retired_runs_get_fresh_processes(monkeypatch):
    monkeypatch.setattr("studio.workers.pool.WARM_KINDS", WARM_KINDS | {"fake_run"})
    with _pool() as pool:
        h = pool.submit("fake_run", {"steps": 50, "step_s": 0.2}, plugins=[PLUGIN])
        time.sleep(1.0)
        h.cancel()
        cancelled = h.wait(60)
        assert cancelled.status == "cancelled"
        assert _wait_dead(cancelled.pid)
        nxt = pool.submit("fake_run", {"steps": 1}, plugins=[PLUGIN]).wait(60)
        assert nxt.ok and nxt.pid != cancelled.pid

    with _pool(recycle_rss_mb=1.0) as pool:  # every worker is "too big"
        big = pool.submit("fake_run", {"steps": 1}, plugins=[PLUGIN]).wait(60)
        assert big.ok and _wait_dead(big.pid)

    with _pool() as pool:  # fake_run is not a warm kind here: a fresh process per job
        a = pool.submit("echo", {"x": 1}, plugins=[PLUGIN]).wait(60)
        b = pool.submit("echo", {"x": 2}, plugins=[PLUGIN]).wait(60)
        assert a.ok and b.ok and a.pid != b.pid


@pytest.mark.parametrize("warm", [False, True])
def test_shutdown_leaves_no_worker(warm):
    pool = WorkerPool(None, warm=warm, cpu_workers=1, devices=[])
    idle = pool.warm_workers()
    pool.shutdown()
    for w in idle:
        assert _wait_dead(w.proc.pid)
