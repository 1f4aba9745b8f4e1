"""What the studio's own processes log where: users see the studio's messages; other
libraries' warnings (deprecations, optional kernels that did not load) go to the log file
and to the terminal only with ``-v``.

``setup_logging(verbose)`` is called once by the ``studio`` command (the window included).
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
from pathlib import Path

OWN_LOGGERS = ("accel", "studio", "__main__")
LOG_FILE = "studio.log"
LOG_BYTES = 1 << 20  # rotated at 1 MiB, three old files kept


def is_own(name: str) -> bool:
    return any(name == own or name.startswith(own + ".") for own in OWN_LOGGERS)


class OwnMessages(logging.Filter):
    """Passes the studio's own records; other libraries' only when ``verbose``."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        return self.verbose or is_own(record.name)


class FileLevels(logging.Filter):
    """The log file: the studio's INFO and above, other libraries' warnings and above."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or is_own(record.name)


def log_folder() -> Path:
    from studio.paths import data_dir

    return data_dir() / "logs"


def _file_handler() -> logging.Handler | None:
    with contextlib.suppress(OSError):
        folder = log_folder()
        folder.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            folder / LOG_FILE, maxBytes=LOG_BYTES, backupCount=3, encoding="utf-8", delay=True
        )
        handler.setLevel(logging.INFO)
        handler.addFilter(FileLevels())
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
        )
        return handler
    return None  # a read-only data folder: no log file, the terminal still works


def setup_logging(verbose: bool = False) -> None:
    """Terminal: the studio's warnings and errors (everything with ``verbose``); the log
    file: everything at INFO and above, other libraries' warnings included."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    terminal = logging.StreamHandler()
    terminal.setLevel(logging.DEBUG if verbose else logging.WARNING)
    terminal.addFilter(OwnMessages(verbose))
    terminal.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(terminal)
    handler = _file_handler()
    if handler is not None:
        root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # Python warnings (a library's DeprecationWarning, FutureWarning ...) become log records
    # of the "py.warnings" logger: in the file, and on the terminal with -v. Turned off
    # first: captureWarnings(True) does nothing when an earlier call's hook is remembered,
    # even if something (a warnings.catch_warnings block) has since put the default back.
    logging.captureWarnings(False)
    logging.captureWarnings(True)
