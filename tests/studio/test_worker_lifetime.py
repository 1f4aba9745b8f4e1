"""A worker's lifetime belongs to the operating system, not to its pipes: a job ends when its
worker's process ends, whatever the worker forked, and nothing it started outlives it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from studio.workers.pool import WorkerPool

PLUGIN = str(Path(__file__).with_name("fault_jobs.py"))
linux_only = pytest.mark.skipif(not os.sys.platform.startswith("linux"), reason="Linux guards")


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@linux_only
@pytest.mark.parametrize("child", ["plain", "ignore_term", "setsid"])
def test_a_forked_child_holding_the_pipes_does_not_keep_the_job_alive(tmp_path, child):
    pid_file = tmp_path / "child.pid"
    with WorkerPool(None, devices=[], cpu_workers=1) as pool:
        t0 = time.monotonic()
        h = pool.submit(
            "fork_holder",
            {"child": child, "pid_file": str(pid_file), "run_dir": str(tmp_path)},
            plugins=[PLUGIN],
        )
        outcome = h.wait(30)
        took = time.monotonic() - t0
    assert outcome.status == "succeeded", outcome
    assert outcome.result["child"] == int(pid_file.read_text())
    assert took < 20, f"the job took {took:.1f} s: its end waited for the child"
    assert wait_gone(int(pid_file.read_text())), f"the {child} child outlived its worker"


@linux_only
def test_a_hanging_worker_with_a_child_ends_at_its_timeout_and_takes_the_child(tmp_path):
    pid_file = tmp_path / "child.pid"
    with WorkerPool(None, devices=[], cpu_workers=1, cancel_grace_s=0.3, kill_grace_s=0.3) as pool:
        h = pool.submit(
            "fork_holder",
            {
                "child": "ignore_term",
                "then": "hang",
                "pid_file": str(pid_file),
                "run_dir": str(tmp_path),
            },
            plugins=[PLUGIN],
            timeout_s=2.0,
        )
        outcome = h.wait(30)
    assert outcome.status == "timed_out", outcome
    assert wait_gone(int(pid_file.read_text()))


@linux_only
def test_a_warm_worker_keeps_serving_after_a_job_that_forked(tmp_path):
    """What a job started ends with the job, also in a warm worker that stays for the next."""
    from studio.workers import pool as pool_mod

    pid_file = tmp_path / "child.pid"
    kinds = pool_mod.WARM_KINDS
    pool_mod.WARM_KINDS = kinds | {"fork_holder", "echo"}
    try:
        with WorkerPool(None, devices=[], cpu_workers=1, warm=True) as pool:
            params = {"pid_file": str(pid_file), "run_dir": str(tmp_path)}
            first = pool.submit("fork_holder", params, plugins=[PLUGIN])
            assert first.wait(60).status == "succeeded"
            assert wait_gone(int(pid_file.read_text())), "a job's child outlived the job"
            second = pool.submit("echo", {"n": 3}, plugins=[PLUGIN]).wait(60)
            assert second.status == "succeeded"
            assert second.pid == first.outcome.pid  # the same warm worker served both
    finally:
        pool_mod.WARM_KINDS = kinds


PARENT = """
import sys, time
sys.path.insert(0, {root!r})
from studio.workers.pool import WorkerPool
pool = WorkerPool(None, devices=[], cpu_workers=1)
h = pool.submit("fork_holder", {{"child": "ignore_term", "then": "hang", "pid_file": {pid_file!r},
                "run_dir": {run_dir!r}}}, plugins=[{plugin!r}])
while True:
    time.sleep(1)
"""


@linux_only
def test_the_workers_and_their_children_die_with_the_studio(tmp_path):
    """SIGKILL of the process that owns the pool (no cleanup code runs in it) still ends its
    workers and everything they started."""
    import signal
    import subprocess
    import sys

    pid_file = tmp_path / "child.pid"
    root = str(Path(__file__).resolve().parents[2])
    code = PARENT.format(root=root, pid_file=str(pid_file), plugin=PLUGIN, run_dir=str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        end = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < end:
            time.sleep(0.1)
        assert pid_file.exists(), "the job never started"
        import psutil

        workers = psutil.Process(parent.pid).children(recursive=True)
        assert workers, "no worker processes"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        for p in workers:
            assert wait_gone(p.pid), f"{p.pid} ({p.name()}) outlived the studio"
        assert wait_gone(int(pid_file.read_text()))
    finally:
        if parent.poll() is None:
            parent.kill()
