"""pyqtgraph plots in the application's colours (light and dark themes).

pyqtgraph draws with its own global colours (black background, grey text) unless told
otherwise; these helpers take them from the widget's QPalette instead and restyle the
plots when the palette changes (View ▸ Theme, or the platform switching scheme): call
``style_plot`` from the owner's ``changeEvent`` on ``PALETTE_EVENTS``.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtGui import QPalette

AXES = ("bottom", "left", "top", "right")


def colors(pal: QPalette) -> tuple:
    """(background, text) colours of a palette."""
    return pal.color(QPalette.ColorRole.Base), pal.color(QPalette.ColorRole.Text)


def style_plot(w: pg.PlotWidget, pal: QPalette) -> None:
    bg, fg = colors(pal)
    w.setBackground(bg)
    item = w.getPlotItem()
    for name in AXES:
        ax = item.getAxis(name)
        ax.setPen(fg)
        ax.setTextPen(fg)
        ax.label.setDefaultTextColor(fg)  # the axis title ("latency p50 (ms)")
    item.titleLabel.setAttr("color", fg.name())
    if item.legend is not None:
        style_legend(item.legend, pal)


def style_legend(legend: pg.LegendItem, pal: QPalette) -> None:
    bg, fg = colors(pal)
    legend.setLabelTextColor(fg)
    fill = pg.mkColor(bg)
    fill.setAlpha(200)
    legend.setBrush(fill)
    legend.setPen(pg.mkPen(fg, width=0.5))
    for _, label in legend.items:
        label.setText(label.text, color=fg)


PALETTE_EVENTS = (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange)
