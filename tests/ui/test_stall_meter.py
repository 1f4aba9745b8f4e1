"""The GUI stall meter itself: work done on the GUI thread is caught, and time spent in
garbage collections is named; the heap that existed before it started is frozen while it
runs (as studio.app.settle_garbage_collector leaves the app's) and unfrozen after."""

from __future__ import annotations

import gc
import time

import pytest
from PySide6.QtCore import QTimer

from tests.ui.stall_meter import MAX_WORK_MS, StallMeter


def _busy(ms: float) -> None:
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass


def test_work_on_the_gui_thread_fails_the_check_and_gc_is_named(qtbot):
    with StallMeter() as meter:
        assert gc.get_freeze_count() > 0  # the heap before the meter is left out of collections
        garbage = [[i] for i in range(300_000)]  # made after the freeze: collected
        QTimer.singleShot(30, lambda: (_busy(MAX_WORK_MS * 1.5), gc.collect()))
        qtbot.wait(300)
    assert gc.get_freeze_count() == 0
    del garbage
    with pytest.raises(AssertionError, match=r"worked \d+ ms at a stretch while a test, \d+ ms"):
        meter.check("a test")
    worst = meter.work_ms.index(max(meter.work_ms))
    assert meter.gc_ms[worst] > 0


def test_an_idle_gui_thread_passes(qtbot):
    with StallMeter() as meter:
        qtbot.wait(200)
    meter.check("idle")
    assert meter.ticks > 5
