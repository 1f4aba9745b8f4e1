"""Each job runs in a box: a child forked from its worker, confined to that job's folders.

A worker (one-shot or warm) imports what it needs once; for every job it forks a child that
computes the job's :class:`accel.sandbox.Box` from its JobSpec (:func:`job_box`), makes a
private temp folder its ``TMPDIR`` and ``HOME``, confines itself (``accel.sandbox.confine``:
Landlock + a socket filter) and only then loads the model and runs the job. Landlock rules
cannot be relaxed, so the box is per job; the fork after the imports (a zygote) keeps the
start cheap. The worker itself stays unconfined: it reads the pool's messages, forwards a
``cancel`` to the child (SIGUSR1) and, when the child dies without finishing, dies the same
way, so the pool sees a crash exactly as it did when jobs ran in the worker itself.

What a job may read: its model's folder (a factory's file or package), its recipe and data
files, a run folder it inspects, plugin files, the Python environment and system libraries.
What it may write: its run or output folder, its private temp folder, ``/dev/shm``. No
sockets, except TCP on the loopback ports a serve test was given. ``ACCEL_STUDIO_UNCONFINED=1``
(set by the person, never by a file) turns the box off, loudly.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel.sandbox import confine
from studio.workers.job_box import job_box
from studio.workers.protocol import Done, JobSpec, MessageWriter

log = logging.getLogger(__name__)

UNCONFINED_ENV = "ACCEL_STUDIO_UNCONFINED"
_PR_SET_PDEATHSIG = 1


_WORKER_PID: int | None = None  # in a job's child: the worker it was forked from


def worker_pid() -> int:
    """The worker process's pid (the one the pool started), also inside a job's child."""
    return _WORKER_PID or os.getpid()


def confinement_note() -> str:
    """What a person must know about the box on this machine: '' when every job is fully
    confined, else one sentence (no Landlock, an old ABI, the box turned off)."""
    from accel.sandbox import availability

    if confinement_off():
        return (
            f"{UNCONFINED_ENV} is set: models run without the box (they can read and write "
            "anything you can, and use the network)"
        )
    return availability()


def confinement_off() -> bool:
    return os.environ.get(UNCONFINED_ENV, "").strip().lower() in ("1", "true", "yes")


# -- the fork --------------------------------------------------------------------------


RunJob = Callable[[Any, JobSpec, threading.Event], None]


def run_confined(run_job: RunJob, proto: Any, spec: JobSpec, cancelled: threading.Event) -> None:
    """Run ``run_job(proto, spec, event)`` in a confined child of this worker and wait for it.
    ``cancelled`` (set by this worker's stdin reader) is forwarded to the child as SIGUSR1.
    A child that dies without finishing takes this worker down the same way (the pool then
    records the crash as before)."""
    if confinement_off():
        log.warning("%s is set: this job runs unconfined", UNCONFINED_ENV)
        run_job(proto, spec, cancelled)
        return
    proto.flush()
    sys.stderr.flush()
    gc.freeze()  # the child's collector then leaves the worker's objects (and pages) alone
    tmp = Path(tempfile.mkdtemp(prefix="accel-job-"))
    # A SIGTERM to the worker's group reaches the child too: the worker outlives it and then
    # ends as the child did (a child that ignores SIGTERM is killed, and so reported).
    term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        signal.signal(signal.SIGTERM, term)
        _child(run_job, proto, spec, tmp)
    try:
        status = _wait(pid, cancelled)
    finally:
        signal.signal(signal.SIGTERM, term)
        shutil.rmtree(tmp, ignore_errors=True)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        sys.stderr.write(f"worker: the job's process died of signal {sig}\n")
        sys.stderr.flush()
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.flush()
        os._exit(code)


def warm_zygote() -> None:
    """Pay once, in a warm worker, the first-use costs a job's child would pay every time
    (lazy imports, kernel dispatch tables, allocator pools): build and run a zoo model on
    one thread (no OpenMP team is started, so forking stays safe). The studio's own model,
    not a user's: nothing here needs the box."""
    try:
        import torch

        from accel.models import load_model

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            model = load_model("zoo:mlp(in_features=8, hidden=8)", "x:float32[2,8]")
            model.forward(model.example_inputs())
        finally:
            torch.set_num_threads(threads)
    except Exception as exc:  # noqa: BLE001 - a cold start is slower, not wrong
        log.debug("warm-up skipped: %s", exc)


def _wait(pid: int, cancelled: threading.Event) -> int:
    """Wait for the child; forward a cancel once. Returns its wait status."""
    forwarded = False
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = -1
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if cancelled.is_set() and not forwarded:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGUSR1)
                forwarded = True
            if fd >= 0:
                select.select([fd], [], [], 0.1)
            else:
                cancelled.wait(0.05)
    finally:
        if fd >= 0:
            os.close(fd)


def _child(run_job: RunJob, proto: Any, spec: JobSpec, tmp: Path) -> None:
    global _WORKER_PID
    _WORKER_PID = os.getppid()
    code = 0
    try:
        _die_with_parent()
        cancelled = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: cancelled.set())
        try:
            box = job_box(spec, Path.cwd(), tmp)
            _private_env(tmp)
            confine(box)
        except OSError as exc:
            _refuse(proto, spec, f"could not confine the job's process: {exc}")
        else:
            run_job(proto, spec, cancelled)
        proto.flush()
    except BaseException:  # noqa: BLE001 - reported on stderr; the exit code says it
        import traceback

        traceback.print_exc()
        code = 70
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _private_env(tmp: Path) -> None:
    """Temp files, caches and the home folder of the job: its private folder."""
    for key in ("TMPDIR", "TEMP", "TMP", "HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        os.environ[key] = str(tmp)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "torchinductor")
    os.environ["TRITON_CACHE_DIR"] = str(tmp / "triton")
    tempfile.tempdir = str(tmp)


def _refuse(proto: Any, spec: JobSpec, error: str) -> None:
    writer = MessageWriter(proto, spec.job_id)
    writer.send(Done, status="failed", result={}, error=error, error_type="ConfinementError")
