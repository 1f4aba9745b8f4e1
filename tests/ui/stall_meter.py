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
"""

from __future__ import annotations

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

    def _tick(self) -> None:
        now = (time.perf_counter(), time.thread_time())
        if self.last is not None:
            self.wall_ms.append((now[0] - self.last[0]) * 1000.0 - TICK_MS)
            self.work_ms.append((now[1] - self.last[1]) * 1000.0)
        self.last = now

    def __enter__(self) -> StallMeter:
        self.last = None
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.stop()

    @property
    def ticks(self) -> int:
        return len(self.wall_ms)

    def check(self, doing: str) -> None:
        """Fail when the GUI thread worked or stalled past the bounds while ``doing``."""
        assert self.ticks > 0, "the timer did not run: the event loop was blocked"
        work, wall = max(self.work_ms), max(self.wall_ms)
        assert work < MAX_WORK_MS, (
            f"the GUI thread worked {work:.0f} ms at a stretch while {doing} "
            f"(worst: {sorted(round(w) for w in self.work_ms)[-5:]})"
        )
        assert wall < MAX_WALL_MS, (
            f"the GUI thread stalled {wall:.0f} ms while {doing} "
            f"(worst: {sorted(round(w) for w in self.wall_ms)[-5:]})"
        )
