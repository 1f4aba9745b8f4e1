"""The Graph panel's overlays: colour nodes by latency, parameters, dtype or parity error.

A mixin of ``GraphView``; the values come from ``accel.graph.overlays``, the colours from
``style``.
"""

from __future__ import annotations

import html
import math

from PySide6.QtGui import QColor

from accel.graph import overlays
from accel.graph.details import fmt_count
from accel.graph.model import Node
from studio.ui.graph_view import style


class OverlayMixin:
    # -- overlays -------------------------------------------------------------------------
    def _on_overlay_changed(self, key: str) -> None:
        i = self.overlay_box.findData(key)
        if i >= 0 and i != self.overlay_box.currentIndex():
            self.overlay_box.blockSignals(True)
            self.overlay_box.setCurrentIndex(i)
            self.overlay_box.blockSignals(False)
        self._refresh_overlay()

    def overlay_values(self, key: str | None = None) -> dict[str, float]:
        """Per visible unit values of an overlay (node or "group:<path>" id -> value)."""
        st = self.state
        return overlays.overlay_values(
            self.graph, list(self._view_nodes.values()), key or st.overlay, st.profile,
            st.layer_parity,
        )  # fmt: skip

    def _legend_html(self, key: str) -> str:
        if self.diff_on():
            chips = " ".join(style.swatch(c, k) for k, c in style.DIFF_COLORS.items())
            return f"{chips} {html.escape(self._diff_label)}"
        if key == "latency" and self.state.profile is None:
            return "profile the model first (Ctrl+P)"
        if key == "parity" and not self.state.layer_parity:
            return "no per-layer parity yet: run a recipe"
        if self._values:
            hi = max(self._values.values())
            hi_s = fmt_count(hi) if key == "params" else f"{hi:.3g}"
            unit = " ms" if key == "latency" else ""
            if unit and getattr(self.state.profile, "generation", None) is not None:
                unit = " ms/token (decode)"
            return style.swatch("#fff5c8", "0") + style.swatch("#bd0026", hi_s + unit, "#fff")
        if key == "dtype":
            nodes = self._view_nodes.values()
            dts = sorted({overlays.node_dtype(self.graph, n) for n in nodes} - {""})
            return " ".join(style.swatch(self._dtype_color(d).name(), d) for d in dts)
        return ""

    def _refresh_overlay(self) -> None:
        key = self.state.overlay
        self._values = self.overlay_values(key) if key in overlays.VALUE_OVERLAYS else {}
        legend = self._legend_html(key)
        self.legend.setText(legend)
        self.legend.setVisible(bool(legend))
        self._apply_fills()

    def _dtype_color(self, dtype: str) -> QColor:
        c = self._dtype_colors.get(dtype)
        if c is None:
            c = QColor(style.DTYPE_COLORS[len(self._dtype_colors) % len(style.DTYPE_COLORS)])
            self._dtype_colors[dtype] = c
        return c

    def _fill_for(self, uid: str, node: Node, key: str, hi: float) -> QColor:
        empty = self.colors["empty"]
        if self.diff_on():
            d = self.diff_of(uid)
            return QColor(style.DIFF_COLORS[d]) if d else empty
        if node.op in ("input", "output") or key not in (*overlays.VALUE_OVERLAYS, "dtype"):
            return QColor(style.CATEGORY_COLORS[overlays.op_category(node)][int(self._dark)])
        if key == "dtype":
            d = overlays.node_dtype(self.graph, node)
            return self._dtype_color(d).lighter(130) if d else empty
        v = self._values.get(uid)
        if v is None or hi <= 0 or math.isnan(v):
            return empty
        # sqrt spreads the small values: a few layers dominate most profiles.
        return style.heat_color(math.sqrt(max(v, 0.0) / hi))

    def _apply_fills(self) -> None:
        key = self.state.overlay
        hi = max(self._values.values()) if self._values else 0.0
        for uid, item in self._items.items():
            item.fill = self._fill_for(uid, item.node, key, hi)
            item.update()
        if self._edges_item is not None:
            pen = self._edges_item.pen()
            pen.setColor(self.colors["edge"])
            self._edges_item.setPen(pen)

    def node_fill(self, node_id: str) -> QColor | None:
        item = self._items.get(node_id)
        return QColor(item.fill) if item else None

    def overlay_value(self, node_id: str) -> float | None:
        return self._values.get(node_id)
