"""Where the main window opens: never larger than the screen's available area (a laptop's
1366x768 or 1024x700 as well as a 1920x1080 monitor), a remembered geometry clamped to the
screen it opens on. Plain rectangle arithmetic; MainWindow applies it."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget

PREFERRED = QSize(1400, 900)  # the first window on a screen with room for it


def first_size(available: QRect) -> QSize:
    """The first window's size: the preferred size, or all of a screen too small for it
    (the decorations are taken off once the window is shown, see ``clamped``)."""
    return QSize(
        min(PREFERRED.width(), available.width()), min(PREFERRED.height(), available.height())
    )


def clamped(frame: QRect, available: QRect, decoration: QSize | None = None) -> QRect:
    """``frame`` (the window with its decorations) moved and shrunk to lie inside
    ``available``; returns the client geometry to set (``decoration``: frame minus client)."""
    extra = decoration or QSize(0, 0)
    width = min(frame.width(), available.width())
    height = min(frame.height(), available.height())
    x = min(max(frame.x(), available.x()), available.right() + 1 - width)
    y = min(max(frame.y(), available.y()), available.bottom() + 1 - height)
    return QRect(x, y, width - extra.width(), height - extra.height())


def scrolled(panel: QWidget) -> QScrollArea:
    """``panel`` in a frameless scroll area that resizes it: it fills its dock, and scrolls
    when the dock is smaller than the panel's minimum size."""
    area = QScrollArea()
    area.setObjectName(f"scroll_{panel.objectName() or type(panel).__name__}")
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(panel)
    return area
