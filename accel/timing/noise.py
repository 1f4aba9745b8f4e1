"""The noise guard: what else used the machine while a comparison was timed (other
processes' CPU, load average, CPU frequency/governor, NVML GPU clocks and other GPU
processes where present)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

# Noisy when the interval's half width exceeds this fraction of the speedup ...
NOISY_HALF_WIDTH = 0.10
# ... or when other processes kept more than this fraction of the cores busy.
NOISY_OTHER_CORES = 0.25


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


@dataclass
class NoiseReport:
    """What else used the machine while a comparison was timed."""

    cores: int  # logical cores
    wall_s: float = 0.0
    own_cores: float = 0.0  # this process's average CPU use, in cores
    other_cores: float = 0.0  # every other process's average CPU use, in cores
    other_cores_max: float = 0.0  # the busiest round
    load_avg_1m: float | None = None
    cpu_mhz: float | None = None
    governor: str | None = None
    gpu: dict[str, Any] | None = None  # NVML: clocks, utilisation, other processes

    @property
    def busy(self) -> bool:
        return self.other_cores > NOISY_OTHER_CORES * self.cores

    def reason(self) -> str:
        return f"{self.cores} cores, {self.other_cores:.1f} busy with other processes"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["busy"] = self.busy
        return d


class NoiseMonitor:
    """Samples machine vs own CPU time (psutil) around each round; cheap (reads /proc)."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._ok = True
        try:
            import psutil

            self._psutil = psutil
            self._proc = psutil.Process()
        except Exception:  # noqa: BLE001 - no psutil: report what we can
            self._ok = False
        self.cores = os.cpu_count() or 1
        self._t0 = self._busy0 = self._own0 = 0.0
        self._last: tuple[float, float, float] | None = None
        self._other_max = 0.0

    def _snapshot(self) -> tuple[float, float, float]:
        """(wall, machine busy CPU seconds, own CPU seconds)."""
        now = time.monotonic()
        if not self._ok:
            return now, 0.0, 0.0
        t = self._psutil.cpu_times()
        idle = t.idle + getattr(t, "iowait", 0.0)
        busy = sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        c = self._proc.cpu_times()
        own = c.user + c.system
        return now, busy, own

    def start(self) -> None:
        self._last = self._snapshot()
        self._t0, self._busy0, self._own0 = self._last
        self._other_max = 0.0

    def tick(self) -> None:
        """Call between rounds: tracks the busiest stretch."""
        if self._last is None:
            return
        snap = self._snapshot()
        dt = snap[0] - self._last[0]
        if dt >= 0.05:  # shorter windows are below /proc/stat's resolution
            other = max(0.0, (snap[1] - self._last[1]) - (snap[2] - self._last[2])) / dt
            self._other_max = max(self._other_max, other)
            self._last = snap

    def stop(self) -> NoiseReport:
        snap = self._snapshot()
        wall = max(snap[0] - self._t0, 1e-9)
        own = max(0.0, snap[2] - self._own0)
        other = max(0.0, (snap[1] - self._busy0) - own)
        rep = NoiseReport(
            cores=self.cores,
            wall_s=wall,
            own_cores=own / wall,
            other_cores=min(other / wall, float(self.cores)),
            other_cores_max=min(max(self._other_max, other / wall), float(self.cores)),
        )
        with contextlib.suppress(OSError, AttributeError):
            rep.load_avg_1m = os.getloadavg()[0]
        if self._ok:
            with contextlib.suppress(Exception):
                freq = self._psutil.cpu_freq()
                rep.cpu_mhz = float(freq.current) if freq else None
        rep.governor = _read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
        if self.device.startswith("cuda"):
            rep.gpu = _nvml_state(self.device)
        return rep


def _nvml_state(device: str) -> dict[str, Any] | None:
    """GPU clocks, utilisation and other processes via NVML (None where unavailable)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            index = int(device.split(":", 1)[1]) if ":" in device else 0
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            me = os.getpid()
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            return {
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "utilization_pct": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                "other_processes": sum(1 for p in procs if p.pid != me),
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - a broken driver must not break a measurement
        log.debug("NVML query failed: %s", exc)
        return None
