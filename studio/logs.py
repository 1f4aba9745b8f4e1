"""What the studio's own processes log where: users see the studio's messages; other
libraries' warnings (deprecations, optional kernels that did not load) go to the log file
and to the terminal only with ``-v``.

``setup_logging(verbose)`` is called once by the ``studio`` command (the window included).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import logging.handlers
import sys
from pathlib import Path
from typing import Any

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
    _torch_logs_to_root()


def _torch_logs_to_root() -> None:
    """torch gives its loggers their own stderr handler when it is imported (its pytree
    deprecations printed as ``W1205 ... torch/utils/_pytree.py:630] ...`` lines): hand its
    records to ours instead, now if torch is loaded, else right after its import."""
    if "torch" in sys.modules:
        _reroute_torch_loggers()
    elif not any(isinstance(f, _AfterTorchImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorchImport())


def _reroute_torch_loggers() -> None:
    with contextlib.suppress(Exception):  # a torch without this logging: nothing to undo
        from torch._logging import _internal as torch_logs

        for name in {"torch", *torch_logs.log_registry.get_log_qnames()}:
            log = logging.getLogger(name)
            for h in [h for h in log.handlers if torch_logs._is_torch_handler(h)]:
                log.removeHandler(h)
            log.propagate = True


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    """Runs ``_reroute_torch_loggers`` once ``import torch`` has finished."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _reroute_torch_loggers()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
