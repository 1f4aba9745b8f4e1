"""The Graph panel's selection, details pane, search and context menu (a mixin of
``GraphView``).

What the details say and what search finds is ``accel.graph.details`` / ``accel.graph.search``.
"""

from __future__ import annotations

import html

from PySide6.QtGui import QGuiApplication, QPainterPath
from PySide6.QtWidgets import QMenu

from accel.graph import expansion
from accel.graph.details import details
from accel.graph.model import Node
from accel.graph.search import find_nodes
from studio.ui.graph_view.items import NodeItem


class SelectionMixin:
    # -- selection and details ------------------------------------------------------------
    def unit_for(self, key: str) -> tuple[str | None, str | None]:
        """(visible node id, frame path) that shows ``key`` (a node id or module path)."""
        if self.graph is None:
            return None, None
        return expansion.unit_for(self.graph, key, self._items, set(self._frames), self.expanded)

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
            for p in self._edge_paths.get(unit, []):
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
        if items:
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
        info = details(self.graph, node, path, self.expanded, self.state.profile)
        rows = list(info.rows)
        d = self.diff_of(unit) if unit else None
        if d and self.diff_box.isChecked():
            rows.append(("Diff", d))
        v = self.overlay_value(unit) if unit else None
        if v is not None and self.state.overlay == "parity":
            rows.append(("Parity error", f"{v:.3g}"))
        e = html.escape
        body = "".join(
            f"<tr><td><b>{e(k)}</b></td><td>{e(v).replace(chr(10), '<br>')}</td></tr>"
            for k, v in rows
        )
        title = f"{e(info.title)} <small>{e(info.subtitle)}</small>"
        self.details.setHtml(f"<h3>{title}</h3><table cellspacing=4>{body}</table>")

    # -- search ---------------------------------------------------------------------------
    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def _on_search_text(self, _text: str) -> None:
        self._match_index = -1
        self._update_matches()

    def _update_matches(self) -> None:
        for item in self._items.values():
            if item.highlight:
                item.highlight = False
                item.update()
        self._matches = find_nodes(self.graph, self.search.text())
        if not self.search.text().strip():
            self.match_label.setText("")
            return
        for nid in self._matches:
            unit, _ = self.unit_for(nid)
            if unit and not self._items[unit].highlight:
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
            act.setToolTip(
                "Adds this module to the recipe steps that keep layers in float "
                "(quantization exclude, fp16/bf16 keep), or adds a quantization step"
            )
        menu.addAction("Copy module path", lambda: QGuiApplication.clipboard().setText(path))
        if node.op != "group":
            name = node.name or node.id
            menu.addAction("Copy node name", lambda: QGuiApplication.clipboard().setText(name))
        menu.exec(pos)

    def keep_in_float(self, path: str, node_names: list[str] | None = None) -> int:
        """Keep a layer in float through ``accel.recipe_edits.keep_in_float`` (torch steps
        take module paths, ONNX steps node names). Returns the step index, -1 if none."""
        from accel.models.runtime import get_runtime
        from accel.recipe_edits import keep_in_float

        kind = (self.state.model_info or {}).get("kind") or "torch"
        if get_runtime(kind).exclude_names == "nodes":  # the kind's quantizers name nodes
            names = list(node_names or [])
            if not names and self.graph is not None and path:
                names = [n.name for n in self.graph.nodes_for_module(path) if n.name]
        else:
            names = [path] if path else []
        try:
            edit = keep_in_float(self.state.recipe, kind, names, where=path)
        except ValueError as exc:
            self.state.status.emit(str(exc))
            return -1
        self.state.update_steps(list(edit.recipe.steps))
        self.state.status.emit(edit.message)
        return edit.index
