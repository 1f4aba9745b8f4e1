"""Scene items of the Graph panel: a node (or closed group box) and an open group's frame.

Items paint with the panel's colours and fonts (``view.colors``, ``view.font_main``…) and
send double-clicks and context menus back to the panel.
"""

from __future__ import annotations

from typing import Any, Protocol

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem

from accel.graph.model import GROUP_PREFIX, Graph, Node
from studio.ui.graph_view.style import LOD_TEXT


class GraphView(Protocol):
    """What the items need from the panel that holds them (the panel is one; the items do not
    import it, so the package has no import cycle)."""

    colors: dict[str, QColor]
    font_main: QFont
    font_small: QFont
    fm_main: QFontMetricsF
    fm_small: QFontMetricsF
    graph: Graph | None

    def expand_group(self, path: str) -> None: ...
    def collapse_group(self, path: str) -> None: ...
    def select_key(self, key: str, center: bool = ...) -> Any: ...
    def show_context_menu(self, node: Node, pos: Any, expanded: bool = ...) -> None: ...


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
