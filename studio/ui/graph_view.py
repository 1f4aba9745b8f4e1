"""Graph panel: a native QGraphicsView of ``state.graph`` with collapsible module groups.

Layouts come from ``accel.graph.layout.GroupLayouts`` and are computed on a
background thread (one at a time; only the newest request is drawn), so opening a
big graph or expanding a group never freezes the window. Expanding a group lays
out only that group (the per-group layouts are cached).

Interaction: wheel zooms around the cursor, drag pans, F fits, double-click a
group box to expand it and the title of an open group to collapse it. Overlays
colour nodes by latency (profile), parameters, dtype or per-layer parity error.
"""

from __future__ import annotations

import concurrent.futures
import html
import logging
import math
from collections import Counter

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QBrush,
    QColor,
    QFont,
    QFontMetricsF,
    QGuiApplication,
    QKeySequence,
    QPainter,
    QPainterPath,
    QPalette,
    QPen,
)
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsScene,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QSplitter,
    QStyleOptionGraphicsItem,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from accel.graph.model import GROUP_PREFIX, ROOT, Graph, Node, ancestors, paint

log = logging.getLogger(__name__)

OVERLAYS = [
    ("none", "No overlay"),
    ("latency", "Latency (profile)"),
    ("params", "Parameters"),
    ("dtype", "Dtype"),
    ("parity", "Parity error (per layer)"),
]
# Default view: open groups breadth-first while the view stays this small.
DEFAULT_VISIBLE_UNITS = 90
LOD_TEXT = 0.35  # below this zoom, node labels are not drawn
READABLE_SCALE = 0.7  # "fit" never zooms out further than this (labels stay legible)

