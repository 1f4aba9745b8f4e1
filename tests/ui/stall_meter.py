"""How long the GUI thread is kept from its event loop, measured two ways.

A QTimer fires every 10 ms on the GUI thread. Between two ticks the meter records

* the GUI thread's own CPU time: work done on it (a slot that computes, a synchronous load,
  a scene built item by item). This is what makes a window feel slow on any machine, and
  it does not depend on what else the machine runs.
* the wall time beyond the tick: it also counts waits (on a lock, the GIL, a pipe) and the
  OS not scheduling this process while a worker keeps every core busy, as on a 2-core CI
  machine, where it reaches a few hundred ms with no work on the GUI thread at all.

Tests bound the work tightly (a frame budget's order) and the wall time loosely (a freeze,
e.g. the GUI thread waiting on a worker or the store, is seconds).

The studio settles Python's garbage collector once its window is up (``gc.collect`` then
``gc.freeze``, studio.app.settle_garbage_collector): a full collection over torch, Qt and
the modules takes a few hundred ms. The meter does the same while it runs, so it measures
the window as the app has it, not the heap a pytest worker gathered over earlier test
files (a full collection over 1 M small objects: 252 ms; after freeze: 0 ms). Collections
that still run are counted as work and named in the failure.
"""

from __future__ import annotations

import gc
import time

from PySide6.QtCore import QTimer

TICK_MS = 10
MAX_WORK_MS = 100
MAX_WALL_MS = 1000


class StallMeter:
    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self._tick)
        self.last: tuple[float, float] | None = None
        self.work_ms: list[float] = []
        self.wall_ms: list[float] = []
        self.gc_ms: list[float] = []  # time in garbage collections, per gap
        self._gc_now = 0.0
        self._gc_start: float | None = None

    def _on_gc(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif self._gc_start is not None:
            self._gc_now += (time.perf_counter() - self._gc_start) * 1000.0
            self._gc_start = None

    def _tick(self) -> None:
        now = (time.perf_counter(), time.thread_time())
        if self.last is not None:
            self.wall_ms.append((now[0] - self.last[0]) * 1000.0 - TICK_MS)
            self.work_ms.append((now[1] - self.last[1]) * 1000.0)
            self.gc_ms.append(self._gc_now)
        self._gc_now = 0.0
        self.last = now

    def __enter__(self) -> StallMeter:
        from studio.app import settle_garbage_collector

        settle_garbage_collector()  # as the app does once its window is up
        gc.callbacks.append(self._on_gc)
        self.last = None
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.stop()
        gc.callbacks.remove(self._on_gc)
        gc.unfreeze()  # the next tests' garbage is collected again

    @property
    def ticks(self) -> int:
        return len(self.wall_ms)

    def check(self, doing: str) -> None:
        """Fail when the GUI thread worked or stalled past the bounds while ``doing``."""
        assert self.ticks > 0, "the timer did not run: the event loop was blocked"
        work, wall = max(self.work_ms), max(self.wall_ms)
        in_gc = self.gc_ms[self.work_ms.index(work)]
        assert work < MAX_WORK_MS, (
            f"the GUI thread worked {work:.0f} ms at a stretch while {doing}, {in_gc:.0f} ms "
            f"of it in garbage collections (worst: {sorted(round(w) for w in self.work_ms)[-5:]})"
        )
        assert wall < MAX_WALL_MS, (
            f"the GUI thread stalled {wall:.0f} ms while {doing} "
            f"(worst: {sorted(round(w) for w in self.wall_ms)[-5:]})"
        )
