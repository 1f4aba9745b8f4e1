"""Where a measurement runs: the CPUs it may use and its thread count, for torch and every
runtime alike."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from accel.timing.settings import physical_cores


@dataclass(frozen=True)
class CpuPlacement:
    """Where a comparison runs: the CPUs it may use and its thread count.

    With ``threads`` left to the studio (the default), CPUs that other processes keep busy are
    left out while timing: a thread pool that shares a core with another busy process waits
    for it at every barrier (eager torch with 2 OpenMP threads on 2 cores, one of them taken,
    ran 10-40x slower than on the free core alone), which says nothing about the model. The
    comparison then runs on the free CPUs with one thread each, and says so."""

    threads: int
    cpus: tuple[int, ...] = ()  # empty: wherever the OS puts it (not pinned)
    busy_cpus: tuple[int, ...] = ()  # left out because other processes kept them busy

    @property
    def note(self) -> str | None:
        if not self.cpus:
            return None
        busy = ", ".join(str(c) for c in self.busy_cpus)
        return (
            f"timed on CPU {', '.join(str(c) for c in self.cpus)} with {self.threads} "
            f"thread(s): CPU {busy} busy with other processes"
        )

    @contextlib.contextmanager
    def pinned(self):
        """Restrict every thread of this process to ``cpus`` for the block (Linux)."""
        if not self.cpus or not hasattr(os, "sched_setaffinity"):
            yield
            return
        original = os.sched_getaffinity(0)
        _set_all_threads_affinity(set(self.cpus))
        try:
            yield
        finally:
            # Threads created inside the block (thread pools) inherit the narrow mask: widen
            # every thread back, not only the ones that existed before.
            _set_all_threads_affinity(original)


def _set_all_threads_affinity(cpus: set[int]) -> None:
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, cpus)


# A CPU counts as busy when other processes kept it busier than this while we sampled.
BUSY_CPU = 0.5
CPU_SAMPLE_S = 0.3


def per_cpu_busy(sample_s: float = CPU_SAMPLE_S) -> dict[int, float] | None:
    """Busy fraction of each CPU this process may use, sampled over ``sample_s`` while this
    thread sleeps (so it is other processes' use, and our own idle threads'). None where
    unknown (no psutil, no affinity API)."""
    try:
        import psutil

        allowed = sorted(os.sched_getaffinity(0))
        per = psutil.cpu_percent(interval=sample_s, percpu=True)
    except Exception:  # noqa: BLE001 - platform without per-CPU figures: do not pin
        return None
    return {c: per[c] / 100.0 for c in allowed if c < len(per)}


def choose_cpus(threads: int | None, device: str = "cpu") -> CpuPlacement:
    """The placement for a comparison: ``threads`` as given when the user set it (never
    pinned); otherwise the physical cores, or only the CPUs other processes leave free."""
    if threads is not None:
        return CpuPlacement(threads=threads)
    cores = physical_cores()
    if str(device).startswith("cuda"):
        return CpuPlacement(threads=cores)
    busy = per_cpu_busy()
    if not busy or len(busy) < 2:
        return CpuPlacement(threads=cores)
    free = tuple(c for c, b in sorted(busy.items()) if b < BUSY_CPU)
    taken = tuple(c for c, b in sorted(busy.items()) if b >= BUSY_CPU)
    if not taken or not free:  # all free: the usual case; all busy: pinning cannot help
        return CpuPlacement(threads=cores)
    return CpuPlacement(threads=max(1, min(cores, len(free))), cpus=free, busy_cpus=taken)


def with_threads(model: Any, threads: int) -> Any:
    """A LoadedModel whose runtime uses ``threads`` threads (an ONNX Runtime session's
    intra-op threads with idle threads sleeping rather than spinning, an OpenVINO compiled model's threads: a new session when it had
    another count; its kind's handler decides); anything else unchanged."""
    if not isinstance(getattr(model, "kind", None), str) or not hasattr(model, "session_options"):
        return model
    from accel.models.runtime import runtime_of

    return runtime_of(model).with_threads(model, threads)


@contextlib.contextmanager
def torch_threads(threads: int):
    """``torch.set_num_threads(threads)`` for the block, restored afterwards."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)
