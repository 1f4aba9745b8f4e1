"""The studio application: QApplication, theme, services and the main window."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)

ORG = "AccelStudio"
APP = "Accel Studio"


def resource_path(*parts: str) -> Path:
    """A file under ``resources/``: next to the package in a checkout, inside the bundle
    (PyInstaller's ``sys._MEIPASS``) in the packaged app."""
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[1]))
    return base.joinpath("resources", *parts)


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


def make_qapp(argv: list[str] | None = None):
    """The QApplication (created once). Qt WebEngine must be imported before it exists."""
    from PySide6.QtCore import QCoreApplication, Qt

    webengine_sandbox_env()

    try:
        import PySide6.QtWebEngineWidgets  # noqa: F401  (must precede the QApplication)
    except ImportError:
        log.info("Qt WebEngine not installed: the Netron panel offers 'Open in browser'")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is None:
        QCoreApplication.setAttribute(Qt.ApplicationAttribute.AA_ShareOpenGLContexts)
        app = QApplication(argv if argv is not None else sys.argv[:1])
    app.setOrganizationName(ORG)
    app.setApplicationName(APP)
    app.setApplicationDisplayName(APP)
    # The desktop file's name, so Wayland and X11 docks match the window to its launcher.
    app.setDesktopFileName("io.github.accelstudio.AccelStudio")
    icon = resource_path("icons", "accel-studio.svg")
    if icon.is_file():
        from PySide6.QtGui import QIcon

        app.setWindowIcon(QIcon(str(icon)))
    return app


def create_window(db: str | None = None, *, services=None, settings=None):
    """AppState + Services + MainWindow (not shown). Returns the window."""
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.main_window import MainWindow

    state = AppState()
    services = services or Services(state, db=db)
    window = MainWindow(state, services, settings=settings)
    return window


def run_gui(db: str | None = None, model: str | None = None, recipe: str | None = None) -> int:
    """Open the studio window and run the event loop; returns the exit code."""
    app = make_qapp()
    window = create_window(db)
    window.show()
    if recipe:
        window.load_recipe_file(recipe)
    if not recipe or model:
        window.open_initial_model(model)
    code = app.exec()
    window.services.shutdown()
    # Worker threads are daemons; skip slow interpreter teardown of Qt + torch.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
