"""The Qt bridge: pool updates arrive as signals, in order, on the GUI thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QThread  # noqa: E402

from studio.workers.pool import WorkerPool  # noqa: E402
from studio.workers.qt_bridge import PoolBridge  # noqa: E402

PLUGIN = str(Path(__file__).with_name("fault_jobs.py"))


def test_bridge_emits_on_gui_thread_in_order(qtbot, qapp):
    pool = WorkerPool(devices=[], cpu_workers=1, cancel_grace_s=0.2, kill_grace_s=0.2)
    bridge = PoolBridge(pool)
    gui = qapp.thread()
    seen: list[tuple] = []
    threads: set[bool] = set()

    def on(name):
        def slot(*args):
            threads.add(
                QThread.currentThread() is gui
                and threading.current_thread() is threading.main_thread()
            )
            seen.append((name, *args))

        return slot

    bridge.jobStarted.connect(on("started"))
    bridge.jobEvent.connect(on("event"))
    bridge.jobFinished.connect(on("finished"))
    bridge.poolChanged.connect(on("pool"))
    bridge.busyChanged.connect(on("busy"))
    try:
        ok = pool.submit("fake_run", {"steps": 1}, plugins=[PLUGIN])
        bad = pool.submit(
            "fake_run", {"steps": 2, "fault": "segfault", "fault_at": 1}, plugins=[PLUGIN]
        )
        qtbot.waitUntil(lambda: sum(1 for s in seen if s[0] == "finished") == 2, timeout=30000)
    finally:
        bridge.close()
        pool.shutdown()
    assert threads == {True}
    finished = {s[1]: s[2] for s in seen if s[0] == "finished"}
    assert finished[ok.job_id].status == "succeeded"
    assert finished[bad.job_id].status == "crashed" and finished[bad.job_id].signal == "SIGSEGV"
    ok_events = [s[2]["event"] for s in seen if s[0] == "event" and s[1] == ok.job_id]
    assert ok_events == ["run_started", "step_started", "step_finished", "run_finished"]
    assert ("started", ok.job_id, "fake_run") in seen
    assert sum(1 for s in seen if s[0] == "pool") == 6  # 2 x (queued, started, finished)
    assert seen[-1] in (("busy", 0), ("pool",))
    assert bridge.busy == 0
