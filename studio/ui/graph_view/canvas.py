"""The Graph panel's canvas (zoom around the cursor, drag to pan, F fits) and overview."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QGraphicsScene, QGraphicsView, QWidget

from studio.ui.graph_view.style import READABLE_SCALE


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

    def fit(self, readable: bool = False) -> None:
        """Fit the whole graph in the view (Fit, F). ``readable`` (the first view of a
        model): a graph too tall to read when fitted is shown from its top at a readable
        zoom instead (the overview shows the rest)."""
        rect = self.scene().itemsBoundingRect()
        if rect.isEmpty():
            return
        self.fitInView(rect.adjusted(-20, -20, 20, 20), Qt.AspectRatioMode.KeepAspectRatio)
        # 5% to spare: at a small zoom a scroll step is many scene units, and an exact fit
        # left the last nodes of a tall graph a few pixels under the edge.
        scale = self.transform().m11() * 0.95
        self.resetTransform()
        self.scale(scale, scale)
        self.centerOn(rect.center())
        if scale > 1.5:
            self.resetTransform()
            self.scale(1.5, 1.5)
        elif readable and scale < READABLE_SCALE:
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
        self.setFixedSize(96, 120)
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
