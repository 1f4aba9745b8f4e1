"""Graph panel: a native QGraphicsView of ``state.graph`` with collapsible module groups.

Layouts come from ``accel.graph.layout.GroupLayouts`` and are computed on a background
thread (one at a time; only the newest request is drawn), so opening a big graph or
expanding a group never freezes the window. What is open, what the overlays paint, what
search finds and what the details pane says is decided in ``accel.graph`` (expansion,
overlays, search, details); this module wires it to widgets.

Interaction: wheel zooms around the cursor, drag pans, F fits, double-click a group box to
expand it and the title of an open group to collapse it.
"""

from __future__ import annotations

import concurrent.futures
import logging

from PySide6.QtCore import QEvent, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QBrush,
    QColor,
    QFont,
    QFontMetricsF,
    QKeySequence,
    QPainterPath,
    QPen,
    QTextOption,
)
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGraphicsPathItem,
    QGraphicsScene,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSplitter,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from accel.graph import expansion, overlays
from accel.graph.model import GROUP_PREFIX, Graph, Node
from studio.ui.graph_view import style
from studio.ui.graph_view.canvas import GraphCanvas, Minimap
from studio.ui.graph_view.diff import DiffMixin
from studio.ui.graph_view.items import FrameItem, NodeItem
from studio.ui.graph_view.overlay import OverlayMixin
from studio.ui.graph_view.selection import SelectionMixin

log = logging.getLogger(__name__)


