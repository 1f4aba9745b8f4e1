"""Ctrl-C in `studio optimize` mid-trial: exit 130, the finished trials kept, no traceback,
and no process of the studio left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _alive(pids: list[int]) -> list[int]:
    import psutil

    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_sigint_mid_trial_exits_130_with_no_traceback_and_no_orphans(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), ACCEL_STUDIO_HOME=str(tmp_path / "home"))
    args = [
        sys.executable, "-m", "studio", "--db", str(tmp_path / "s.db"), "optimize", "zoo:resnet",
        "--passes", "fold_batchnorm,openvino,quantize_openvino", "--budget", "2m",
        "--trial-timeout", "60", "--iters", "4", "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    p = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal sends it (a background test run ignores SIGINT otherwise).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen: list[str] = []
    workers: list[int] = []
    deadline = time.monotonic() + 240
    assert p.stdout is not None
    for line in p.stdout:  # wait until the second trial runs (the first one is kept)
        seen.append(line)
        if "trial 1:" in line and line.rstrip().endswith("..."):
            time.sleep(1.0)
            workers = _descendants(p.pid)
            break
        assert time.monotonic() < deadline, "".join(seen)
    assert workers, "".join(seen)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 130, err
    assert "Traceback" not in err and "Traceback" not in out, err
    assert "cancelling the search" in err
    assert took < 15, f"the search took {took:.1f} s to stop"
    time.sleep(0.5)
    assert _alive(workers) == [], "processes of the studio outlived it"
    assert (tmp_path / "out" / "search.json").exists(), (out, err)


class _Inspecting:
    """A search thread still inspecting its model (no worker, nothing stored): the first
    wait is interrupted by Ctrl-C, later ones time out."""

    def __init__(self):
        self.inspecting = True
        self.cancelled = False
        self.waits_after_cancel = 0

    def join(self, timeout=None):
        if not self.cancelled:
            raise KeyboardInterrupt
        self.waits_after_cancel += 1
        return False

    def cancel(self):
        self.cancelled = True


def test_ctrl_c_while_the_model_is_inspected_returns_at_once(monkeypatch):
    """Ctrl-C 7 s into `studio optimize` of a large model came while the CLI was still loading
    it to inspect (up to 18 s here): the CLI waited for that to end (21 s to stop). Before
    any worker started it has nothing to wind down and stops at once."""
    from studio.commands import optimize as cmd
    from studio.optimize import SearchCancelled, SearchThread

    monkeypatch.setattr(cmd, "CANCEL_WAIT_S", 1.0)
    th = _Inspecting()
    assert cmd.wait_for_search(th) is True
    assert th.cancelled and th.waits_after_cancel == 0
    # ... and the search thread, once its inspection ends, starts nothing.
    search = SearchThread(config=None)
    search.cancel()
    try:
        search._inspected()
        raise AssertionError("the search went on after a cancel during its inspection")
    except SearchCancelled:
        pass
    assert search.inspecting is False