_CATEGORY_OPS = {
    "conv": ("conv", "convolution"),
    "linear": ("linear", "matmul", "mm", "addmm", "bmm", "gemm", "einsum", "baddbmm"),
    "norm": ("norm", "batch_norm", "layer_norm", "group_norm"),
    "act": ("relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "hardtanh", "elu", "clip"),
    "pool": ("pool", "avg", "max_pool", "adaptive", "mean", "reduce"),
    "elem": ("add", "mul", "sub", "div", "cat", "concat", "view", "reshape", "flatten"),
}
_CATEGORY_COLORS = {
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
TORCH_QUANT_PASSES = (
    "quantize_static_int8",
    "quantize_dynamic_int8",
    "quantize_weight_only",
    "qat",
)
ONNX_QUANT_PASSES = ("quantize_onnx_static", "quantize_onnx_dynamic")
DIFF_COLORS = {"removed": "#ff8787", "fused": "#ffa94d", "changed": "#74c0fc"}
_DTYPE_COLORS = [
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
]


def op_category(node: Node) -> str:
    if node.op in ("input", "output"):
        return "io"
    if node.op == "group":
        return "group"
    op = node.op.lower()
    for cat, keys in _CATEGORY_OPS.items():
        if any(k in op for k in keys):
            return cat
    return "other"


def heat_color(t: float) -> QColor:
    """0 -> pale yellow, 1 -> deep red (a sequential scale readable in both themes)."""
    t = min(max(t, 0.0), 1.0)
    stops = [(0.0, (255, 245, 200)), (0.5, (253, 141, 60)), (1.0, (189, 0, 38))]
    for (t0, c0), (t1, c1) in zip(stops, stops[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return QColor(*(int(a + (b - a) * f) for a, b in zip(c0, c1)))
    return QColor(*stops[-1][1])


def fmt_count(n: float | int | None) -> str:
    if n is None:
        return "–"
    n = float(n)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def is_dark(widget: QWidget) -> bool:
    return widget.palette().color(QPalette.ColorRole.Window).lightness() < 128


# ---- items ---------------------------------------------------------------------------------


class NodeItem(QGraphicsItem):
    """A node or collapsed group box. Painting stays minimal: one rounded rect, 1-2 labels."""

    def __init__(self, view: GraphView, node: Node, rect: QRectF) -> None:
        super().__init__()
        self.view = view
        self.node = node
        self.rect = QRectF(0, 0, rect.width(), rect.height())
        self.setPos(rect.topLeft())
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable)
        self.setAcceptHoverEvents(False)
        self.fill: QColor = QColor("#eee")
        self.highlight = False
        self.setToolTip(self._tooltip())

    def _tooltip(self) -> str:
        n = self.node
        if n.op == "group":
            typ = n.attributes.get("type", "")
            return f"{n.module_path} ({typ}) — {n.attributes.get('num_nodes', '?')} ops; double-click to expand"
        shape = n.output_shapes[0] if n.output_shapes else None
        return f"{n.op} {n.name}\n{n.module_path or '(root)'}\nout: {shape}"

    def boundingRect(self) -> QRectF:  # noqa: N802
        return self.rect.adjusted(-2, -2, 2, 2)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        pal = self.view.colors
        selected = self.isSelected()
        pen = QPen(pal["select"] if selected else pal["border"], 2.2 if selected else 1.0)
        if self.highlight and not selected:
            pen = QPen(pal["match"], 2.0)
        if self.node.op == "group":
            pen.setStyle(Qt.PenStyle.SolidLine)
        painter.setPen(pen)
        painter.setBrush(self.fill)
        if lod < LOD_TEXT:
            painter.drawRect(self.rect)
            return
        painter.drawRoundedRect(self.rect, 5, 5)
        if self.node.op == "group":
            # A stacked look tells a group box from an op at a glance.
            painter.drawLine(
                QPointF(self.rect.left() + 4, self.rect.bottom() + 2),
                QPointF(self.rect.right() - 4, self.rect.bottom() + 2),
            )
        painter.setPen(pal["text_dark"] if self.fill.lightness() > 140 else pal["text_light"])
        painter.setFont(self.view.font_main)
        n = self.node
        if n.op == "group":
            top = n.name or n.module_path
            sub = str(n.attributes.get("type", ""))
        else:
            top = n.op if n.op in ("input", "output") else n.op
            sub = n.name if n.name and n.name != n.op else ""
            if n.op in ("input", "output"):
                top, sub = f"{n.op}: {n.name}", ""
        r = self.rect.adjusted(4, 1, -4, -1)
        if sub and r.height() >= 26:
            fm = self.view.fm_main
            painter.drawText(
                r.adjusted(0, 0, 0, -r.height() / 2 + 1),
                Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom,
                fm.elidedText(top, Qt.TextElideMode.ElideRight, r.width()),
            )
            painter.setFont(self.view.font_small)
            fm2 = self.view.fm_small
            painter.drawText(
                r.adjusted(0, r.height() / 2, 0, 0),
                Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop,
                fm2.elidedText(sub, Qt.TextElideMode.ElideMiddle, r.width()),
            )
        else:
            painter.drawText(
                r,
                Qt.AlignmentFlag.AlignCenter,
                self.view.fm_main.elidedText(top, Qt.TextElideMode.ElideRight, r.width()),
            )

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802
        if self.node.op == "group":
            self.view.expand_group(self.node.module_path)
        else:
            super().mouseDoubleClickEvent(event)

    def contextMenuEvent(self, event) -> None:  # noqa: N802
        self.view.show_context_menu(self.node, event.screenPos())


class FrameItem(QGraphicsItem):
    """An expanded group: a frame with a title strip (double-click the title to collapse)."""

    HEADER = 22.0

    def __init__(self, view: GraphView, path: str, type_name: str, rect: QRectF) -> None:
        super().__init__()
        self.view = view
        self.path = path
        self.type_name = type_name
        self.rect = QRectF(0, 0, rect.width(), rect.height())
        self.setPos(rect.topLeft())
        self.setZValue(-10 + min(path.count(".") + 1, 9))
        self.setToolTip(f"{path} ({type_name}); double-click the title to collapse")
        self.selected_frame = False

    def boundingRect(self) -> QRectF:  # noqa: N802
        return self.rect.adjusted(-2, -2, 2, 2)

    def shape(self) -> QPainterPath:
        # Only the title strip takes clicks: the inside belongs to the nodes.
        p = QPainterPath()
        p.addRect(QRectF(0, 0, self.rect.width(), self.HEADER))
        return p

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        pal = self.view.colors
        pen = QPen(
            pal["select"] if self.selected_frame else pal["frame"],
            1.6 if self.selected_frame else 1.0,
        )
        pen.setStyle(Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.setBrush(pal["frame_fill"])
        painter.drawRoundedRect(self.rect, 6, 6)
        if lod < LOD_TEXT:
            return
        painter.setPen(pal["frame_text"])
        painter.setFont(self.view.font_small)
        name = self.path.rsplit(".", 1)[-1]
        title = f"▾ {name}  ·  {self.type_name}" if self.type_name else f"▾ {name}"
        painter.drawText(
            QRectF(6, 2, self.rect.width() - 12, self.HEADER - 4),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            self.view.fm_small.elidedText(
                title, Qt.TextElideMode.ElideRight, self.rect.width() - 12
            ),
        )

    def mousePressEvent(self, event) -> None:  # noqa: N802
        self.view.select_key(self.path, center=False)
        event.accept()

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802
        self.view.collapse_group(self.path)
        event.accept()

    def contextMenuEvent(self, event) -> None:  # noqa: N802
        grp = self.view.graph.groups.get(self.path) if self.view.graph else None
        node = Node(GROUP_PREFIX + self.path, "group", self.path.rsplit(".", 1)[-1], self.path)
        if grp:
            node.attributes["type"] = grp.type
        self.view.show_context_menu(node, event.screenPos(), expanded=True)


# ---- the canvas ----------------------------------------------------------------------------


class GraphCanvas(QGraphicsView):
    """Zoom around the cursor, drag to pan, keyboard zoom/fit."""

    zoomChanged = Signal()

    def __init__(self, scene: QGraphicsScene, parent: QWidget | None = None) -> None:
        super().__init__(scene, parent)
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.setOptimizationFlag(QGraphicsView.OptimizationFlag.DontSavePainterState, True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    def zoom(self, factor: float) -> None:
        scale = self.transform().m11()
        factor = min(max(factor, 0.02 / scale), 6.0 / scale)
        self.scale(factor, factor)
        self.zoomChanged.emit()

    def fit(self) -> None:
        """Fit the graph; a graph too tall to read when fitted is shown from its top at a
        readable zoom instead (the overview shows the rest)."""
        rect = self.scene().itemsBoundingRect()
        if rect.isEmpty():
            return
        self.fitInView(rect.adjusted(-20, -20, 20, 20), Qt.AspectRatioMode.KeepAspectRatio)
        scale = self.transform().m11()
        if scale > 1.5:
            self.resetTransform()
            self.scale(1.5, 1.5)
        elif scale < READABLE_SCALE:
            self.resetTransform()
            s = max(READABLE_SCALE, min(1.0, self.viewport().width() / (rect.width() + 40)))
            self.scale(s, s)
            vh = self.viewport().height() / s
            self.centerOn(rect.center().x(), rect.top() - 20 + vh / 2)
        self.zoomChanged.emit()

    def wheelEvent(self, event) -> None:  # noqa: N802
        if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            super().wheelEvent(event)  # shift+wheel scrolls
            return
        delta = event.angleDelta().y()
        if delta:
            self.zoom(1.0015**delta)
        event.accept()

    def keyPressEvent(self, event) -> None:  # noqa: N802
        key = event.key()
        if key == Qt.Key.Key_F and not event.modifiers():
            self.fit()
        elif key in (Qt.Key.Key_Plus, Qt.Key.Key_Equal):
            self.zoom(1.25)
        elif key == Qt.Key.Key_Minus:
            self.zoom(0.8)
        else:
            super().keyPressEvent(event)

    def scrollContentsBy(self, dx: int, dy: int) -> None:  # noqa: N802
        super().scrollContentsBy(dx, dy)
        self.zoomChanged.emit()


class Minimap(QGraphicsView):
    """Overview of the whole scene with the visible area outlined; click to jump there."""

    def __init__(self, canvas: GraphCanvas, parent: QWidget | None = None) -> None:
        super().__init__(canvas.scene(), parent)
        self.canvas = canvas
        self.setInteractive(False)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFixedSize(120, 150)
        self.setFrameShape(QGraphicsView.Shape.Box)
        self.setToolTip("Overview: click to move the view there")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.FullViewportUpdate)

    def refit(self) -> None:
        rect = self.scene().itemsBoundingRect()
        if not rect.isEmpty():
            self.fitInView(rect, Qt.AspectRatioMode.KeepAspectRatio)
        self.viewport().update()

    def drawForeground(self, painter: QPainter, rect: QRectF) -> None:  # noqa: N802
        visible = self.canvas.mapToScene(self.canvas.viewport().rect()).boundingRect()
        pen = QPen(QColor("#e8590c"), 0)
        pen.setCosmetic(True)
        pen.setWidth(2)
        painter.setPen(pen)
        painter.setBrush(QColor(232, 89, 12, 40))
        painter.drawRect(visible)

    def mousePressEvent(self, event) -> None:  # noqa: N802
        self.canvas.centerOn(self.mapToScene(event.position().toPoint()))
        self.viewport().update()

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        if event.buttons():
            self.mousePressEvent(event)


# ---- the panel -----------------------------------------------------------------------------


class GraphView(QWidget):
    """The Graph panel. ``layoutReady`` fires after a layout was drawn (tests wait on it)."""

    layoutReady = Signal()
    _layoutDone = Signal(int, object)  # layout thread -> GUI thread

    def __init__(self, state, services=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("GraphView")
        self.state = state
        self.services = services
        self.graph: Graph | None = None
        self.expanded: set[str] = set()
        self._layouts = None  # GroupLayouts of self.graph
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="graph-layout")
        self._generation = 0
        self._items: dict[str, NodeItem] = {}
        self._frames: dict[str, FrameItem] = {}
        self._view_nodes: dict[str, Node] = {}
        self._values: dict[str, float] = {}
        self._matches: list[str] = []
        self._match_index = -1
        self._pending_select: str | None = None
        self._center_on_select = False
        self._edge_paths: dict[str, list[QPainterPath]] = {}
        self._pending_fit = True
        self._layoutDone.connect(self._on_layout_done)
        self._executor.submit(lambda: None)  # start the thread now, not mid-flow
        self._dtype_colors: dict[str, QColor] = {}

        self.font_main = QFont(self.font())
        self.font_main.setPointSizeF(max(self.font().pointSizeF() - 0.5, 7.5))
        self.font_small = QFont(self.font())
        self.font_small.setPointSizeF(max(self.font().pointSizeF() - 1.5, 7.0))
        self.fm_main = QFontMetricsF(self.font_main)
        self.fm_small = QFontMetricsF(self.font_small)
        self._update_colors()

        # -- toolbar
        self.search = QLineEdit(placeholderText="Search nodes by name, op or module (Enter: next)")
        self.search.setClearButtonEnabled(True)
        self.search.returnPressed.connect(self.find_next)
        self.search.textChanged.connect(self._on_search_text)
        self.match_label = QLabel("")
        self.overlay_box = QComboBox()
        for key, label in OVERLAYS:
            self.overlay_box.addItem(label, key)
        self.overlay_box.setToolTip("Colour nodes by a per-layer value")
        self.overlay_box.currentIndexChanged.connect(
            lambda i: self.state.set_overlay(self.overlay_box.itemData(i))
        )
        self.diff_box = QCheckBox("Diff")
        self.diff_step_box = QComboBox(self)
        self.diff_step_box.setObjectName("diffStep")
        self.diff_step_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self._setup_diff()
        self.legend = QLabel("")
        self.legend.setObjectName("overlayLegend")
        fit = QToolButton(text="Fit")
        fit.setToolTip("Fit the graph in the view (F)")
        fit.clicked.connect(self.fit)
        expand_all = QToolButton(text="Expand")
        expand_all.setToolTip("Open one more level of module groups")
        expand_all.clicked.connect(self.expand_level)
        collapse_all = QToolButton(text="Collapse")
        collapse_all.setToolTip("Show top-level modules only")
        collapse_all.clicked.connect(self.collapse_all)
        bar = QHBoxLayout()
        bar.setContentsMargins(4, 4, 4, 0)
        bar.addWidget(self.search, 3)
        bar.addWidget(self.match_label)
        bar.addWidget(QLabel("Overlay:"))
        bar.addWidget(self.overlay_box)
        bar.addWidget(self.diff_box)
        bar.addWidget(self.diff_step_box)
        bar.addStretch(1)
        bar.addWidget(expand_all)
        bar.addWidget(collapse_all)
        bar.addWidget(fit)

        # -- canvas + minimap + details
        self.scene = QGraphicsScene(self)
        self.scene.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
        self.scene.selectionChanged.connect(self._on_scene_selection)
        self.canvas = GraphCanvas(self.scene)
        self.minimap = Minimap(self.canvas, self.canvas)
        self.canvas.zoomChanged.connect(self._update_minimap)
        self.message = QLabel("No model open. File ▸ Open model… (Ctrl+O)", self.canvas)
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message.setWordWrap(True)
        self.details = QTextBrowser()
        self.details.setOpenLinks(False)
        self.details.setMinimumWidth(220)
        self.details.setHtml("<i>Select a node to see its details.</i>")
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.canvas)
        split.addWidget(self.details)
        split.setStretchFactor(0, 4)
        split.setStretchFactor(1, 1)
        split.setSizes([700, 260])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        self.legend.setContentsMargins(6, 0, 6, 0)
        self.legend.setWordWrap(True)
        self.legend.hide()
        lay.addWidget(self.legend)
        lay.addWidget(split, 1)

        self._edges_item = QGraphicsPathItem()
        self._hl_edges_item = QGraphicsPathItem()
        self._arrow_item = QGraphicsPathItem()

        state.graphChanged.connect(self._on_graph_changed)
        state.modelLoading.connect(lambda s: self._show_message(f"Opening {s}…"))
        state.modelFailed.connect(self._on_model_failed)
        state.profileChanged.connect(self._refresh_overlay)
        state.overlayChanged.connect(self._on_overlay_changed)
        state.selectionChanged.connect(self._on_state_selection)
        state.modelChanged.connect(self._show_details_for_selection)
        f = QAction("Fit", self, shortcut=QKeySequence("F"))
        f.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        f.triggered.connect(self.fit)
        self.canvas.addAction(f)
        if state.graph is not None:
            self._on_graph_changed()
        self._on_overlay_changed(state.overlay)

    # -- colours / theme ----------------------------------------------------------------------
    def _update_colors(self) -> None:
        dark = is_dark(self)
        self.colors = {
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
        }
        self._dark = dark

    def changeEvent(self, event) -> None:  # noqa: N802
        from PySide6.QtCore import QEvent

        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._update_colors()
            self._apply_fills()
        super().changeEvent(event)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        QTimer.singleShot(0, self._place_overlays)

    def _place_overlays(self) -> None:
        vp = self.canvas.viewport().geometry()
        self.minimap.move(
            vp.right() - self.minimap.width() - 6, vp.bottom() - self.minimap.height() - 6
        )
        self.message.setGeometry(vp.adjusted(40, 40, -40, -40))

    def _show_message(self, text: str) -> None:
        self.message.setText(text)
        self.message.setVisible(bool(text))
        self._place_overlays()

    def _on_model_failed(self, msg: str) -> None:
        if self.graph is None:
            self._show_message(msg)

    # -- graph and layout ---------------------------------------------------------------------
    def _on_graph_changed(self) -> None:
        from accel.graph.layout import GroupLayouts

        self.graph = self.state.graph
        self._generation += 1
        self.scene.clear()
        self._items.clear()
        self._frames.clear()
        self._view_nodes.clear()
        self._edges_item = QGraphicsPathItem()
        self._hl_edges_item = QGraphicsPathItem()
        self._arrow_item = QGraphicsPathItem()
        if self.graph is None:
            err = (self.state.model_info or {}).get("graph_error")
            self._show_message(f"No graph for this model.\n{err}" if err else "No model open.")
            self.minimap.hide()
            return
        self._layouts = GroupLayouts(self.graph)
        self.expanded = self.default_expanded(self.graph)
        self._dtype_colors = {}
        self._diff, self._diff_status = None, {}
        if self.diff_box.isChecked():
            self.diff_box.blockSignals(True)
            self.diff_box.setChecked(False)
            self.diff_box.blockSignals(False)
        self._pending_fit = True
        self._show_message("Laying out the graph…")
        self._request_layout()

    @staticmethod
    def wrapper_chain(graph: Graph, path: str) -> list[str]:
        """``path`` plus the groups that only wrap one child group below it
        (``blocks.0`` -> ``blocks.0.layers``): opening one box opens them all."""
        chain = [path]
        g = graph.groups.get(path)
        while g is not None and not g.nodes and len(g.children) == 1:
            chain.append(g.children[0])
            g = graph.groups.get(g.children[0])
        return chain

    @classmethod
    def default_expanded(cls, graph: Graph, budget: int = DEFAULT_VISIBLE_UNITS) -> set[str]:
        """Open groups breadth-first while the view keeps under ``budget`` units; groups
        holding a single op stay closed (opening them adds nothing), wrappers of a single
        group open for free."""
        units = {path: len(g.children) + len(g.nodes) for path, g in graph.groups.items()}
        visible = units.get(ROOT, 0)
        expanded: set[str] = set()
        frontier = list(graph.groups[ROOT].children) if ROOT in graph.groups else []
        while frontier:
            nxt: list[str] = []
            for path in frontier:
                chain = cls.wrapper_chain(graph, path)
                inner = chain[-1]
                n = units.get(inner, 0)
                if n <= 1 and len(chain) == 1:
                    continue
                if visible + n - 1 > budget:
                    return expanded
                visible += n - 1
                expanded.update(chain)
                nxt.extend(graph.groups[inner].children)
            frontier = nxt
        return expanded

    def _request_layout(self) -> None:
        if self._layouts is None:
            return
        self._generation += 1
        gen = self._generation
        layouts = self._layouts
        expanded = set(self.expanded)
        graph = self.graph
        fut = self._executor.submit(lambda: (layouts.layout(expanded), graph.view(expanded)))
        # Deliver on the GUI thread; drop results a newer request superseded.
        fut.add_done_callback(lambda f: self._layoutDone.emit(gen, f))

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        QTimer.singleShot(0, self._place_overlays)

    def _on_layout_done(self, gen: int, fut: concurrent.futures.Future) -> None:
        if gen != self._generation:
            return
        try:
            layout, view = fut.result()
        except Exception as exc:
            log.exception("graph layout failed")
            self._show_message(f"Could not lay out the graph: {exc}")
            return
        self._draw(layout, view)

    def _draw(self, layout, view: Graph) -> None:
        center = self.canvas.mapToScene(self.canvas.viewport().rect().center())
        self.scene.clear()
        self._items.clear()
        self._frames.clear()
        self._view_nodes = {n.id: n for n in view.nodes}
        groups = self.graph.groups if self.graph else {}
        for fid in layout.frames:
            path = fid[len(GROUP_PREFIX) :]
            x, y, w, h = layout.positions[fid]
            grp = groups.get(path)
            item = FrameItem(self, path, grp.type if grp else "", QRectF(x, y, w, h))
            self.scene.addItem(item)
            self._frames[path] = item
        frames = set(layout.frames)
        for uid, (x, y, w, h) in layout.positions.items():
            if uid in frames:
                continue
            node = self._view_nodes.get(uid)
            if node is None:  # a unit the view does not know (should not happen)
                continue
            item = NodeItem(self, node, QRectF(x, y, w, h))
            self.scene.addItem(item)
            self._items[uid] = item
        # All edges in one path item: cheap to build and to paint for thousands of edges.
        path = QPainterPath()
        arrows = QPainterPath()
        self._edge_paths = {}
        for s, d, pts in layout.edges:
            p = _edge_path(pts)
            path.addPath(p)
            _arrow(arrows, pts)
            self._edge_paths.setdefault(s, []).append(p)
            self._edge_paths.setdefault(d, []).append(p)
        pen = QPen(self.colors["edge"], 1.1)
        pen.setCosmetic(True)
        self._edges_item = self.scene.addPath(path, pen)
        self._edges_item.setZValue(-1)
        self._arrow_item = self.scene.addPath(
            arrows, QPen(Qt.PenStyle.NoPen), QBrush(self.colors["edge"])
        )
        self._arrow_item.setZValue(-1)
        hl = QPen(self.colors["edge_hl"], 2.0)
        hl.setCosmetic(True)
        self._hl_edges_item = self.scene.addPath(QPainterPath(), hl)
        self._hl_edges_item.setZValue(-0.5)
        self.scene.setSceneRect(self.scene.itemsBoundingRect().adjusted(-200, -200, 200, 200))
        self._show_message("")
        self.minimap.refit()
        self._refresh_overlay()
        if self._pending_fit:
            self._pending_fit = False
            self.fit()
        else:
            self.canvas.centerOn(center)
        self._update_minimap()
        sel = self._pending_select if self._pending_select is not None else self.state.selected
        self._pending_select = None
        if sel:
            self._highlight_selection(sel, center=self._center_on_select)
        self._center_on_select = False
        self._update_matches()
        self.layoutReady.emit()

    # -- expand / collapse ----------------------------------------------------------------
    def expand_group(self, path: str) -> None:
        if self.graph is None:
            return
        self.expanded.update(p for p in ancestors(path)[1:])
        self.expanded.update(self.wrapper_chain(self.graph, path))
        self._request_layout()

    def collapse_group(self, path: str) -> None:
        self.expanded = {g for g in self.expanded if not (g == path or g.startswith(path + "."))}
        self._request_layout()

    def expand_level(self) -> None:
        """Open every visible group box (one more level)."""
        boxes = [n.module_path for n in self._view_nodes.values() if n.op == "group"]
        if boxes and self.graph is not None:
            for b in boxes:
                self.expanded.update(self.wrapper_chain(self.graph, b))
            self._request_layout()

    def collapse_all(self) -> None:
        self.expanded = set()
        self._request_layout()

    def reveal(self, key: str) -> bool:
        """Open the groups hiding ``key`` (a node id or module path); True when the view
        has to be laid out again."""
        if self.graph is None or not key:
            return False
        if key in self.graph:
            path = self.graph.node(key).module_path
            need = set(ancestors(path)[1:])
            grp = self.graph.groups.get(path)
            if grp is not None and len(grp.nodes) + len(grp.children) <= 1:
                need.discard(path)  # a one-op module: its box is the node, no frame needed
        else:
            need = set(ancestors(key)[1:-1])
        if need <= self.expanded:
            return False
        self.expanded |= need
        self._request_layout()
        return True

    def fit(self) -> None:
        self.canvas.fit()
        self._update_minimap()

    def _update_minimap(self) -> None:
        """The overview shows only when the graph does not fit in the view."""
        visible = self.canvas.mapToScene(self.canvas.viewport().rect()).boundingRect()
        whole = self.scene.itemsBoundingRect()
        need = bool(self._items) and not visible.contains(whole)
        self.minimap.setVisible(need)
        if need:
            self.minimap.viewport().update()

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
        key = key or self.state.overlay
        graph = self.graph
        if graph is None or not self._view_nodes:
            return {}
        view = Graph(nodes=list(self._view_nodes.values()))
        if key == "latency":
            prof = self.state.profile
            if prof is None:
                return {}
            # The root row is the whole forward: its unexplained remainder would land on
            # the few ops outside any submodule and make them look hottest.
            values = {r.name: r.inclusive_ms for r in prof.rows if r.name != ROOT}
            if getattr(prof, "kind", "torch") == "onnx":
                # ONNX rows are per node name: paint nodes directly, groups by sum.
                by_name = {r.name: r.self_ms for r in prof.rows}
                out = {}
                for n in view.nodes:
                    if n.name in by_name:
                        out[n.id] = by_name[n.name]
                    elif n.op == "group":
                        out[n.id] = sum(
                            by_name.get(m.name, 0.0) for m in graph.nodes_of_group(n.module_path)
                        )
                return out
            return paint(view, graph, values, "sum")
        if key == "params":
            return {n.id: float(n.num_params) for n in view.nodes if n.num_params}
        if key == "parity":
            if not self.state.layer_parity:
                return {}
            return paint(view, graph, self.state.layer_parity, "max")
        return {}

    def _node_dtype(self, node: Node) -> str:
        if node.op != "group":
            return next((d for d in node.output_dtypes if d), "") or ""
        counts = Counter(
            next((d for d in m.output_dtypes if d), "")
            for m in (self.graph.nodes_of_group(node.module_path) if self.graph else [])
        )
        counts.pop("", None)
        return counts.most_common(1)[0][0] if counts else ""

    def _refresh_overlay(self) -> None:
        key = self.state.overlay
        self._values = self.overlay_values(key) if key in ("latency", "params", "parity") else {}
        legend = ""
        if key == "latency" and self.state.profile is None:
            legend = "profile the model first (Ctrl+P)"
        elif key == "parity" and not self.state.layer_parity:
            legend = "no per-layer parity yet: run a recipe"
        elif self._values:
            hi = max(self._values.values())
            unit = {"latency": " ms", "params": "", "parity": ""}[key]
            hi_s = fmt_count(hi) if key == "params" else f"{hi:.3g}"
            legend = "<span style='background:#fff5c8;color:#000'>&nbsp;0&nbsp;</span>"
            legend += f"<span style='background:#bd0026;color:#fff'>&nbsp;{hi_s}{unit}&nbsp;</span>"
        elif key == "dtype":
            dts = sorted({self._node_dtype(n) for n in self._view_nodes.values()} - {""})
            legend = " ".join(
                f"<span style='background:{self._dtype_color(d).name()};color:#000'>&nbsp;{d}&nbsp;</span>"
                for d in dts
            )
        if self.diff_box.isChecked() and self._diff is not None:
            legend = " ".join(
                f"<span style='background:{c};color:#000'>&nbsp;{k}&nbsp;</span>"
                for k, c in DIFF_COLORS.items()
            )
            legend += f" {html.escape(self._diff_label)}"
        self.legend.setText(legend)
        self.legend.setVisible(bool(legend))
        self._apply_fills()

    def _dtype_color(self, dtype: str) -> QColor:
        c = self._dtype_colors.get(dtype)
        if c is None:
            c = QColor(_DTYPE_COLORS[len(self._dtype_colors) % len(_DTYPE_COLORS)])
            self._dtype_colors[dtype] = c
        return c

    def _apply_fills(self) -> None:
        key = self.state.overlay
        theme = 1 if getattr(self, "_dark", False) else 0
        hi = max(self._values.values()) if self._values else 0.0
        lo_color = QColor("#3a3f46") if theme else QColor("#f1f3f5")
        diff_on = self.diff_box.isChecked() and self._diff is not None
        for uid, item in self._items.items():
            node = item.node
            if diff_on:
                d = self.diff_of(uid)
                item.fill = QColor(DIFF_COLORS[d]) if d else lo_color
            elif key in ("latency", "params", "parity") and node.op not in ("input", "output"):
                v = self._values.get(uid)
                if v is None or hi <= 0 or math.isnan(v):
                    item.fill = lo_color
                else:
                    # sqrt spreads the small values: a few layers dominate most profiles.
                    item.fill = heat_color(math.sqrt(max(v, 0.0) / hi))
            elif key == "dtype" and node.op not in ("input", "output"):
                d = self._node_dtype(node)
                item.fill = self._dtype_color(d).lighter(130) if d else lo_color
            else:
                item.fill = QColor(_CATEGORY_COLORS[op_category(node)][theme])
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

    # -- diff -----------------------------------------------------------------------------
    def _setup_diff(self) -> None:
        self._diff = None  # accel.graph.diff.GraphDiff of the original vs a run's step
        self._diff_status: dict[str, str] = {}  # original node id -> removed|fused|changed
        self._diff_label = ""
        try:
            from accel.graph import diff as _diff  # noqa: F401
        except ImportError:
            self.diff_box.setEnabled(False)
            self.diff_step_box.setEnabled(False)
            self.diff_box.setToolTip(
                "Diff of the original graph and the current step's graph: "
                "not available in this build (accel.graph.diff is missing)"
            )
            return
        self.diff_box.setToolTip(
            "Compare the original graph with the model saved by a step of the current run "
            "(picked next to it): nodes removed (red), fused (orange), changed dtype/op (blue)"
        )
        self.diff_step_box.setToolTip("The step of the current run that Diff compares with")
        self.diff_box.toggled.connect(self._on_diff_toggled)
        self.diff_step_box.activated.connect(self._on_diff_step_picked)
        if self.services is not None:
            self.services.diffReady.connect(self.set_diff)
            self.services.jobFailed.connect(self._on_diff_failed)
            # Bound methods, not lambdas: Qt drops them when this view is deleted.
            self.services.runFinished.connect(self._on_run_finished)
            self.state.currentRunChanged.connect(self._on_current_run_changed)
        self.refresh_diff_steps()

    def refresh_diff_steps(self) -> None:
        """List the current run's steps that saved a model ("2. bf16"); keep the pick if it
        is still there, else pick the last one."""
        steps = self.services.diff_steps() if self.services is not None else []
        box = self.diff_step_box
        picked = box.currentData()
        box.blockSignals(True)
        box.clear()
        for index, label in steps:
            box.addItem(label, index)
        at = box.findData(picked) if picked is not None else -1
        box.setCurrentIndex(at if at >= 0 else box.count() - 1)
        box.blockSignals(False)
        box.setEnabled(bool(steps))
        if not steps:
            box.setToolTip("Run a recipe: its steps that saved a model can be compared here")
        else:
            box.setToolTip("The step of the current run that Diff compares with")

    def diff_step(self) -> int | None:
        """Index of the step picked for the diff (None: the run's last saved model)."""
        return self.diff_step_box.currentData()

    def _on_run_finished(self, _job_id: str, _outcome: object) -> None:
        self.refresh_diff_steps()

    def _on_current_run_changed(self, _run_id: str = "") -> None:
        self.diff_step_box.clear()  # another run: pick its last saved model
        self.refresh_diff_steps()
        self._diff, self._diff_status = None, {}  # the diff was of another run
        if self.diff_box.isChecked():
            self._on_diff_toggled(True)

    def _on_diff_step_picked(self, _i: int) -> None:
        self._diff, self._diff_status = None, {}
        if self.diff_box.isChecked():
            self._on_diff_toggled(True)
        else:
            self.diff_box.setChecked(True)  # picking a step asks for its diff

    def _on_diff_toggled(self, on: bool) -> None:
        if on and self._diff is None and self.services is not None:
            label = self.diff_step_box.currentText() or "the run's last saved model"
            self.legend.setText(f"comparing with {html.escape(label)}…")
            self.legend.show()
            if self.services.diff_run(step_index=self.diff_step()) is None:
                return
        self._refresh_overlay()

    def _on_diff_failed(self, kind: str, message: str) -> None:
        if kind == "diff":
            self.diff_box.blockSignals(True)
            self.diff_box.setChecked(False)
            self.diff_box.blockSignals(False)
            self._refresh_overlay()
            self.legend.setText(f"<span style='color:#e03131'>diff: {html.escape(message)}</span>")
            self.legend.show()

    def set_diff(self, result: dict) -> None:
        """Show ``graph_diff`` job output: colours original nodes by what the step did."""
        from accel.graph.diff import GraphDiff

        diff = GraphDiff.from_dict(result["diff"])
        self._diff = diff
        status: dict[str, str] = {}
        for c in diff.dtype_changed + diff.op_changed:
            status[c.a] = "changed"
        for a in diff.fused:
            status[a] = "fused"
        for a in diff.removed:
            status[a] = "removed"
        self._diff_status = status
        at = self.diff_step_box.findData(result.get("step_index"))
        if at >= 0 and at != self.diff_step_box.currentIndex():
            self.diff_step_box.blockSignals(True)
            self.diff_step_box.setCurrentIndex(at)
            self.diff_step_box.blockSignals(False)
        self._diff_label = (
            f"{result.get('step', '')}: {len(diff.removed)} removed, {len(diff.fused)} fused, "
            f"{len(diff.dtype_changed) + len(diff.op_changed)} changed, +{len(diff.added)} added"
        )
        if not self.diff_box.isChecked():
            self.diff_box.blockSignals(True)
            self.diff_box.setChecked(True)
            self.diff_box.blockSignals(False)
        self._refresh_overlay()

    def diff_of(self, unit: str) -> str | None:
        """removed | fused | changed | None for a visible node or group box."""
        node = self._view_nodes.get(unit)
        if node is None or not self._diff_status:
            return None
        if node.op != "group":
            return self._diff_status.get(node.id)
        found = {self._diff_status.get(n.id) for n in self.graph.nodes_of_group(node.module_path)}
        for key in ("removed", "fused", "changed"):
            if key in found:
                return key
        return None

    # -- selection ------------------------------------------------------------------------
    def unit_for(self, key: str) -> tuple[str | None, str | None]:
        """(visible node id, frame path) that shows ``key`` (a node id or module path)."""
        if not key or self.graph is None:
            return None, None
        if key in self._items:
            return key, None
        if GROUP_PREFIX + key in self._items:
            return GROUP_PREFIX + key, None
        if key in self._frames:
            return None, key
        if key in self.graph:
            node = self.graph.node(key)
            unit = self.graph.unit_of(node, self.expanded | {ROOT})
            return (unit if unit in self._items else None), None
        # A module path: a visible group box containing it?
        for p in reversed(ancestors(key)[1:]):
            if GROUP_PREFIX + p in self._items:
                return GROUP_PREFIX + p, None
        members = [n.id for n in self.graph.nodes_for_module(key) if n.id in self._items]
        return (members[0] if members else None), None

    def select_key(self, key: str, center: bool = True) -> None:
        """Select ``key`` (a node id or module path) here and in the app state."""
        self._highlight_selection(key, center=center)
        self.state.select(key)

    def _on_state_selection(self, key: str) -> None:
        if self.graph is None:
            return
        # Hidden in a collapsed group: open its ancestors and select after the layout.
        if key and self.reveal(key):
            self._pending_select = key
            self._center_on_select = True
            return
        self._highlight_selection(key, center=True)

    def _highlight_selection(self, key: str, center: bool) -> None:
        unit, frame = self.unit_for(key)
        self.scene.blockSignals(True)
        self.scene.clearSelection()
        for f in self._frames.values():
            if f.selected_frame:
                f.selected_frame = False
                f.update()
        hl = QPainterPath()
        if unit is not None:
            item = self._items[unit]
            item.setSelected(True)
            for p in getattr(self, "_edge_paths", {}).get(unit, []):
                hl.addPath(p)
            if center:
                self.canvas.ensureVisible(item, 80, 80)
        elif frame is not None:
            fi = self._frames[frame]
            fi.selected_frame = True
            fi.update()
            if center:
                self.canvas.ensureVisible(fi, 40, 40)
        self.scene.blockSignals(False)
        if self._hl_edges_item is not None:
            self._hl_edges_item.setPath(hl)
        self._show_details(unit, frame, key)
        self.minimap.viewport().update()

    def _on_scene_selection(self) -> None:
        items = [i for i in self.scene.selectedItems() if isinstance(i, NodeItem)]
        if not items:
            return
        node = items[0].node
        key = node.module_path if node.op == "group" else node.id
        self._highlight_selection(key, center=False)
        self.state.select(key)

    def selected_unit(self) -> str | None:
        items = [i for i in self.scene.selectedItems() if isinstance(i, NodeItem)]
        return items[0].node.id if items else None

    def _show_details_for_selection(self) -> None:
        self.details.setHtml("<i>Select a node to see its details.</i>")

    def _show_details(self, unit: str | None, frame: str | None, key: str) -> None:
        if self.graph is None:
            return
        node = self._view_nodes.get(unit) if unit else None
        path = frame or (node.module_path if node else key)
        rows: list[tuple[str, str]] = []
        e = html.escape
        if node is not None and node.op != "group":
            title = f"{e(node.op)} <small>{e(node.name)}</small>"
            rows.append(("Module", e(node.module_path or "(root)")))
            for label, shapes, dtypes in (
                ("Inputs", node.input_shapes, node.input_dtypes),
                ("Outputs", node.output_shapes, node.output_dtypes),
            ):
                parts = [
                    f"{e(str(d or ''))}{e(str(list(s)) if s is not None else '?')}"
                    for s, d in zip(shapes, dtypes or [None] * len(shapes))
                ]
                if parts:
                    rows.append((label, "<br>".join(parts)))
            if node.num_params:
                rows.append(("Parameters", f"{node.num_params:,}"))
            if node.params:
                rows.append(("Weights", "<br>".join(e(p) for p in node.params[:6])))
            for k, v in list(node.attributes.items())[:12]:
                rows.append((e(str(k)), e(str(v))[:160]))
        else:
            grp = self.graph.groups.get(path)
            title = f"{e(path or '(root)')} <small>{e(grp.type if grp else '')}</small>"
            members = self.graph.nodes_for_module(path)
            rows.append(("Ops", str(len(members))))
            rows.append(("Parameters", f"{sum(n.num_params for n in members):,}"))
            ops = Counter(n.op for n in members).most_common(6)
            rows.append(("Op mix", ", ".join(f"{e(o)}×{c}" for o, c in ops)))
            state = (
                "open (double-click its title to close)"
                if path in self.expanded
                else "closed (double-click to open)"
            )
            rows.append(("Group", state))
        prof = self.state.profile
        if prof is not None:
            row = None
            by = prof.by_name()
            for p in reversed(ancestors(path)) if path else [ROOT]:
                if p in by:
                    row = by[p]
                    break
            if node is not None and node.op != "group" and node.name in by and prof.kind == "onnx":
                row = by[node.name]
            if row is not None:
                label = (
                    "Time"
                    if row.name == path or (node and row.name == node.name)
                    else f"Time ({e(row.name)})"
                )
                rows.append(
                    (label, f"{row.inclusive_ms:.3f} ms ({100 * row.inclusive_share:.1f} %)")
                )
                if row.flops is not None:
                    rows.append(("FLOPs", fmt_count(row.flops)))
        d = self.diff_of(unit) if unit else None
        if d and self.diff_box.isChecked():
            rows.append(("Diff", d))
        v = self.overlay_value(unit) if unit else None
        if v is not None and self.state.overlay == "parity":
            rows.append(("Parity error", f"{v:.3g}"))
        body = "".join(f"<tr><td><b>{k}</b></td><td>{v}</td></tr>" for k, v in rows)
        self.details.setHtml(f"<h3>{title}</h3><table cellspacing=4>{body}</table>")

    # -- search ---------------------------------------------------------------------------
    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def _on_search_text(self, text: str) -> None:
        self._match_index = -1
        self._update_matches()

    def _update_matches(self) -> None:
        text = self.search.text().strip().lower()
        for item in self._items.values():
            if item.highlight:
                item.highlight = False
                item.update()
        self._matches = []
        if not text or self.graph is None:
            self.match_label.setText("")
            return
        self._matches = [
            n.id
            for n in self.graph.nodes
            if text in n.name.lower() or text in n.op.lower() or text in n.module_path.lower()
        ]
        shown = set()
        for nid in self._matches:
            unit, _ = self.unit_for(nid)
            if unit and unit not in shown:
                shown.add(unit)
                self._items[unit].highlight = True
                self._items[unit].update()
        if self._matches:
            pos = f"{self._match_index + 1} of " if self._match_index >= 0 else ""
            self.match_label.setText(f"{pos}{len(self._matches)} found")
        else:
            self.match_label.setText("no match")

    def find_next(self) -> None:
        if not self._matches:
            self._update_matches()
        if not self._matches:
            return
        self._match_index = (self._match_index + 1) % len(self._matches)
        nid = self._matches[self._match_index]
        self.match_label.setText(f"{self._match_index + 1} of {len(self._matches)} found")
        self.state.select("")  # re-selecting the same key must move the view again
        self.state.select(nid)

    # -- context menu ---------------------------------------------------------------------
    def show_context_menu(self, node: Node, pos, expanded: bool = False) -> None:
        menu = QMenu(self)
        path = node.module_path
        if node.op == "group" and not expanded:
            menu.addAction("Expand", lambda: self.expand_group(path))
        if expanded:
            menu.addAction("Collapse", lambda: self.collapse_group(path))
        names = [node.name] if node.op != "group" and node.name else None
        if path or names:
            act = menu.addAction(
                "Keep in float (exclude from quantization)",
                lambda: self.keep_in_float(path, names),
            )
            act.setToolTip("Adds this module to the quantization step's exclude list")
        menu.addAction("Copy module path", lambda: QGuiApplication.clipboard().setText(path))
        if node.op != "group":
            menu.addAction(
                "Copy node name", lambda: QGuiApplication.clipboard().setText(node.name or node.id)
            )
        menu.exec(pos)

    def keep_in_float(self, path: str, node_names: list[str] | None = None) -> int:
        """Keep a layer in float: add it to the ``exclude`` list of the recipe's quantization
        step (torch steps take module paths, ONNX steps node names); a static int8 step
        of the model's kind is added when there is none. Returns the step index."""
        onnx_model = (self.state.model_info or {}).get("kind") == "onnx"
        if onnx_model:
            names = list(node_names or [])
            if not names and self.graph is not None:
                names = [n.name for n in self.graph.nodes_for_module(path) if n.name]
        else:
            names = [path] if path else []
        if not names:
            self.state.status.emit("nothing to keep in float: pick a layer, not the whole model")
            return -1
        steps = list(self.state.recipe.steps)
        for i, step in enumerate(steps):
            is_onnx_step = step.pass_name in ONNX_QUANT_PASSES
            if step.pass_name not in TORCH_QUANT_PASSES + ONNX_QUANT_PASSES:
                continue
            if is_onnx_step != onnx_model:
                continue  # module paths mean nothing to an ONNX quantizer and vice versa
            params = dict(step.params)
            exclude = list(params.get("exclude") or [])
            exclude += [n for n in names if n not in exclude]
            params["exclude"] = exclude
            steps[i] = step.model_copy(update={"params": params})
            self.state.update_steps(steps)
            self.state.status.emit(f"{path} kept in float (step {i + 1}: {step.pass_name})")
            return i
        pass_name = "quantize_onnx_static" if onnx_model else "quantize_static_int8"
        i = self.state.add_step(pass_name, {"exclude": names})
        self.state.status.emit(f"added {pass_name} with {path or names} kept in float")
        return i

    def closeEvent(self, event) -> None:  # noqa: N802
        self._executor.shutdown(wait=False, cancel_futures=True)
        super().closeEvent(event)


def _edge_path(pts: list[tuple[float, float]]) -> QPainterPath:
    """A smooth downward curve through the layout's polyline points."""
    p = QPainterPath(QPointF(*pts[0]))
    if len(pts) == 2:
        (x0, y0), (x1, y1) = pts
        dy = (y1 - y0) / 2
        p.cubicTo(QPointF(x0, y0 + dy), QPointF(x1, y1 - dy), QPointF(x1, y1))
        return p
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        dy = (y1 - y0) / 2
        p.cubicTo(QPointF(x0, y0 + dy), QPointF(x1, y1 - dy), QPointF(x1, y1))
    return p


def _arrow(path: QPainterPath, pts: list[tuple[float, float]]) -> None:
    x, y = pts[-1]
    path.moveTo(x, y)
    path.lineTo(x - 3.5, y - 6)
    path.lineTo(x + 3.5, y - 6)
    path.closeSubpath()
