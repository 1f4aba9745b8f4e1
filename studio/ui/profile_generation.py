"""The Profile panel's charts of a decoder profiled generating (``ModelProfile.generation``):
per group, a prefill bar (share of the TTFT) beside a decode bar (share of the TPOT), each
labelled with its milliseconds; and the KV cache's bytes against the cached length, measured
beside its closed form. What the numbers mean is in ``studio.generation_layers``."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QPalette

from studio.fmt import fmt_bytes, fmt_ms

PREFILL_COLOR = "#4c6ef5"
DECODE_COLOR = "#e8590c"
CLOSED_FORM_COLOR = "#3b5bdb"
BAR = 0.4  # width of one bar; a group's two bars sit either side of its tick
# The chart's short names ("rest": the headline's time outside every layer).
GROUP_LABELS = {"(unattributed)": "rest", "embedding": "embed"}


# Bars under this share of TTFT / TPOT (%) carry no label: the table beside gives their ms.
MIN_LABELLED_SHARE = 3.0


def _short_ms(v: float) -> str:
    """A bar's milliseconds in three significant digits (the title gives the units)."""
    return f"{v:.3g}" if v < 1000 else f"{v:.0f}"


def _plot() -> pg.PlotWidget:
    plot = pg.PlotWidget()
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    plot.setMinimumHeight(120)
    return plot


def _kv_unit(top: float) -> tuple[float, str]:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if top >= scale:
            return float(scale), unit
    return 1.0, "B"


class GenerationCharts:
    """Two plots the panel shows as tabs: ``groups_plot`` (bars per group) and ``kv_plot``
    (the growth line); ``pages`` gives them with their tab titles."""

    def __init__(self) -> None:
        self.groups_plot = _plot()
        self.groups_plot.setLabel("left", "% of TTFT / TPOT")
        self.groups_plot.showGrid(x=False, y=True, alpha=0.25)
        self.kv_plot = _plot()
        self.kv_plot.setLabel("bottom", "cached positions")
        self.kv_plot.showGrid(x=True, y=True, alpha=0.25)
        for plot in (self.groups_plot, self.kv_plot):
            for axis in ("bottom", "left"):
                plot.getAxis(axis).enableAutoSIPrefix(False)
        self.pages = [(self.groups_plot, "Prefill / decode"), (self.kv_plot, "KV cache")]
        self.bars: list[pg.BarGraphItem] = []
        self.labels: list[pg.TextItem] = []
        self.kv_curves: list[pg.PlotDataItem] = []
        self.fg = self.groups_plot.palette().color(QPalette.ColorRole.Text)

    def apply_theme(self, pal: QPalette) -> None:
        self.fg = fg = pal.color(QPalette.ColorRole.Text)
        for plot in (self.groups_plot, self.kv_plot):
            plot.setBackground(pal.color(QPalette.ColorRole.Base))
            for axis in ("bottom", "left"):
                plot.getAxis(axis).setPen(fg)
                plot.getAxis(axis).setTextPen(fg)
        for label in self.labels:
            label.setColor(fg)

    def show_generation(self, gen) -> None:
        """Draw ``gen`` (an ``accel.profile.generation.GenerationLayers``; None clears)."""
        self.groups_plot.clear()
        self.kv_plot.clear()
        self.bars, self.labels, self.kv_curves = [], [], []
        if gen is None:
            return
        self._draw_groups(gen)
        self._draw_kv(gen)

    def _draw_groups(self, gen) -> None:
        groups = [g for g in gen.groups() if g.prefill_ms > 0 or g.decode_ms > 0]
        ttft, tpot = gen.ttft_ms or 0.0, gen.tpot_ms or 0.0
        fg = self.fg
        font = QFont()
        font.setPointSize(7)
        top = 1.0
        for offset, color, key, whole in (
            (-BAR / 2, PREFILL_COLOR, "prefill_ms", ttft),
            (BAR / 2, DECODE_COLOR, "decode_ms", tpot),
        ):
            if whole <= 0:
                continue
            values = [max(0.0, getattr(g, key)) for g in groups]
            shares = [100.0 * v / whole for v in values]
            xs = [i + offset for i in range(len(groups))]
            bars = pg.BarGraphItem(x=xs, y0=0, width=BAR, height=shares, brush=pg.mkBrush(color))
            self.groups_plot.addItem(bars)
            self.bars.append(bars)
            for x, share, v in zip(xs, shares, values, strict=True):
                if share < MIN_LABELLED_SHARE:  # a sliver's label only crowds its neighbours
                    continue
                label = pg.TextItem(_short_ms(v), color=fg, anchor=(0.5, 1.0))
                label.setFont(font)
                label.setPos(x, share)
                self.groups_plot.addItem(label)
                self.labels.append(label)
            top = max(top, *shares) if shares else top
        ticks = [(i, GROUP_LABELS.get(g.group, g.group)) for i, g in enumerate(groups)]
        self.groups_plot.getAxis("bottom").setTicks([ticks])
        self.groups_plot.setXRange(-0.6, max(1, len(groups)) - 0.4, padding=0)
        self.groups_plot.setYRange(0, top * 1.18, padding=0)  # room for the labels
        tpot_text = f"TPOT {fmt_ms(gen.tpot_ms)} ms/token" if gen.tpot_ms else "no decode"
        self.groups_plot.setTitle(  # the bars' labels: ms in the phase, per token in decode
            f"<span style='color:{PREFILL_COLOR}'>&#9632; prefill</span> (TTFT "
            f"{fmt_ms(gen.ttft_ms)} ms) &nbsp; <span style='color:{DECODE_COLOR}'>&#9632; "
            f"decode</span> ({tpot_text})",
            size="8pt",
        )

    def _draw_kv(self, gen) -> None:
        xs, sizes = list(gen.kv_lengths), list(gen.kv_bytes)
        per = gen.kv_bytes_per_token
        closed = [n * per for n in xs] if per is not None else []
        scale, unit = _kv_unit(max([*sizes, *closed, 1]))
        self.kv_plot.setLabel("left", f"KV cache ({unit})")
        symbol = "o" if len(xs) <= 40 else None
        # Wide under the dashed closed form: where they agree, both stay visible.
        measured = self.kv_plot.plot(
            xs, [b / scale for b in sizes], pen=pg.mkPen(DECODE_COLOR, width=5),
            symbol=symbol, symbolSize=5, symbolBrush=DECODE_COLOR, symbolPen=None,
        )  # fmt: skip
        self.kv_curves.append(measured)
        if closed:
            dash = pg.mkPen(CLOSED_FORM_COLOR, width=2, style=Qt.PenStyle.DashLine)
            self.kv_curves.append(self.kv_plot.plot(xs, [b / scale for b in closed], pen=dash))
        per_text = f"{fmt_bytes(per)}/position" if per is not None else "size unknown"
        self.kv_plot.setTitle(
            f"<span style='color:{DECODE_COLOR}'>&#9632; measured</span> &nbsp; "
            f"<span style='color:{CLOSED_FORM_COLOR}'>- - closed form</span>: {per_text} "
            f"({gen.kv_cache}" + (f", batch {gen.batch})" if gen.batch > 1 else ")"),
            size="8pt",
        )
        if xs:
            self.kv_plot.setXRange(min(xs), max(xs), padding=0.03)
            self.kv_plot.setYRange(0, max([*sizes, *closed, 1]) / scale * 1.08, padding=0)
