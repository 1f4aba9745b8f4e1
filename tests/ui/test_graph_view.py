"""Graph view on big synthetic graphs: layout off the GUI thread, groups, search, LOD."""

from __future__ import annotations

import threading

import pytest


@pytest.fixture
def view(qtbot):
    from studio.state import AppState
    from studio.ui.graph_view import GraphView

    state = AppState()
    gv = GraphView(state, None)
    gv.resize(900, 700)
    qtbot.addWidget(gv)
    gv.show()
    return gv


def test_big_graph_is_laid_out_off_the_gui_thread_and_opens_collapsed(view, qtbot, monkeypatch):
    from accel.graph.layout import GroupLayouts
    from accel.graph.synthetic import synthetic_graph

    threads = []
    orig = GroupLayouts.layout

    def spy(self, expanded=()):
        threads.append(threading.current_thread())
        return orig(self, expanded)

    monkeypatch.setattr(GroupLayouts, "layout", spy)
    g = synthetic_graph(4000, blocks=12)
    with qtbot.waitSignal(view.layoutReady, timeout=60000):
        view.state.set_graph(g)
    assert threads and all(t is not threading.main_thread() for t in threads)
    # Thousands of nodes open as a handful of module boxes.
    assert 0 < len(view._items) <= 100
    shown = len(view._items)
    with qtbot.waitSignal(view.layoutReady, timeout=60000):
        view.expand_level()
    assert len(view._items) > shown
    # Expanding one group relays out only that group: the others come from the cache.
    cached = len(view._layouts._cache)
    group = next(n.module_path for n in view._view_nodes.values() if n.op == "group")
    with qtbot.waitSignal(view.layoutReady, timeout=60000):
        view.expand_group(group)
    assert group in view._frames
    assert len(view._layouts._cache) > cached


def test_search_reveals_a_node_hidden_in_a_collapsed_group(view, qtbot):
    from accel.graph.synthetic import synthetic_graph

    g = synthetic_graph(600, blocks=4)
    with qtbot.waitSignal(view.layoutReady, timeout=60000):
        view.state.set_graph(g)
    target = g.nodes[-3]  # deep inside the last block
    assert target.id not in view._items
    view.search.setText(target.name)
    assert target.id in view._matches
    view._match_index = view._matches.index(target.id) - 1
    with qtbot.waitSignal(view.layoutReady, timeout=60000):
        view.find_next()
    assert view.selected_unit() == target.id
    assert view.state.selected == target.id
    assert "1 of" in view.match_label.text() or "of" in view.match_label.text()


def test_labels_are_skipped_when_zoomed_out(view, qtbot):
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtWidgets import QStyleOptionGraphicsItem

    from accel.graph.synthetic import synthetic_graph

    with qtbot.waitSignal(view.layoutReady, timeout=60000):
        view.state.set_graph(synthetic_graph(200, blocks=2))
    item = next(iter(view._items.values()))
    calls = []

    class Spy(QPainter):
        def drawText(self, *a):  # noqa: N802
            calls.append(a)
            return super().drawText(*a)

    for scale, expect_text in ((0.1, False), (1.0, True)):
        calls.clear()
        img = QImage(400, 400, QImage.Format.Format_ARGB32)
        p = Spy(img)
        p.scale(scale, scale)
        item.paint(p, QStyleOptionGraphicsItem())
        p.end()
        assert bool(calls) is expect_text, scale
