"""The search's Ray path against a real local Ray cluster (head + one worker node on
127.0.0.1): 4 trials run as Ray tasks, come back with their events and are recorded by the
studio as runs; the cluster is stopped afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from accel.search import SearchConfig
from studio.optimize import optimize
from studio.store import Repository
from studio.store.records import RunFilter

ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], ready: str, timeout: float = 120.0) -> subprocess.Popen[str]:
    """``ray start ... --block`` in its own process group; wait for its ``ready`` line."""
    ray_bin = str(Path(sys.executable).parent / "ray")
    proc = subprocess.Popen(
        [ray_bin, "start", *args, "--node-ip-address=127.0.0.1", "--num-cpus=1",
         "--disable-usage-stats", "--block"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if ready in line:
                seen.set()

    threading.Thread(target=read, daemon=True).start()
    if not seen.wait(timeout):
        _stop([proc])
        raise RuntimeError("ray start did not come up:\n" + "".join(lines[-30:]))
    return proc


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    """End the processes this test started (their process groups), nothing else."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


@pytest.fixture
def local_cluster(tmp_path):
    """A head and one worker node on 127.0.0.1, started with ``ray start``."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    procs = [
        _start(["--head", f"--port={port}", "--include-dashboard=false"], "Ray runtime started")
    ]
    try:
        procs.append(_start([f"--address={address}"], "Ray runtime started"))
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(procs)


@pytest.mark.slow
def test_four_trial_search_through_a_local_ray_cluster(local_cluster, tmp_path):
    repo = Repository.open(str(tmp_path / "s.db"))
    config = SearchConfig(
        model="zoo:mlp",
        objective="size",
        max_trials=4,
        budget_s=None,
        passes=("export_onnx", "quantize_onnx_dynamic", "onnxruntime"),
        out_dir=str(tmp_path / "out"),
        bench_iters=4,
        bench_rounds=2,
        bench_min_time_s=0.0,
        bench_warmup=1,
    )
    started = []
    outcome = optimize(
        config,
        repo=repo,
        cluster=local_cluster,
        on_start=lambda sid, where: started.append(where),
    )
    assert "Ray cluster" in started[0] and "2 node(s)" in started[0]
    res = outcome.result
    assert res.status == "finished" and len(res.trials) == 4
    assert all(t.status == "ok" for t in res.trials), [t.error for t in res.trials]
    assert res.best is not None and (tmp_path / "out" / "best.yaml").is_file()
    runs = repo.list_runs(RunFilter(tags=("ray",)))
    assert len(runs) == 4 and {r.status for r in runs} == {"succeeded"}
    assert {t.run_id for t in res.trials} == {r.id for r in runs}
    detail = repo.get_run(res.trial(res.best).run_id)
    assert [s.pass_name for s in detail.steps] == list(res.trial(res.best).chain)
    # trials on the cluster share the prefix cache folder too
    assert res.cache["hits"] >= 1
