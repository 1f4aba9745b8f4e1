"""The box a model runs in: operating-system confinement of the process that loads it.

Assume a hostile model file will, one day, get some code to run (a format grows faster than
any allow-list of its contents). This package makes that code harmless: :func:`confine`
applies a :class:`Box` to the calling process and everything it starts, with

* Linux Landlock (:mod:`accel.sandbox.landlock`): read only the box's read folders (the
  model's folder, the Python environment, system libraries) and the write folders; write
  only the write folders (the step's work folder, a private temp folder); TCP bind/connect
  only on the box's ports (none unless a job serves on loopback); no signals or abstract
  UNIX sockets outside the box;
* a seccomp filter (:mod:`accel.sandbox.seccomp`): ``socket(2)`` only for the box's address
  families (none by default: no UDP, raw, netlink or UNIX sockets to a path).

Nothing here knows about jobs or the studio; ``studio.workers.confine`` computes a job's box.
Where the kernel lacks Landlock, :func:`confine` says so (once per process, in the log) and
applies what it can: a machine without confinement still has every other defence.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from accel.sandbox import landlock, seccomp

log = logging.getLogger(__name__)

__all__ = ["Box", "Confinement", "availability", "confine", "environment_paths"]

# What any Python process with torch needs to read: libraries, the dynamic loader's cache,
# time zones, CPU facts (/proc, /sys: torch and ONNX Runtime size their thread pools there).
SYSTEM_READ = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/opt",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/ssl",
    "/etc/alternatives",
    "/etc/OpenCL",
    "/proc",
    "/sys/devices/system/cpu",
    "/sys/devices/system/node",
    "/sys/fs/cgroup",
    "/sys/bus",
    "/sys/class",
    "/dev/urandom",
    "/dev/random",
)
# Devices a job writes: the null device and POSIX shared memory (torch, multiprocessing
# semaphores); GPUs when the job has one.
SYSTEM_WRITE = ("/dev/null", "/dev/zero", "/dev/full", "/dev/shm")
GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/dri")


@dataclasses.dataclass(frozen=True)
class Box:
    """What a confined process may touch. ``read``/``write``: folders or files (write implies
    read); ``tcp_ports``: TCP ports it may bind and connect (loopback serving);
    ``socket_families``: address families ``socket(2)`` may create (IP ones: TCP only)."""

    read: tuple[Path, ...] = ()
    write: tuple[Path, ...] = ()
    tcp_ports: tuple[int, ...] = ()
    socket_families: tuple[int, ...] = ()
    gpu: bool = False

    def with_system(self) -> Box:
        """This box plus what every Python process with torch needs (environment_paths)."""
        read = [*self.read, *environment_paths(), *map(Path, SYSTEM_READ)]
        write = [*self.write, *map(Path, SYSTEM_WRITE)]
        if self.gpu:
            write += [Path(p) for p in GPU_DEVICES]
            write += sorted(Path("/dev").glob("nvidia[0-9]*"))
        return dataclasses.replace(self, read=_unique(read), write=_unique(write))


@dataclasses.dataclass(frozen=True)
class Confinement:
    """What :func:`confine` applied: the Landlock ABI (0: none), whether the TCP rules and
    the socket filter are on, and, when something is missing, why."""

    landlock_abi: int
    tcp_rules: bool
    socket_filter: bool
    missing: str = ""

    @property
    def complete(self) -> bool:
        return self.landlock_abi > 0 and self.tcp_rules and self.socket_filter


def environment_paths() -> list[Path]:
    """The Python environment: prefixes, standard library, site-packages, and the folders
    of the engine's own packages (a source checkout is not under site-packages)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.update(v for k, v in sysconfig.get_paths().items() if k != "scripts")
    paths.update(p for p in sys.path if p and os.path.isabs(p) and "site-packages" in p)
    for name in ("accel", "studio"):
        mod = sys.modules.get(name)
        for folder in getattr(mod, "__path__", []) or []:
            paths.add(folder)
    if getattr(sys, "frozen", False):  # a PyInstaller bundle: its own folder
        paths.add(os.path.dirname(sys.executable))
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    return [Path(p) for p in sorted(paths) if p]


_WARNED: set[str] = set()


def availability() -> str:
    """One sentence on what confinement this machine gives ('' when all of it)."""
    if platform.system() != "Linux":
        return (
            f"models are not confined on {platform.system()}: the box needs Linux Landlock; "
            "the studio's other defences still apply"
        )
    abi = landlock.abi_version()
    if abi < 1:
        return (
            "this Linux kernel has no Landlock (needs 5.13 or newer, with landlock in the "
            "'lsm=' boot list): models are not confined to their folders; the studio's other "
            "defences still apply"
        )
    parts = []
    if abi < 4:
        parts.append(f"Landlock ABI {abi} has no TCP rules (needs 4, Linux 6.7)")
    if not seccomp.supported():
        parts.append(f"no socket filter for {platform.machine()}")
    return "; ".join(parts)


def confine(box: Box) -> Confinement:
    """Confine this process to ``box`` (plus the system paths) for the rest of its life.
    Raises OSError when a rule cannot be applied; where the kernel lacks a feature, logs it
    once and applies the rest."""
    full = box.with_system()
    abi = landlock.abi_version()
    missing = availability()
    if abi >= 1:
        landlock.restrict(full.read, full.write, tcp_ports=full.tcp_ports, abi=abi)
    filtered = seccomp.supported()
    if filtered:
        seccomp.restrict_sockets(full.socket_families)
    if missing and missing not in _WARNED:
        _WARNED.add(missing)
        log.warning("%s", missing)
    return Confinement(abi, abi >= 4, filtered, missing)


def _unique(paths: Iterable[Path]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(Path(os.path.abspath(p)) for p in paths))
