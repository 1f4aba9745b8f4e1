"""The worker pool: fresh processes, lanes and priorities, cancel and timeouts, store records."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from studio.store import Repository
from studio.workers.devices import GpuInfo, detect_gpus, parse_nvidia_smi
from studio.workers.pool import WorkerPool

PLUGIN = str(Path(__file__).with_name("fault_jobs.py"))


@pytest.fixture
def repo(tmp_path):
    r = Repository.open(tmp_path / "pool.db")
    yield r
    r.close()


def _pool(repo=None, **kw) -> WorkerPool:
    kw.setdefault("cpu_workers", 2)
    kw.setdefault("devices", [])
    kw.setdefault("cancel_grace_s", 0.3)
    kw.setdefault("kill_grace_s", 0.3)
    return WorkerPool(repo, **kw)


def test_run_job_is_recorded_step_by_step(repo):
    updates = []
    with _pool(repo) as pool:
        pool.subscribe(updates.append)
        h = pool.submit(
            "fake_run", {"steps": 2}, plugins=[PLUGIN], record=True, tags=["t"], notes="n"
        )
        out = h.wait(30)
    assert out.status == "succeeded" and out.result == {"status": "succeeded", "steps": 2}
    d = repo.get_run(out.run_id)
    assert d.status == "succeeded" and d.run.tags == ["t"] and d.run.notes == "n"
    assert [(s.index, s.status) for s in d.steps] == [
        (-1, "succeeded"),
        (0, "succeeded"),
        (1, "succeeded"),
    ]
    assert d.steps[2].timing.speedup == 1.5
    assert d.job_params["kind"] == "fake_run"
    assert d.run.duration_s == 0.0  # the runner's own duration, not replaced by the pool's
    whats = [u.what for u in updates]
    assert whats[:2] == ["queued", "started"] and whats[-1] == "finished"
    events = [u.data["event"] for u in updates if u.what == "event"]
    assert events == [
        "run_started",
        "step_started",
        "step_finished",
        "step_started",
        "step_finished",
        "run_finished",
    ]


def test_stray_prints_do_not_break_the_protocol():
    with _pool() as pool:
        out = pool.submit("print_to_stdout", {}, plugins=[PLUGIN]).wait(30)
    assert out.status == "succeeded" and out.result == {"ok": True}
    assert "this is not JSON" in out.log_tail


def test_unknown_job_kind_fails_with_message():
    with _pool() as pool:
        out = pool.submit("nope", {}).wait(30)
    assert out.status == "failed" and "unknown job kind 'nope'" in out.error


def test_failed_job_records_error_and_traceback(repo):
    with _pool(repo) as pool:
        out = pool.submit(
            "fake_run", {"steps": 2, "fault": "raise", "fault_at": 1}, plugins=[PLUGIN], record=True
        ).wait(30)
    assert (
        out.status == "failed"
        and out.error == "injected failure"
        and out.error_type == "RuntimeError"
    )
    d = repo.get_run(out.run_id)
    assert d.status == "failed" and "RuntimeError: injected failure" in d.log_tail
    assert [s.status for s in d.steps] == ["succeeded", "succeeded", "failed"]


def test_priority_order_and_concurrency_limit():
    started: list[str] = []
    running = 0
    peak = 0
    lock = threading.Lock()

    def listen(u):
        nonlocal running, peak
        with lock:
            if u.what == "started":
                started.append(u.job_id)
                running += 1
                peak = max(peak, running)
            elif u.what == "finished":
                running -= 1

    with _pool(cpu_workers=3, max_concurrency=1) as pool:
        pool.subscribe(listen)
        first = pool.submit("fake_run", {"steps": 1, "step_s": 0.3}, plugins=[PLUGIN])
        low = pool.submit("echo", {"n": 1}, plugins=[PLUGIN], priority=0)
        high = pool.submit("echo", {"n": 1}, plugins=[PLUGIN], priority=5)
        for h in (first, low, high):
            assert h.wait(30).status == "succeeded"
    assert started == [first.job_id, high.job_id, low.job_id]
    assert peak == 1


def test_gpu_lanes_set_cuda_visible_devices_and_cpu_hides_gpus():
    with _pool(devices=[GpuInfo("3"), "5"], cpu_workers=1) as pool:
        assert [lane.name for lane in pool.lanes] == ["cuda:0", "cuda:1", "cpu"]
        on_gpu1 = pool.submit(
            "echo", {"n": 0, "device": "cuda:1"}, plugins=[PLUGIN], device="cuda:1"
        )
        on_cpu = pool.submit("echo", {"n": 0}, plugins=[PLUGIN], device="cpu")
        auto = pool.submit("echo", {"n": 0}, plugins=[PLUGIN])
        by_recipe = pool.submit("echo", {"n": 0, "recipe": {"device": "cuda:1"}}, plugins=[PLUGIN])
        r1, r2, r3, r4 = (h.wait(30).result for h in (on_gpu1, on_cpu, auto, by_recipe))
    assert r1 == {"n": 0, "device": "cuda:0", "cuda": "5"}  # the worker sees its GPU as cuda:0
    assert r4 == {"n": 0, "device": "cuda:0", "cuda": "5"}  # the recipe's device picks the lane
    assert r2["cuda"] == ""
    assert r3["cuda"] in ("3", "5")  # auto prefers a GPU
    with _pool(devices=[], cpu_workers=1) as pool:
        with pytest.raises(ValueError, match="no worker lane for device 'cuda'"):
            pool.submit("echo", {}, device="cuda")


def test_detect_gpus_without_cuda():
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert [g.visible_id for g in detect_gpus({"CUDA_VISIBLE_DEVICES": "1,2"})] == ["1", "2"]
    assert [
        g.visible_id for g in detect_gpus({"ACCEL_STUDIO_GPUS": "0", "CUDA_VISIBLE_DEVICES": ""})
    ] == ["0"]
    smi = "GPU 0: NVIDIA H200 (UUID: GPU-abc)\nGPU 1: NVIDIA H200 (UUID: GPU-def)\n"
    assert parse_nvidia_smi(smi) == [GpuInfo("0", "NVIDIA H200"), GpuInfo("1", "NVIDIA H200")]


def test_parent_never_imports_torch_or_cuda():
    code = (
        "import sys; from studio.workers.pool import WorkerPool\n"
        f"p = WorkerPool(devices=None, cpu_workers=1); o = p.submit('echo', {{}}, plugins=[{PLUGIN!r}], device='cpu').wait(60)\n"
        "p.shutdown(); assert o.status == 'succeeded', o\n"
        # the job declarations (accel.jobs: kinds, specs) are read here; the engine that
        # runs them (the runner, the passes, torch, numpy) only in the workers
        "heavy = ('torch', 'numpy', 'PySide6', 'accel.runner', 'accel.passes', 'accel.bench')\n"
        "bad = [m for m in heavy if m in sys.modules]; assert not bad, bad\n"
        "assert 'accel.job_registry' in sys.modules\n"
        "print('clean')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "clean", out.stderr


def test_cancel_is_cooperative_first(repo):
    with _pool(repo, cancel_grace_s=10) as pool:
        seen = threading.Event()
        pool.subscribe(lambda u: u.data.get("event") == "step_started" and seen.set())
        h = pool.submit(
            "fake_run", {"steps": 2, "fault": "slow", "fault_at": 0}, plugins=[PLUGIN], record=True
        )
        assert seen.wait(30)
        t0 = time.monotonic()
        h.cancel()
        out = h.wait(30)
    assert out.status == "cancelled" and out.exit_code == 0  # stopped by itself, not killed
    assert time.monotonic() - t0 < 10
    d = repo.get_run(out.run_id)
    assert d.status == "cancelled" and d.steps[-1].status == "cancelled"


def test_cancel_escalates_to_terminate_then_kill(repo):
    with _pool(repo) as pool:
        started: set[str] = set()
        pool.subscribe(
            lambda u: started.add(u.job_id) if u.data.get("event") == "step_started" else None
        )
        hang = pool.submit(
            "fake_run", {"steps": 1, "fault": "hang", "fault_at": 0}, plugins=[PLUGIN], record=True
        )
        stubborn = pool.submit(
            "fake_run", {"steps": 1, "fault": "unkillable", "fault_at": 0}, plugins=[PLUGIN]
        )
        deadline = time.monotonic() + 60  # both stuck in their step (not between steps)
        while {hang.job_id, stubborn.job_id} - started and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        hang.cancel()
        stubborn.cancel()
        o1, o2 = hang.wait(30), stubborn.wait(30)
    assert (o1.status, o1.signal) == ("cancelled", "SIGTERM")
    assert (o2.status, o2.signal) == ("cancelled", "SIGKILL")
    assert repo.get_run(o1.run_id).status == "cancelled"


def test_cancel_queued_job_never_starts(repo):
    with _pool(repo, cpu_workers=1) as pool:
        busy = pool.submit("fake_run", {"steps": 1, "step_s": 0.5}, plugins=[PLUGIN])
        queued = pool.submit("fake_run", {"steps": 1}, plugins=[PLUGIN], record=True)
        queued.cancel()
        assert queued.wait(10).status == "cancelled"
        assert busy.wait(30).status == "succeeded"
    assert repo.get_run(queued.run_id).status == "cancelled"
    assert repo.get_run(queued.run_id).steps == []


def test_timeout_ends_run_as_timed_out(repo):
    with _pool(repo) as pool:
        out = pool.submit(
            "fake_run",
            {"steps": 2, "fault": "hang", "fault_at": 1},
            plugins=[PLUGIN],
            record=True,
            timeout_s=6.0,  # time to reach the hanging step on a loaded machine
        ).wait(60)
    assert out.status == "timed_out" and out.signal == "SIGTERM"
    d = repo.get_run(out.run_id)
    assert d.status == "timed_out" and "timeout" in d.run.error
    assert "injecting fault hang" in d.log_tail
    assert [s.status for s in d.steps] == ["succeeded", "succeeded", "cancelled"]


def test_timeout_of_a_cooperative_job(repo):
    with _pool(repo, cancel_grace_s=10) as pool:
        out = pool.submit(
            "fake_run",
            {"steps": 1, "fault": "slow", "fault_at": 0},
            plugins=[PLUGIN],
            record=True,
            timeout_s=1.0,
        ).wait(30)
    assert out.status == "timed_out" and out.exit_code == 0  # it stopped itself at the timeout
    assert "timeout of 1 s" in out.error
    assert repo.get_run(out.run_id).status == "timed_out"


def test_shutdown_cancels_running_jobs():
    pool = _pool()
    h = pool.submit("fake_run", {"steps": 1, "fault": "slow", "fault_at": 0}, plugins=[PLUGIN])
    time.sleep(0.5)
    pool.shutdown(timeout=20)
    assert h.wait(1).status == "cancelled"
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit("echo", {})


def test_runs_of_a_killed_studio_are_marked_crashed(tmp_path):
    db = tmp_path / "killed.db"
    code = (
        "import os, sys; from studio.store import Repository\n"
        "r = Repository.open(sys.argv[1]); run = r.create_run(model_source='zoo:mlp', status='running')\n"
        "r.record_event(run.id, {'event': 'step_finished', 'index': 0, 'pass_name': 'p', 'status': 'succeeded',"
        " 'duration_s': 0.1, 'metrics': {'speedup': 2.0}, 'parity': None, 'artifacts': []})\n"
        "r.record_event(run.id, {'event': 'step_started', 'index': 1, 'pass_name': 'q', 'params': {}})\n"
        "print(run.id, flush=True); os._exit(9)  # killed mid-run\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=120
    )
    dead_run = out.stdout.strip()
    repo = Repository.open(db)
    alive = repo.create_run(model_source="zoo:mlp", status="running")  # ours: still running
    with _pool(repo):
        pass
    d = repo.get_run(dead_run)
    assert d.status == "crashed" and "exited before the run finished" in d.run.error
    assert [s.status for s in d.steps] == ["succeeded", "crashed"]
    assert d.steps[0].metrics == {} and d.steps[0].timing.speedup == 2.0
    assert repo.get_run(alive.id).status == "running"
    repo.close()


def test_killed_studio_leaves_no_worker_and_its_run_is_recovered(tmp_path):
    import psutil

    db = tmp_path / "orphan.db"
    code = (
        "import sys, time; from studio.store import Repository; from studio.workers.pool import WorkerPool\n"
        "repo = Repository.open(sys.argv[1]); pool = WorkerPool(repo, devices=[], cpu_workers=1)\n"
        f"h = pool.submit('fake_run', {{'steps': 2, 'fault': 'slow', 'fault_at': 1}}, plugins=[{PLUGIN!r}], record=True)\n"
        "while not pool.jobs() or pool.jobs()[0]['pid'] is None: time.sleep(0.05)\n"
        "while len([s for s in repo.get_run(h.run_id).steps if s.status == 'succeeded']) < 2:\n"
        "    time.sleep(0.05)\n"
        "print(h.run_id, pool.jobs()[0]['pid'], flush=True); time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True
    )
    run_id, worker_pid = parent.stdout.readline().split()
    parent.kill()  # the studio dies without any chance to clean up
    parent.wait(30)
    # The worker's guard sees the studio die and ends the worker's whole process group.
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(int(worker_pid)).wait(timeout=10)
    repo = Repository.open(db)
    with _pool(repo):  # the next start-up finds the orphaned run
        pass
    d = repo.get_run(run_id)
    assert d.status == "crashed"
    assert [s.status for s in d.steps][:2] == ["succeeded", "succeeded"]  # baseline, step 0 kept
    repo.close()


def test_pool_records_through_any_recorder_without_a_database():
    """The pool writes through the RunRecorder protocol: an in-memory recorder gets the same
    records a Repository would (no SQLite involved), and a Repository is one too."""
    from studio.workers.recorder import MemoryRecorder, RunRecorder

    rec = MemoryRecorder()
    with _pool(rec) as pool:
        out = pool.submit("fake_run", {"steps": 2}, plugins=[PLUGIN], record=True).wait(30)
    assert out.ok, out
    run = rec.runs[out.run_id]
    assert run["kind"] == "fake_run" and run["status"] == "succeeded"
    assert [e["event"] for e in run["events"]] == [
        "run_started",
        "step_started",
        "step_finished",
        "step_started",
        "step_finished",
        "run_finished",
    ]
    kinds = [c[0] for c in rec.calls]
    assert kinds[0] == "recover_interrupted" and kinds[1] == "create_run"
    assert kinds.index("set_status") < kinds.index("record_event")  # running, then events
    assert isinstance(rec, RunRecorder) and issubclass(Repository, RunRecorder)
