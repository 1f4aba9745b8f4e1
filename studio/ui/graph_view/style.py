"""Colours and shapes of the Graph panel, for light and dark themes."""

from __future__ import annotations

from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QPainterPath, QPalette
from PySide6.QtWidgets import QWidget

LOD_TEXT = 0.35  # below this zoom, node labels are not drawn
# "Fit" shows the whole graph down to this zoom (labels still legible); a graph that needs
# less is shown from its top at this zoom instead (the overview shows the rest).
READABLE_SCALE = 0.4

CATEGORY_COLORS = {
    # (light, dark)
    "conv": ("#cfe2ff", "#294a78"),
    "linear": ("#e2d4f7", "#4a3670"),
    "norm": ("#d4efdc", "#2d5a3b"),
    "act": ("#ffe5c2", "#6e4d1f"),
    "pool": ("#cdeff0", "#245a5c"),
    "elem": ("#e9ecef", "#3f444a"),
    "io": ("#ffd6d6", "#6e2c2c"),
    "group": ("#f6f7f9", "#2b2f36"),
    "other": ("#eef0f3", "#3a3f46"),
}
DIFF_COLORS = {"removed": "#ff8787", "fused": "#ffa94d", "changed": "#74c0fc"}
DTYPE_COLORS = [
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
]


def is_dark(widget: QWidget) -> bool:
    return widget.palette().color(QPalette.ColorRole.Window).lightness() < 128


def theme_colors(dark: bool) -> dict[str, QColor]:
    return {
        "border": QColor("#8a94a3") if dark else QColor("#6c757d"),
        "select": QColor("#ff922b") if dark else QColor("#e8590c"),
        "match": QColor("#fcc419") if dark else QColor("#f08c00"),
        "edge": QColor("#7d8794") if dark else QColor("#868e96"),
        "edge_hl": QColor("#ff922b") if dark else QColor("#e8590c"),
        "frame": QColor("#6c7888") if dark else QColor("#adb5bd"),
        "frame_fill": QColor(255, 255, 255, 10) if dark else QColor(0, 0, 0, 8),
        "frame_text": QColor("#c1c7d0") if dark else QColor("#495057"),
        "text_dark": QColor("#1b1e22"),
        "text_light": QColor("#f1f3f5"),
        "empty": QColor("#3a3f46") if dark else QColor("#f1f3f5"),
    }


def heat_color(t: float) -> QColor:
    """0 -> pale yellow, 1 -> deep red (a sequential scale readable in both themes)."""
    t = min(max(t, 0.0), 1.0)
    stops = [(0.0, (255, 245, 200)), (0.5, (253, 141, 60)), (1.0, (189, 0, 38))]
    for (t0, c0), (t1, c1) in zip(stops, stops[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return QColor(*(int(a + (b - a) * f) for a, b in zip(c0, c1)))
    return QColor(*stops[-1][1])


def swatch(color: str, text: str, fg: str = "#000") -> str:
    """A legend chip (rich text)."""
    return f"<span style='background:{color};color:{fg}'>&nbsp;{text}&nbsp;</span>"


def edge_path(pts: list[tuple[float, float]]) -> QPainterPath:
    """A smooth downward curve through the layout's polyline points."""
    p = QPainterPath(QPointF(*pts[0]))
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        dy = (y1 - y0) / 2
        p.cubicTo(QPointF(x0, y0 + dy), QPointF(x1, y1 - dy), QPointF(x1, y1))
    return p


def add_arrow(path: QPainterPath, pts: list[tuple[float, float]]) -> None:
    x, y = pts[-1]
    path.moveTo(x, y)
    path.lineTo(x - 3.5, y - 6)
    path.lineTo(x + 3.5, y - 6)
    path.closeSubpath()
