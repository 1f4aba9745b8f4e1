"""The studio application: QApplication, theme, services and the main window."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from studio.webengine import webengine_sandbox_env

log = logging.getLogger(__name__)

ORG = "AccelStudio"
APP = "Accel Studio"


def resource_path(*parts: str) -> Path:
    """A file under ``resources/``: next to the package in a checkout, inside the bundle
    (PyInstaller's ``sys._MEIPASS``) in the packaged app."""
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[1]))
    return base.joinpath("resources", *parts)


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


def settle_garbage_collector() -> None:
    """Collect once, then leave what exists (torch, Qt wrappers, modules: never garbage) out
    of later collections: a full collection over them paused the GUI thread ~0.5 s mid-run."""
    import gc

    gc.collect()
    gc.freeze()


def run_gui(db: str | None = None, model: str | None = None, recipe: str | None = None) -> int:
    """Open the studio window and run the event loop; returns the exit code."""
    app = make_qapp()
    window = create_window(db)
    window.show()
    settle_garbage_collector()
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
