"""Worker process: ``python -m studio.workers.entry``.

Reads one JobSpec line from stdin, runs the job declared for ``spec.kind``
(``accel.job_registry.declaration(kind).run``) and
writes protocol messages to its original stdout. Everything else that would
reach stdout (prints of libraries) is sent to stderr, so the protocol stream
stays clean; the pool keeps stderr's last lines. A ``cancel`` line on stdin, or
stdin closing (the parent died), requests cooperative cancellation.

``python -m studio.workers.entry --serve`` is a warm worker: it imports torch and the
engine before its first job and then runs jobs one after another (see ``serve``).
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import logging
import os
import queue
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from studio.workers.confine import run_confined, warm_zygote, worker_pid
from studio.workers.protocol import (
    Cancel,
    Done,
    EventMessage,
    Hello,
    JobSpec,
    LogMessage,
    MessageWriter,
    ProtocolError,
    decode,
)

# How long a worker whose parent vanished may take to stop cooperatively.
ORPHAN_GRACE_S = 10.0


class _ForwardLogs(logging.Handler):
    def __init__(self, writer: MessageWriter) -> None:
        super().__init__()
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.send(
                LogMessage,
                level=record.levelname.lower(),
                logger=record.name,
                message=record.getMessage(),
            )
        except Exception:  # a broken pipe must not turn logging into a crash
            self.handleError(record)


def load_plugin(name: str) -> None:
    """Import a plugin module by dotted name or by .py file path."""
    if name.endswith(".py") or os.sep in name:
        path = Path(name)
        mod_name = f"_studio_plugin_{path.stem}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load plugin file {name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    else:
        importlib.import_module(name)


def _watch_stdin(stdin: Any, cancelled: threading.Event, job_id: str) -> None:
    for line in stdin:
        if not line.strip():
            continue
        try:
            msg = decode(line)
        except ProtocolError as exc:
            print(f"worker: ignoring bad message: {exc}", file=sys.stderr)
            continue
        if isinstance(msg, Cancel):
            cancelled.set()
    # EOF: the parent closed our stdin or died. Stop cooperatively, then for good.
    cancelled.set()
    time.sleep(ORPHAN_GRACE_S)
    os._exit(3)


# What a warm worker (``--serve``) imports before its first job.
WARM_IMPORTS = ("torch", "accel.models", "accel.graph", "accel.profile", "accel.jobs")


def end_leftovers() -> None:
    """Kill the processes a job left behind in this (warm) worker: its children and theirs."""
    from studio.workers.guard import kill_descendants

    kill_descendants(os.getpid())


def _protocol_stream() -> Any:
    # The protocol gets the real stdout; fd 1 becomes stderr so stray prints and C
    # libraries writing to stdout cannot corrupt it.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable(file=sys.stderr)  # a segfault leaves a Python traceback in the tail
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return proto


def run_job(proto: Any, spec: JobSpec, cancelled: threading.Event) -> None:
    """Run one job: ``hello``, its events and logs, then ``done`` on ``proto``."""
    writer = MessageWriter(proto, spec.job_id)
    writer.send(Hello, pid=worker_pid(), python=sys.version.split()[0])
    root = logging.getLogger()
    forward = _ForwardLogs(writer)
    forward.setLevel(getattr(logging, spec.log_level.upper(), logging.INFO))
    root.addHandler(forward)
    logging.getLogger("accel").setLevel(forward.level)

    status, result, error, error_type, tb = "succeeded", {}, "", "", ""
    try:
        for plugin in spec.plugins:
            load_plugin(plugin)
        import accel.jobs  # noqa: F401 - declares the engine's jobs
        from accel.errors import Cancelled
        from accel.job_registry import declaration

        job = declaration(spec.kind).run
        params = dict(spec.params)

        def emit(event: dict[str, Any]) -> None:
            writer.send(EventMessage, event=event)

        try:
            result = job(params, emit, cancelled.is_set) or {}
        except Cancelled as exc:
            status, error, error_type = "cancelled", str(exc), "Cancelled"
        else:
            if result.get("status") in ("failed", "cancelled"):
                status = result["status"]
                error = str(result.get("error") or "")
    except Exception as exc:
        status, error, error_type = "failed", str(exc), type(exc).__name__
        tb = traceback.format_exc()
        print(tb, file=sys.stderr)
    root.removeHandler(forward)
    writer.send(
        Done, status=status, result=result, error=error, error_type=error_type, traceback=tb
    )
    proto.flush()


def main() -> int:
    """One job: read its spec, run it, exit."""
    proto = _protocol_stream()
    stdin = sys.stdin
    first = stdin.readline()
    if not first:
        return 2
    spec = decode(first)
    if not isinstance(spec, JobSpec):
        print(f"worker: expected a job, got {spec.type}", file=sys.stderr)
        return 2
    cancelled = threading.Event()
    threading.Thread(target=_watch_stdin, args=(stdin, cancelled, spec.job_id), daemon=True).start()
    run_confined(run_job, proto, spec, cancelled)
    return 0


def serve() -> int:
    """A warm worker: import torch and the engine first, then run jobs one after another
    as their specs arrive on stdin, until stdin closes. ``cancel`` lines cancel the job they
    name (also one still waiting). The pool decides which jobs a warm worker may take."""
    proto = _protocol_stream()
    for name in WARM_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the job that needs it reports the error properly
            print(f"worker: warm import of {name} failed: {exc}", file=sys.stderr)
    warm_zygote()  # each job runs in a child forked from here (studio.workers.confine)
    jobs: queue.Queue[tuple[JobSpec, threading.Event] | None] = queue.Queue()
    events: dict[str, threading.Event] = {}
    busy = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                msg = decode(line)
            except ProtocolError as exc:
                print(f"worker: ignoring bad message: {exc}", file=sys.stderr)
                continue
            if isinstance(msg, JobSpec):
                events[msg.job_id] = threading.Event()
                jobs.put((msg, events[msg.job_id]))
            elif isinstance(msg, Cancel) and msg.job_id in events:
                events[msg.job_id].set()
        # EOF: the pool retired this worker or died. Idle: exit now; busy: stop the job
        # cooperatively, then for good.
        for ev in list(events.values()):
            ev.set()
        jobs.put(None)
        if busy.is_set():
            time.sleep(ORPHAN_GRACE_S)
            os._exit(3)

    threading.Thread(target=read, name="worker-stdin", daemon=True).start()
    while True:
        item = jobs.get()
        if item is None:
            return 0
        spec, cancelled = item
        busy.set()
        try:
            run_confined(run_job, proto, spec, cancelled)
        finally:
            end_leftovers()  # what the job started ends with it, not with the warm worker
            busy.clear()
            events.pop(spec.job_id, None)


def start(argv: list[str]) -> int:
    """A worker's whole life: hand its lifetime to a guard (``studio.workers.guard``: the
    group is killed when the worker ends or the studio dies), switch third-party telemetry
    off, then serve jobs (``--serve``) or run one."""
    from studio.workers.guard import split_off_guard

    split_off_guard()
    from accel.privacy import disable_telemetry

    disable_telemetry()
    return serve() if "--serve" in argv else main()


if __name__ == "__main__":
    code = start(sys.argv[1:])
    sys.stderr.flush()
    # Skip interpreter teardown: atexit hooks of native libraries can hang or crash
    # after the result was already sent.
    os._exit(code)
