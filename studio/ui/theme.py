"""Light and dark themes (Fusion style), following the system unless the user picks one.

``apply("system" | "light" | "dark")``; the choice is stored under the ``theme`` key of
the app's QSettings. Widgets that paint themselves read the palette and listen to
``PaletteChange`` events.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

THEMES = ("system", "light", "dark")
_current = {"key": "system", "connected": False}


def saved(settings: QSettings | None = None) -> str:
    value = (settings or QSettings()).value("theme", "system", type=str)
    return value if value in THEMES else "system"


def dark_palette() -> QPalette:
    p = QPalette()
    roles = QPalette.ColorRole
    window, base, text = QColor("#25282d"), QColor("#1d1f23"), QColor("#e6e8eb")
    p.setColor(roles.Window, window)
    p.setColor(roles.WindowText, text)
    p.setColor(roles.Base, base)
    p.setColor(roles.AlternateBase, QColor("#2a2d33"))
    p.setColor(roles.ToolTipBase, QColor("#33373d"))
    p.setColor(roles.ToolTipText, text)
    p.setColor(roles.Text, text)
    p.setColor(roles.Button, QColor("#2f3339"))
    p.setColor(roles.ButtonText, text)
    p.setColor(roles.BrightText, QColor("#ff6b6b"))
    p.setColor(roles.Link, QColor("#74c0fc"))
    p.setColor(roles.Highlight, QColor("#3b6fd6"))
    p.setColor(roles.HighlightedText, QColor("#ffffff"))
    p.setColor(roles.PlaceholderText, QColor("#8b9098"))
    p.setColor(roles.Mid, QColor("#3a3e45"))
    p.setColor(roles.Dark, QColor("#15171a"))
    for role in (roles.Text, roles.WindowText, roles.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6c7179"))
    return p


def system_is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    try:
        return hints.colorScheme() == Qt.ColorScheme.Dark
    except AttributeError:  # Qt < 6.5
        return False


def apply(key: str = "system") -> str:
    """Apply a theme to the running QApplication; returns the effective "light"/"dark"."""
    app = QApplication.instance()
    if app is None:
        return "light"
    key = key if key in THEMES else "system"
    _current["key"] = key
    if app.style().name().lower() != "fusion":
        app.setStyle("Fusion")
    hints = QGuiApplication.styleHints()
    if not _current["connected"] and hasattr(hints, "colorSchemeChanged"):
        hints.colorSchemeChanged.connect(lambda _s: _current["key"] == "system" and apply("system"))
        _current["connected"] = True
    dark = key == "dark" or (key == "system" and system_is_dark())
    app.setPalette(dark_palette() if dark else app.style().standardPalette())
    return "dark" if dark else "light"


def current() -> str:
    return _current["key"]
