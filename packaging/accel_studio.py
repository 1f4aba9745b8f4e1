"""Entry point of the bundled app (PyInstaller runs this as ``accel-studio``).

- ``accel-studio [ARGS]``: the ``studio`` command (no arguments: the window).
- ``accel-studio --studio-worker [--serve]``: a worker process; the pool starts workers
  from the bundle's own executable this way (``studio.workers.pool.worker_command``), since
  a bundle has no ``python -m``.
- ``accel-studio --smoke DB``: the end-to-end check (``studio.smoke``), offscreen.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--studio-worker"]:
        from studio.workers import entry

        code = entry.start(args[1:])
        sys.stderr.flush()
        os._exit(code)
    if args[:1] == ["--smoke"]:
        from studio import smoke

        code = smoke.main(args[1:])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    from studio.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
