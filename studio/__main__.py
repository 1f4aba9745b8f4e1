"""`python -m studio` == the `studio` command."""

from __future__ import annotations

import atexit
import os
import sys


def main(argv: list[str] | None = None) -> int:
    from studio import cli

    code = cli.main(argv)
    if argv is None and cli.last_command() not in (None, "gui"):
        exit_now(code)  # the `studio` program itself, a command line's command
    return code


def exit_now(code: int) -> None:
    """Exit as Python would, without the interpreter's teardown: the exit handlers run
    (logs flushed, temporary files removed, workers stopped), the output is flushed, then
    the process ends. Unloading torch, ONNX Runtime and OpenVINO took 2-3 s of a loaded
    machine after every command, Ctrl-C included (its promise: stopped within 5 s)."""
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate()[1:]):
        sys.exit(code)  # a thread Python would wait for: let it finish the usual way
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
