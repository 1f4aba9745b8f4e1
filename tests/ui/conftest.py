"""Qt tests run offscreen, with their own settings file and database."""

from __future__ import annotations

import os
import time

os.environ["QT_QPA_PLATFORM"] = "offscreen"
os.environ.setdefault("QTWEBENGINE_CHROMIUM_FLAGS", "--no-sandbox --disable-gpu")
os.environ.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")

import pytest  # noqa: E402

try:  # Qt WebEngine has to be imported before the QApplication exists
    import PySide6.QtWebEngineWidgets  # noqa: F401, E402
except ImportError:  # pragma: no cover
    pass

from PySide6.QtCore import QCoreApplication, QSettings, Qt  # noqa: E402

QCoreApplication.setAttribute(Qt.ApplicationAttribute.AA_ShareOpenGLContexts)

SCREENSHOTS = os.path.join(os.path.dirname(__file__), "..", "..", "screenshots")


def wait_until(predicate, timeout: float = 120.0, step_ms: int = 20) -> None:
    """Process Qt events until ``predicate()`` is true (works outside qtbot's scope too)."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout:g} s")
        app.processEvents()
        time.sleep(step_ms / 1000)


@pytest.fixture
def settings(tmp_path):
    s = QSettings(str(tmp_path / "studio.ini"), QSettings.Format.IniFormat)
    yield s
    s.sync()


@pytest.fixture(scope="session")
def wait():
    """``wait(predicate, timeout)``: process Qt events until the predicate holds."""
    return wait_until


@pytest.fixture(scope="session")
def screenshots_dir():
    os.makedirs(SCREENSHOTS, exist_ok=True)
    return SCREENSHOTS


@pytest.fixture(scope="session", autouse=True)
def _release_web_views_at_exit(qapp):
    """Web pages must go before their WebEngine profile, or Qt may crash at interpreter exit."""
    yield
    from PySide6.QtWidgets import QApplication

    try:
        from studio.ui.netron_view import NetronView
    except Exception:  # noqa: BLE001 - WebEngine missing: nothing to release
        NetronView = None  # noqa: N806
    for w in QApplication.allWidgets():
        if NetronView is not None and isinstance(w, NetronView):
            w.release()
    QApplication.processEvents()