class GraphView(DiffMixin, OverlayMixin, SelectionMixin, QWidget):
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
        self._dtype_colors: dict[str, QColor] = {}
        self._layoutDone.connect(self._on_layout_done)
        self._executor.submit(lambda: None)  # start the thread now, not mid-flow
        self.font_main = QFont(self.font())
        self.font_main.setPointSizeF(max(self.font().pointSizeF() - 0.5, 7.5))
        self.font_small = QFont(self.font())
        self.font_small.setPointSizeF(max(self.font().pointSizeF() - 1.5, 7.0))
        self.fm_main = QFontMetricsF(self.font_main)
        self.fm_small = QFontMetricsF(self.font_small)
        self._update_colors()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(self._build_toolbar())
        self.legend = QLabel("")
        self.legend.setObjectName("overlayLegend")
        self.legend.setContentsMargins(6, 0, 6, 0)
        self.legend.setWordWrap(True)
        self.legend.hide()
        lay.addWidget(self.legend)
        lay.addWidget(self._build_body(), 1)
        self._setup_diff()
        self._connect_state(state)
        if state.graph is not None:
            self._on_graph_changed()
        self._on_overlay_changed(state.overlay)

    def _build_toolbar(self) -> QHBoxLayout:
        self.search = QLineEdit(placeholderText="Search nodes by name, op or module (Enter: next)")
        self.search.setClearButtonEnabled(True)
        self.search.setMinimumWidth(100)
        self.search.returnPressed.connect(self.find_next)
        self.search.textChanged.connect(self._on_search_text)
        self.match_label = QLabel("")
        self.overlay_box = QComboBox()
        for key, label in overlays.OVERLAYS:
            self.overlay_box.addItem(label, key)
        self.overlay_box.setToolTip("Colour nodes by a per-layer value")
        self.overlay_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.overlay_box.setMinimumContentsLength(9)
        self.overlay_box.currentIndexChanged.connect(
            lambda i: self.state.set_overlay(self.overlay_box.itemData(i))
        )
        self.diff_box = QCheckBox("Diff")
        self.diff_step_box = QComboBox(self)
        self.diff_step_box.setObjectName("diffStep")
        self.diff_step_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        bar = QHBoxLayout()
        bar.setContentsMargins(4, 4, 4, 0)
        bar.addWidget(self.search, 3)
        bar.addWidget(self.match_label)
        bar.addWidget(QLabel("Overlay:"))
        for w in (self.overlay_box, self.diff_box, self.diff_step_box):
            bar.addWidget(w)
        bar.addStretch(1)
        for text, tip, slot in (
            ("Expand", "Open one more level of module groups", self.expand_level),
            ("Collapse", "Show top-level modules only", self.collapse_all),
            ("Fit", "Fit the graph in the view (F)", self.fit),
        ):
            button = QToolButton(text=text)
            button.setToolTip(tip)
            button.clicked.connect(lambda _checked=False, s=slot: s())
            bar.addWidget(button)
        return bar

    def _build_body(self) -> QSplitter:
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
        self.details.setMinimumWidth(160)
        # Lines break between words only ("Paramete/rs" in a narrow panel); a longer word
        # scrolls sideways.
        self.details.setWordWrapMode(QTextOption.WrapMode.WordWrap)
        self.details.setHtml("<i>Select a node to see its details.</i>")
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.canvas)
        split.addWidget(self.details)
        split.setStretchFactor(0, 4)
        split.setStretchFactor(1, 1)
        split.setSizes([760, 200])
        split.setCollapsible(0, False)
        self._edges_item = QGraphicsPathItem()
        self._hl_edges_item = QGraphicsPathItem()
        self._arrow_item = QGraphicsPathItem()
        f = QAction("Fit", self, shortcut=QKeySequence("F"))
        f.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        f.triggered.connect(self.fit)
        self.canvas.addAction(f)
        return split

    def _connect_state(self, state) -> None:
        state.graphChanged.connect(self._on_graph_changed)
        state.modelLoading.connect(lambda s: self._show_message(f"Opening {s}…"))
        state.modelFailed.connect(self._on_model_failed)
        state.profileChanged.connect(self._refresh_overlay)
        state.overlayChanged.connect(self._on_overlay_changed)
        state.selectionChanged.connect(self._on_state_selection)
        state.modelChanged.connect(self._show_details_for_selection)

    # -- colours / theme / overlays on the canvas ---------------------------------------------
    def _update_colors(self) -> None:
        self._dark = style.is_dark(self)
        self.colors = style.theme_colors(self._dark)

    def changeEvent(self, event) -> None:  # noqa: N802
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._update_colors()
            self._apply_fills()
        super().changeEvent(event)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        QTimer.singleShot(0, self._place_overlays)

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
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
        # With a graph on screen the failure is reported elsewhere (status bar, model
        # panel): the "Opening …" message must not stay drawn over the graph.
        self._show_message("" if self.graph is not None else msg)

    # -- graph and layout ---------------------------------------------------------------------
    def _on_graph_changed(self) -> None:
        from accel.graph.layout import GroupLayouts

        self.graph = self.state.graph
        self._generation += 1
        self.scene.clear()
        self._items.clear()
        self._frames.clear()
        self._view_nodes.clear()
        self._edges_item = self._hl_edges_item = self._arrow_item = None
        if self.graph is None:
            err = (self.state.model_info or {}).get("graph_error")
            self._show_message(f"No graph for this model.\n{err}" if err else "No model open.")
            self.minimap.hide()
            return
        self._layouts = GroupLayouts(self.graph)
        self.expanded = expansion.default_expanded(self.graph)
        self._dtype_colors = {}
        self._diff, self._diff_status = None, {}
        self._set_checked_quietly(False)
        self._pending_fit = True
        self._show_message("Laying out the graph…")
        self._request_layout()

    def _request_layout(self) -> None:
        if self._layouts is None:
            return
        self._generation += 1
        gen, layouts, graph = self._generation, self._layouts, self.graph
        expanded = set(self.expanded)
        fut = self._executor.submit(lambda: (layouts.layout(expanded), graph.view(expanded)))
        # Deliver on the GUI thread; drop results a newer request superseded.
        fut.add_done_callback(lambda f: self._layoutDone.emit(gen, f))

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
            grp = groups.get(path)
            item = FrameItem(self, path, grp.type if grp else "", QRectF(*layout.positions[fid]))
            self.scene.addItem(item)
            self._frames[path] = item
        frames = set(layout.frames)
        for uid, rect in layout.positions.items():
            node = self._view_nodes.get(uid)
            if uid in frames or node is None:
                continue
            item = NodeItem(self, node, QRectF(*rect))
            self.scene.addItem(item)
            self._items[uid] = item
        self._draw_edges(layout.edges)
        self.scene.setSceneRect(self.scene.itemsBoundingRect().adjusted(-200, -200, 200, 200))
        self._show_message("")
        self.minimap.refit()
        self._refresh_overlay()
        if self._pending_fit:
            self._pending_fit = False
            self.fit(readable=True)
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

    def _draw_edges(self, edges) -> None:
        """All edges in one path item: cheap to build and to paint for thousands of edges."""
        path, arrows = QPainterPath(), QPainterPath()
        self._edge_paths = {}
        for s, d, pts in edges:
            p = style.edge_path(pts)
            path.addPath(p)
            style.add_arrow(arrows, pts)
            self._edge_paths.setdefault(s, []).append(p)
            self._edge_paths.setdefault(d, []).append(p)
        pen = QPen(self.colors["edge"], 1.1)
        pen.setCosmetic(True)
        self._edges_item = self.scene.addPath(path, pen)
        self._edges_item.setZValue(-1)
        brush = QBrush(self.colors["edge"])
        self._arrow_item = self.scene.addPath(arrows, QPen(Qt.PenStyle.NoPen), brush)
        self._arrow_item.setZValue(-1)
        hl = QPen(self.colors["edge_hl"], 2.0)
        hl.setCosmetic(True)
        self._hl_edges_item = self.scene.addPath(QPainterPath(), hl)
        self._hl_edges_item.setZValue(-0.5)

    # -- expand / collapse ----------------------------------------------------------------
    def _set_expanded(self, expanded: set[str]) -> None:
        self.expanded = expanded
        self._request_layout()

    def expand_group(self, path: str) -> None:
        if self.graph is not None:
            self._set_expanded(expansion.expand(self.graph, self.expanded, path))

    def collapse_group(self, path: str) -> None:
        self._set_expanded(expansion.collapse(self.expanded, path))

    def expand_level(self) -> None:
        """Open every visible group box (one more level)."""
        boxes = [n.module_path for n in self._view_nodes.values() if n.op == "group"]
        if boxes and self.graph is not None:
            self._set_expanded(expansion.expand_level(self.graph, self.expanded, boxes))

    def collapse_all(self) -> None:
        self._set_expanded(set())

    def reveal(self, key: str) -> bool:
        """Open the groups hiding ``key``; True when the view has to be laid out again."""
        if self.graph is None or not key:
            return False
        need = expansion.needed_to_reveal(self.graph, key)
        if need <= self.expanded:
            return False
        self._set_expanded(self.expanded | need)
        return True

    def fit(self, readable: bool = False) -> None:
        """Fit the whole graph (``readable``: the first view, see GraphCanvas.fit)."""
        self.canvas.fit(readable)
        self._update_minimap()

    def _update_minimap(self) -> None:
        """The overview shows only when the graph does not fit in the view."""
        visible = self.canvas.mapToScene(self.canvas.viewport().rect()).boundingRect()
        need = bool(self._items) and not visible.contains(self.scene.itemsBoundingRect())
        # In a small view the overview would cover the graph itself: scroll bars suffice.
        vp = self.canvas.viewport()
        need = need and vp.width() >= 600 and vp.height() >= 420
        self.minimap.setVisible(need)
        if need:
            self.minimap.viewport().update()

    def closeEvent(self, event) -> None:  # noqa: N802
        self._executor.shutdown(wait=False, cancel_futures=True)
        super().closeEvent(event)
