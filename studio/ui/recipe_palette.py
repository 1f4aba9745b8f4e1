"""The Recipe panel's pass palette: the passes by category; double-click or Add asks for a
step. A pass that accel.plan cannot place in the recipe is greyed out, and a click on it
says why (in the hint below the tree and on the status bar)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import (
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from accel.plan import palette

CATEGORY_TITLES = {
    "precision": "Precision",
    "layout": "Layout",
    "compile": "Compile",
    "quantize": "Quantize",
    "prune": "Prune",
    "export": "Export",
    "runtime": "Runtime",
}


class PassPalette(QWidget):
    """``tree`` holds one item per pass (``items`` by name), ``hint`` the selected pass's
    summary and why it is unavailable; ``addRequested(item)`` asks for a step."""

    addRequested = Signal(object)  # the QTreeWidgetItem of the pass

    def __init__(self, state, passes: dict[str, Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._passes = passes
        self.tree = QTreeWidget()
        self.tree.setHeaderHidden(True)
        self.tree.setObjectName("passPalette")
        self.tree.itemDoubleClicked.connect(lambda item, _c: self.addRequested.emit(item))
        self.tree.viewport().installEventFilter(self)
        self.items: dict[str, QTreeWidgetItem] = {}
        self._fill()
        add_btn = QPushButton("Add step")
        add_btn.clicked.connect(lambda: self.addRequested.emit(self.tree.currentItem()))
        self.hint = QLabel()
        self.hint.setWordWrap(True)
        self.hint.setStyleSheet("color: palette(mid);")
        self.tree.currentItemChanged.connect(self._selected)
        pv = QVBoxLayout(self)
        pv.setContentsMargins(0, 0, 0, 0)
        pv.addWidget(QLabel("<b>Passes</b>"))
        pv.addWidget(self.tree, 1)
        pv.addWidget(self.hint)
        pv.addWidget(add_btn)

    def _fill(self) -> None:
        groups: dict[str, QTreeWidgetItem] = {}
        for p in self._passes.values():
            cat = p.category
            if cat not in groups:
                g = QTreeWidgetItem([CATEGORY_TITLES.get(cat, cat.title())])
                g.setFlags(Qt.ItemFlag.ItemIsEnabled)
                f = g.font(0)
                f.setBold(True)
                g.setFont(0, f)
                self.tree.addTopLevelItem(g)
                groups[cat] = g
            item = QTreeWidgetItem([p.name])
            item.setData(0, Qt.ItemDataRole.UserRole, p.name)
            item.setToolTip(0, p.summary)
            groups[cat].addChild(item)
            self.items[p.name] = item
        self.tree.expandAll()

    def update_places(self, start_form: str | None) -> None:
        """Enable the passes accel.plan can place in the recipe; a disabled one shows why."""
        recipe = self.state.recipe
        for place in palette(recipe.steps, start_form, recipe.device):
            item = self.items.get(place.pass_name)
            if item is None:
                continue
            reason, where = place.problem or "", ""
            if place.index is not None:
                step = f"{place.index + 1} ({recipe.steps[place.index].label})"
                where = f"Added before step {step}: it cannot follow the last step."
            note = f"Unavailable: {reason}" if reason else where
            item.setDisabled(bool(reason))
            tip = self._passes[place.pass_name].summary
            item.setToolTip(0, f"{tip}\n\n{note}" if note else tip)
            item.setData(0, Qt.ItemDataRole.UserRole + 1, reason)
            item.setData(0, Qt.ItemDataRole.UserRole + 2, where)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt API
        """A click on a greyed-out pass (Qt gives disabled items no signal) says why."""
        if watched is self.tree.viewport() and event.type() == QEvent.Type.MouseButtonPress:
            item = self.tree.itemAt(event.position().toPoint())
            if item is not None and item.isDisabled():
                self._selected(item)
                name = item.data(0, Qt.ItemDataRole.UserRole)
                reason = item.data(0, Qt.ItemDataRole.UserRole + 1)
                self.state.status.emit(f"{name} cannot be added here: {reason}")
        return super().eventFilter(watched, event)

    def _selected(self, item: QTreeWidgetItem | None, _prev: Any = None) -> None:
        if item is None or item.data(0, Qt.ItemDataRole.UserRole) is None:
            self.hint.setText("")
            return
        p = self._passes[item.data(0, Qt.ItemDataRole.UserRole)]
        reason = item.data(0, Qt.ItemDataRole.UserRole + 1)
        where = item.data(0, Qt.ItemDataRole.UserRole + 2)
        note = f"\n⚠ {reason}" if reason else (f"\n{where}" if where else "")
        self.hint.setText(p.summary + note)
