"""A worker process as the operating system sees it: its output read until the process ends
(not until EOF), its memory with its descendants' (``MemoryProbe`` for the watchdog), and
the kill of what is left of its process group."""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def process_rss_mb(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MiB (None when it cannot be read)."""
    try:
        import psutil

        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except Exception:  # noqa: BLE001 - no psutil, or the process is gone
        pass
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_tree_rss_mb(pid: int) -> float | None:
    """Resident memory (``resident_bytes``) of process ``pid`` and its descendants in MiB (a
    worker's guard, the worker and what it started); None when it cannot be read."""
    try:
        import psutil

        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except Exception:  # noqa: BLE001 - no psutil, or the process is gone
        return process_rss_mb(pid)
    total = 0
    for p in procs:
        with contextlib.suppress(Exception):
            total += resident_bytes(p)
    return total / 2**20


def kill_group(pid: int) -> None:
    """SIGKILL what is left of the process group ``pid`` leads (after its leader ended: a
    group id is not reused while the group has members, so this reaches only ours)."""
    if not hasattr(os, "killpg"):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(pid, signal.SIGKILL)


class WorkerOutput:
    """The lines a worker writes to its stdout, read until the worker's process has ended.

    The process's end is watched through a pidfd (Linux) or its exit status, polled: a
    process forked inside the worker that keeps the pipe open cannot make a finished worker
    look alive. After the end, what is already in the pipe is still read."""

    POLL_MS = 1000  # with a pidfd the poll wakes at the exit anyway; this is a safety net
    POLL_NO_PIDFD_MS = 100

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(proc.pid)
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN | select.POLLHUP)
        if self.pidfd is not None:
            self.poller.register(self.pidfd, select.POLLIN)
        self.buffer = b""
        self.pending: collections.deque[str] = collections.deque()
        self.closed = False

    def _read_available(self) -> bool:
        """Read what the pipe holds now; False at end of file."""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self.buffer += chunk

    def _split(self) -> None:
        *lines, self.buffer = self.buffer.split(b"\n")
        self.pending.extend(line.decode("utf-8", errors="replace") for line in lines)

    def _drain_pending(self) -> Iterator[str]:
        # Popped one at a time: a caller that stops at a line (a warm worker's ``done``)
        # leaves the rest for its next read.
        while self.pending:
            yield self.pending.popleft()

    def lines(self) -> Iterator[str]:
        """Complete lines as they come; ends when the process has ended (or at EOF)."""
        yield from self._drain_pending()
        while not self.closed:
            timeout = self.POLL_MS if self.pidfd is not None else self.POLL_NO_PIDFD_MS
            with contextlib.suppress(InterruptedError):
                self.poller.poll(timeout)
            open_ = self._read_available()
            self._split()
            if not open_ or self.proc.poll() is not None:
                self._read_available()  # what was written before the end
                self._split()
                if self.buffer:
                    self.pending.append(self.buffer.decode("utf-8", errors="replace"))
                    self.buffer = b""
                self.close()
            yield from self._drain_pending()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None


class MemoryProbe:
    """Resident bytes (``resident_bytes``) of a worker and its children (compile workers, ...), cheap enough for
    the watchdog: the process list is refreshed every 2 s (scanning /proc holds the GIL,
    which the GUI thread shares), the memory of the known processes read every sample."""

    REFRESH_S = 2.0

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.procs: list[Any] = []
        self.refreshed = -1e9

    def rss(self, now: float) -> int:
        import psutil

        if now - self.refreshed >= self.REFRESH_S or not self.procs:
            self.refreshed = now
            try:
                root = psutil.Process(self.pid)
                self.procs = [root, *root.children(recursive=True)]
            except (psutil.Error, OSError):
                self.procs = []
        total = 0
        for p in self.procs:
            with contextlib.suppress(psutil.Error, OSError):
                total += resident_bytes(p)
        return total


def resident_bytes(proc: Any) -> int:
    """Resident memory of a psutil process that the kernel cannot simply drop: on Linux its
    anonymous and shared-memory pages (``RssAnon + RssShmem``), not the pages of files it
    maps. OpenVINO maps an IR's weights file and GenAI maps it again: a 1B decoder's 4.4 GB
    of f32 weights counted twice as "resident" stopped a search's trial that held 9 GB of
    its own (the page cache gives those pages back under pressure). Elsewhere: RSS."""
    status = Path(f"/proc/{proc.pid}/status")
    try:
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        return sum(int(fields[k].split()[0]) * 1024 for k in ("RssAnon", "RssShmem"))
    except (OSError, KeyError, ValueError, IndexError):
        return int(proc.memory_info().rss)
