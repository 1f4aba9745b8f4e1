"""The Profile panel's charts of a decoder profiled generating (``ModelProfile.generation``):
per group, a prefill bar (share of the TTFT) beside a decode bar (share of the TPOT), each
labelled with its milliseconds; and the KV cache's bytes against the cached length, measured
beside its closed form. What the numbers mean is in ``studio.generation_layers``."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette

from studio.fmt import fmt_bytes, fmt_ms

PREFILL_COLOR = "#4c6ef5"
DECODE_COLOR = "#e8590c"
CLOSED_FORM_COLOR = "#868e96"
BAR = 0.36  # height of one bar; a group's two bars sit either side of its tick


def _plot() -> pg.PlotWidget:
    plot = pg.PlotWidget()
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    plot.setMinimumHeight(160)
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
        self.groups_plot.getViewBox().invertY(True)
        self.groups_plot.setLabel("bottom", "share of the headline (%)")
        self.groups_plot.getAxis("left").setWidth(96)
        self.groups_plot.showGrid(x=True, y=False, alpha=0.25)
        self.kv_plot = _plot()
        self.kv_plot.setLabel("bottom", "cached positions (prompt + generated tokens)")
        self.kv_plot.showGrid(x=True, y=True, alpha=0.25)
        for plot in (self.groups_plot, self.kv_plot):
            for axis in ("bottom", "left"):
                plot.getAxis(axis).enableAutoSIPrefix(False)
        self.pages = [(self.groups_plot, "Prefill / decode"), (self.kv_plot, "KV cache")]
        self.bars: list[pg.BarGraphItem] = []
        self.labels: list[pg.TextItem] = []
        self.kv_curves: list[pg.PlotDataItem] = []

    def apply_theme(self, pal: QPalette) -> None:
        fg = pal.color(QPalette.ColorRole.Text)
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
        fg = self.groups_plot.palette().color(QPalette.ColorRole.Text)
        top = 1.0
        for offset, color, key, whole, unit in (
            (-BAR / 2, PREFILL_COLOR, "prefill_ms", ttft, "ms"),
            (BAR / 2, DECODE_COLOR, "decode_ms", tpot, "ms/tok"),
        ):
            if whole <= 0:
                continue
            values = [max(0.0, getattr(g, key)) for g in groups]
            shares = [100.0 * v / whole for v in values]
            ys = [i + offset for i in range(len(groups))]
            bars = pg.BarGraphItem(x0=0, y=ys, height=BAR, width=shares, brush=pg.mkBrush(color))
            self.groups_plot.addItem(bars)
            self.bars.append(bars)
            for y, share, v in zip(ys, shares, values, strict=True):
                label = pg.TextItem(f"{fmt_ms(v)} {unit}", color=fg, anchor=(0, 0.5))
                label.setPos(share, y)
                self.groups_plot.addItem(label)
                self.labels.append(label)
            top = max(top, *shares) if shares else top
        self.groups_plot.getAxis("left").setTicks([[(i, g.group) for i, g in enumerate(groups)]])
        self.groups_plot.setYRange(-0.6, max(1, len(groups)) - 0.4, padding=0)
        self.groups_plot.setXRange(0, top * 1.3, padding=0)  # room for the labels
        tpot_text = f"TPOT {fmt_ms(gen.tpot_ms)} ms/token" if gen.tpot_ms else "no decode step"
        self.groups_plot.setTitle(
            f"<span style='color:{PREFILL_COLOR}'>&#9632; prefill</span> % of TTFT "
            f"{fmt_ms(gen.ttft_ms)} ms ({gen.prompt_tokens} tokens) &nbsp; "
            f"<span style='color:{DECODE_COLOR}'>&#9632; decode</span> % of {tpot_text}",
            size="9pt",
        )

    def _draw_kv(self, gen) -> None:
        xs, sizes = list(gen.kv_lengths), list(gen.kv_bytes)
        per = gen.kv_bytes_per_token
        closed = [n * per for n in xs] if per is not None else []
        scale, unit = _kv_unit(max([*sizes, *closed, 1]))
        self.kv_plot.setLabel("left", f"KV cache ({unit})")
        symbol = "o" if len(xs) <= 40 else None
        measured = self.kv_plot.plot(
            xs, [b / scale for b in sizes], pen=pg.mkPen(DECODE_COLOR, width=2),
            symbol=symbol, symbolSize=5, symbolBrush=DECODE_COLOR, symbolPen=None,
        )  # fmt: skip
        self.kv_curves.append(measured)
        if closed:
            dash = pg.mkPen(CLOSED_FORM_COLOR, width=1.5, style=Qt.PenStyle.DashLine)
            self.kv_curves.append(self.kv_plot.plot(xs, [b / scale for b in closed], pen=dash))
        per_text = f"{fmt_bytes(per)} per position" if per is not None else "size unknown"
        self.kv_plot.setTitle(
            f"<span style='color:{DECODE_COLOR}'>&#9632; measured</span> &nbsp; "
            f"<span style='color:{CLOSED_FORM_COLOR}'>- - closed form</span> "
            f"({gen.kv_cache} cache, {per_text}, batch {gen.batch})",
            size="9pt",
        )
        if xs:
            self.kv_plot.setXRange(min(xs), max(xs), padding=0.03)
            self.kv_plot.setYRange(0, max([*sizes, *closed, 1]) / scale * 1.08, padding=0)
