"""Test-only job kinds for the worker pool, loaded into workers as a plugin (by file path).

``fake_run`` emits the events a recipe run would (run_started, step_started,
step_finished..., run_finished) without torch, and can fail at a chosen step:
``fault``: "segfault" (ctypes.string_at(0)), "exit" (os._exit), "kill" (SIGKILL,
as the OOM killer does), "hang" (ignores cancel), "raise", "slow" (cooperative:
checks cancel in its loop).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from typing import Any

from accel.errors import Cancelled
from accel.jobs import register_job


def inject(fault: str) -> None:
    print(f"injecting fault {fault}", file=sys.stderr, flush=True)
    if fault == "segfault":
        ctypes.string_at(0)
    elif fault == "exit":
        os._exit(7)
    elif fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "hang":
        while True:  # ignores cancellation on purpose
            time.sleep(0.05)
    elif fault == "unkillable":  # ignores cancel and SIGTERM: only SIGKILL stops it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(0.05)
    elif fault == "raise":
        raise RuntimeError("injected failure")
    elif fault:
        raise ValueError(f"unknown fault {fault!r}")


def _sleep(seconds: float, cancel: Any) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cancel():
            raise Cancelled("cancelled in a loop")
        time.sleep(0.01)


def fake_run(params: dict[str, Any], emit: Any, cancel: Any) -> dict[str, Any]:
    steps = int(params.get("steps", 2))
    fault = params.get("fault") or ""
    fault_at = int(params.get("fault_at", steps - 1))
    step_s = float(params.get("step_s", 0.0))
    emit(
        {
            "event": "run_started",
            "run_dir": params.get("run_dir", ""),
            "model_source": params.get("model", "zoo:mlp"),
            "model_kind": "torch",
            "device": "cpu",
            "recipe": {"name": "fake", "steps": steps},
            "environment": {"python": sys.version.split()[0], "pid": os.getpid()},
            "num_steps": steps,
            "baseline": {"latency_p50_ms": 2.0, "size_bytes": 1000.0},
        }
    )
    for i in range(steps):
        if cancel():
            raise Cancelled("cancelled between steps")
        emit({"event": "step_started", "index": i, "pass_name": f"fake{i}", "params": {"i": i}})
        if i == fault_at and fault:
            if fault == "slow":
                _sleep(60.0, cancel)
            else:
                inject(fault)
        _sleep(step_s, cancel)
        emit(
            {
                "event": "step_finished",
                "index": i,
                "pass_name": f"fake{i}",
                "status": "succeeded",
                "duration_s": step_s,
                "metrics": {"latency_p50_ms": 2.0 / (i + 2), "speedup": (i + 2) / 2.0},
                "parity": {
                    "passed": True,
                    "first_failure": None,
                    "outputs": [{"name": "out", "max_abs": 1e-4 * (i + 1), "passed": True}],
                },
                "artifacts": [],
            }
        )
    emit({"event": "run_finished", "status": "succeeded", "duration_s": steps * step_s})
    return {"status": "succeeded", "steps": steps}


def fork_holder(params: dict[str, Any], emit: Any, cancel: Any) -> dict[str, Any]:
    """Forks a child that keeps the worker's pipes open and sleeps (what OpenVINO's telemetry
    sender did), then finishes or hangs. ``child``: "plain", "ignore_term" (ignores SIGTERM)
    or "setsid" (leaves the worker's process group); ``then``: "return" or "hang". The
    child's pid goes to ``pid_file``."""
    how = params.get("child", "plain")
    pid = os.fork()
    if pid == 0:
        if how == "ignore_term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif how == "setsid":
            os.setsid()
        time.sleep(600)
        os._exit(0)
    with open(params["pid_file"], "w") as f:
        f.write(str(pid))
    emit({"event": "log", "level": "info", "message": f"child {pid} holds the pipes"})
    if params.get("then") == "hang":
        inject("unkillable")
    return {"child": pid}


def echo(params: dict[str, Any], emit: Any, cancel: Any) -> dict[str, Any]:
    """Emits ``n`` small events as fast as it can (protocol overhead benchmark)."""
    n = int(params.get("n", 10))
    for i in range(n):
        emit({"event": "progress", "index": 0, "fraction": i / max(n, 1), "message": "x"})
    return {"n": n, "device": params.get("device"), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}


def print_to_stdout(params: dict[str, Any], emit: Any, cancel: Any) -> dict[str, Any]:
    """A job that prints to stdout, which must not corrupt the protocol."""
    print("this is not JSON")
    os.write(1, b"neither is this\n")
    emit({"event": "log", "level": "info", "message": "still fine"})
    return {"ok": True}


register_job("fake_run", fake_run)
register_job("echo", echo)
register_job("fork_holder", fork_holder)
register_job("print_to_stdout", print_to_stdout)
