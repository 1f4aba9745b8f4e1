"""Qt WebEngine start-up settings that must be made before the first web view exists
(used by the app at start and by the Netron view)."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def webengine_sandbox_env(environ=None, euid: int | None = None) -> str | None:
    """Let Qt WebEngine start when the studio runs as root (containers, lab machines).

    Chromium refuses to run as root with its sandbox on and aborts the whole process
    ("Running as root without --no-sandbox is not supported"). Adds ``--no-sandbox`` to
    ``QTWEBENGINE_CHROMIUM_FLAGS`` in ``environ`` (default ``os.environ``) and returns the
    warning it logged; None when nothing had to change. Must run before Qt WebEngine
    starts (the first web view or profile).
    """
    environ = os.environ if environ is None else environ
    if euid is None:
        euid = os.geteuid() if hasattr(os, "geteuid") else -1
    if euid != 0:
        return None
    flags = environ.get("QTWEBENGINE_CHROMIUM_FLAGS", "")
    if "--no-sandbox" in flags.split() or environ.get("QTWEBENGINE_DISABLE_SANDBOX") == "1":
        return None
    environ["QTWEBENGINE_CHROMIUM_FLAGS"] = f"{flags} --no-sandbox".strip()
    msg = (
        "running as root: the Netron web view runs without Chromium's sandbox "
        "(--no-sandbox added to QTWEBENGINE_CHROMIUM_FLAGS); run the studio as a normal "
        "user to keep the sandbox"
    )
    log.warning(msg)
    return msg
