"""A worker's guard: the process that owns a worker's lifetime on the operating system's side.

The pool starts every worker in a new session (its own process group). Before the worker
imports anything heavy, ``split_off_guard()`` forks: the child goes on to be the worker, the
parent stays behind as a small guard that

- is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so whatever the worker's libraries fork
  and orphan (a telemetry sender, a compile worker) stays its descendant;
- waits on the worker's process (a pidfd; ``waitpid``), never on a pipe: a forked child that
  keeps the worker's stdout open cannot make a finished worker look alive;
- when the worker ends, whichever way, kills every process left in the group and every
  descendant, reaps them, and exits with the worker's status (its exit code, or the signal
  that ended it), so the pool sees the worker's own end;
- when the studio process that started it dies (even by SIGKILL), kills the worker's group and
  exits: nothing outlives the studio.

The worker dies with its guard (``PR_SET_PDEATHSIG``). The pool's own escalation sends signals
to the whole group; the guard ignores SIGTERM/SIGINT/SIGHUP so that it is still there to clean
up after the worker, and SIGKILL ends everything at once.

Linux only: elsewhere ``split_off_guard`` does nothing and the pool's group kill is the
defence.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# How long the guard waits for killed processes to be reaped before it exits anyway.
REAP_S = 3.0
# Without pidfds, how often the guard looks at the worker and its parent.
POLL_S = 0.2


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def enabled() -> bool:
    """Whether workers run under a guard here (Linux, and not switched off for a test)."""
    return sys.platform.startswith("linux") and os.environ.get("ACCEL_WORKER_GUARD", "1") != "0"


def split_off_guard() -> None:
    """Fork; return in the child (the worker), never return in the parent (the guard).
    A no-op where guards are not supported."""
    if not enabled():
        return
    parent = os.getppid()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        pid = os.fork()
    except OSError:
        return  # no guard is better than no worker
    if pid == 0:
        # The worker: die with the guard (it dies only after the studio did, or by SIGKILL).
        guard_pid = os.getppid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != guard_pid:  # the guard died before the line above
            os._exit(1)
        # The worker is a subreaper too: a warm worker runs each job in a child of its own
        # (studio.workers.confine); what that child leaves behind must come back to the
        # worker, which ends it after the job, not to the guard, which would keep it until
        # the warm worker retires.
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        return
    _guard(pid, parent)


def _guard(worker: int, parent: int) -> None:
    """The guard's whole life (never returns)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    # The guard keeps no end of the worker's pipes: the pool's readers see the worker's own.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)
    status = _wait_for_worker(worker, parent)
    _kill_leftovers()
    _exit_like(status)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _reap(worker: int) -> int | None:
    """Reap every child that has ended; the worker's wait status when it is among them."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        except InterruptedError:
            continue
        if pid == 0:
            return status
        if pid == worker:
            status = st


def _wait_for_worker(worker: int, parent: int) -> int:
    """Wait until the worker ends (its wait status) or the studio dies (the worker is then
    killed, and its status is what that kill gave)."""
    worker_fd, parent_fd = _pidfd(worker), _pidfd(parent)
    if os.getppid() != parent:  # the studio was gone before we could watch it
        parent_fd = None
        _kill_worker(worker)
    poller = select.poll()
    for fd in (worker_fd, parent_fd):
        if fd is not None:
            poller.register(fd, select.POLLIN)
    while True:
        status = _reap(worker)
        if status is not None:
            return status
        if os.getppid() != parent:
            _kill_worker(worker)
        wait_ms = 1000 if worker_fd is not None else int(POLL_S * 1000)
        with contextlib.suppress(InterruptedError):
            poller.poll(wait_ms)


def _kill_worker(worker: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(worker, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                out.extend(int(x) for x in f.read().split())
    return out


def _group_members(pgid: int) -> list[int]:
    """Processes whose process group is ``pgid`` (from /proc)."""
    out: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            # pid (comm) state ppid pgrp ...: comm may hold spaces; split after its ')'
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid:
                out.append(int(name))
    return out


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in _children(stack.pop()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def kill_descendants(pid: int, *, group: bool = False, wait_s: float = REAP_S) -> None:
    """SIGKILL every descendant of ``pid`` (with ``group``, every other member of this
    process group too) and reap those that are this process's children, until none is left
    or ``wait_s`` passed. ``pid`` is this process (a guard, or a warm worker between jobs)."""
    me = os.getpid()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        targets = _descendants(pid)
        if group:
            targets.update(_group_members(os.getpgid(0)))
        targets.discard(me)
        for target in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(target, signal.SIGKILL)
        _reap(-1)
        if not targets:
            return
        time.sleep(0.02)


def _kill_leftovers() -> None:
    """The guard's last act: SIGKILL every descendant and every other member of its process
    group, and reap them (as the subreaper, orphans are its to reap)."""
    kill_descendants(os.getpid(), group=True)


def _exit_like(status: int) -> None:
    """Exit with the worker's exit code, or die of the signal that ended it."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the worker's crash, not ours
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), sig)
            time.sleep(1.0)
        os._exit(128 + sig)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
    os._exit(code)


__all__ = ["enabled", "kill_descendants", "split_off_guard"]
