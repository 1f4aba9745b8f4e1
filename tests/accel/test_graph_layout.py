"""Layered layout: properties, not pixels (no overlaps, edges downward, fewer crossings)."""

from __future__ import annotations

import numpy as np
import pytest

from accel.graph.layout import (
    GroupLayouts,
    Layout,
    _pav,
    count_crossings,
    layered_layout,
    layout_graph,
)
from accel.graph.model import Edge, Graph, Node
from accel.graph.synthetic import synthetic_graph


def assert_no_overlap(positions: dict, ids=None) -> None:
    ids = list(ids if ids is not None else positions)
    if len(ids) < 2:
        return
    box = np.array([positions[i] for i in ids], dtype=float)
    x0, y0 = box[:, 0], box[:, 1]
    x1, y1 = x0 + box[:, 2], y0 + box[:, 3]
    ox = (x0[:, None] < x1[None, :] - 1e-6) & (x0[None, :] < x1[:, None] - 1e-6)
    oy = (y0[:, None] < y1[None, :] - 1e-6) & (y0[None, :] < y1[:, None] - 1e-6)
    both = ox & oy
    np.fill_diagonal(both, False)
    bad = np.argwhere(both)
    assert len(bad) == 0, [(ids[a], ids[b]) for a, b in bad[:5]]


def assert_edges_downward(lay: Layout, graph: Graph | None = None) -> None:
    for s, d, pts in lay.edges:
        ys = [p[1] for p in pts]
        assert all(b > a for a, b in zip(ys, ys[1:])), (s, d, pts)
        sx, sy, sw, sh = lay.positions[s]
        dx, dy, dw, dh = lay.positions[d]
        assert pts[0] == pytest.approx((sx + sw / 2, sy + sh))  # leaves the bottom of src
        assert pts[-1] == pytest.approx((dx + dw / 2, dy))  # enters the top of dst


def graph_arrays(g: Graph):
    ids = [n.id for n in g.nodes]
    index = {n: i for i, n in enumerate(ids)}
    sizes = [(40.0 + 3 * (i % 7), 28.0) for i in range(len(ids))]
    edges = [(index[e.src], index[e.dst]) for e in g.edges]
    return ids, sizes, edges


@pytest.mark.parametrize("n", [50, 600, 1500])
def test_synthetic_layout_properties(n):
    g = synthetic_graph(n, blocks=3, seed=n)
    lay = layout_graph(g)
    assert set(lay.positions) == {node.id for node in g.nodes}
    assert lay.reversed_edges == 0
    assert_no_overlap(lay.positions)
    assert_edges_downward(lay)
    assert len(lay.edges) == len({(e.src, e.dst) for e in g.edges})
    # Every node lies inside the reported canvas.
    for x, y, w, h in lay.positions.values():
        assert (
            x >= -1e-6 and y >= -1e-6 and x + w <= lay.width + 1e-6 and y + h <= lay.height + 1e-6
        )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_crossings_fewer_than_random_order(seed):
    g = synthetic_graph(800, blocks=2, seed=seed)
    ids, sizes, edges = graph_arrays(g)
    ours, rnd = [], []
    layered_layout(ids, sizes, edges, _work=ours)
    layered_layout(ids, sizes, edges, seed_order="random", sweeps=0, _work=rnd)
    c_ours = count_crossings(ours[0].layer_of, ours[0].rank, ours[0].seg_u, ours[0].seg_v)
    c_rand = count_crossings(rnd[0].layer_of, rnd[0].rank, rnd[0].seg_u, rnd[0].seg_v)
    assert c_rand > 0
    assert c_ours < c_rand / 2, (c_ours, c_rand)


def test_barycentre_untangles_a_crossed_bipartite_graph():
    # Two chains whose start order is swapped: a -> y, b -> x with x before y in input order.
    ids = ["a", "b", "x", "y"]
    sizes = [(40.0, 20.0)] * 4
    work: list = []
    lay = layered_layout(ids, sizes, [(0, 3), (1, 2)], _work=work)
    w = work[0]
    assert count_crossings(w.layer_of, w.rank, w.seg_u, w.seg_v) == 0
    ax = lay.positions["a"][0]
    bx = lay.positions["b"][0]
    yx = lay.positions["y"][0]
    xx = lay.positions["x"][0]
    assert (ax < bx) == (yx < xx)


def test_long_edges_get_dummies_and_stay_straightish():
    # A skip edge over a chain of 5: its polyline has one point per crossed layer.
    ids = [f"n{i}" for i in range(6)]
    edges = [(i, i + 1) for i in range(5)] + [(0, 5)]
    lay = layered_layout(ids, [(60.0, 30.0)] * 6, edges)
    skip = next(pts for s, d, pts in lay.edges if (s, d) == ("n0", "n5"))
    assert len(skip) == 2 + 2 * 4  # enters and leaves each crossed row vertically
    assert_edges_downward(lay)
    assert_no_overlap(lay.positions)
    assert [lay.layers[i] for i in ids] == [0, 1, 2, 3, 4, 5]


def test_cycles_are_broken_and_wide_nodes_do_not_overlap():
    ids = ["a", "b", "c", "d"]
    sizes = [(300.0, 20.0), (10.0, 50.0), (200.0, 20.0), (120.0, 20.0)]
    edges = [(0, 1), (1, 2), (2, 0), (0, 3), (0, 2)]  # c -> a closes a cycle
    lay = layered_layout(ids, sizes, edges)
    assert lay.reversed_edges == 1
    assert_no_overlap(lay.positions)
    back = next(pts for s, d, pts in lay.edges if (s, d) == ("c", "a"))
    assert back[0][1] > back[-1][1]  # the reversed edge is drawn from c (below) up to a
    assert layered_layout([], [], []).positions == {}


def test_sources_sit_next_to_their_consumer():
    # A constant consumed late should not float at the top of the graph.
    ids = ["x", "a", "b", "c", "const", "d"]
    edges = [(0, 1), (1, 2), (2, 3), (3, 5), (4, 5)]
    lay = layered_layout(ids, [(40.0, 20.0)] * 6, edges)
    assert lay.layers["const"] == lay.layers["d"] - 1


def test_pav_projection():
    assert _pav([3.0, 1.0, 2.0], [1.0, 1.0, 1.0]) == pytest.approx([2.0, 2.0, 2.0])
    assert _pav([1.0, 2.0, 0.0, 5.0], [1.0, 1.0, 1.0, 1.0]) == pytest.approx([1.0, 1.0, 1.0, 5.0])
    assert _pav([0.0, 4.0], [3.0, 1.0]) == pytest.approx([0.0, 4.0])


def test_group_layouts_collapsed_and_expanded():
    g = synthetic_graph(1200, blocks=4, seed=3)
    gl = GroupLayouts(g)
    top = gl.layout()
    view = g.collapsed()
    assert set(top.positions) == {n.id for n in view.nodes}
    assert top.frames == []
    assert_no_overlap(top.positions)
    assert_edges_downward(top)

    first = g.groups[""].children[0]
    inner_group = g.groups[first].children[0]
    lay = gl.layout([first, inner_group])
    assert set(lay.frames) == {"group:" + first, "group:" + inner_group}
    v = g.view([first, inner_group])
    assert set(lay.positions) == {n.id for n in v.nodes} | set(lay.frames)
    # Units of every laid-out group do not overlap each other, and sit inside their frame.
    for gid in ["", first, inner_group]:
        units = list(gl.group_layout(gid, [first, inner_group]).positions)
        assert_no_overlap(lay.positions, units)
        if gid:
            fx, fy, fw, fh = lay.positions["group:" + gid]
            for u in units:
                x, y, w, h = lay.positions[u]
                assert fx <= x and x + w <= fx + fw + 1e-6 and fy <= y and y + h <= fy + fh + 1e-6
    # The frame grew to hold the expanded group.
    assert lay.positions["group:" + first][3] > top.positions["group:" + first][3]
    # Caching: laying out the same state again reuses every group layout.
    assert gl.group_layout(first, [first, inner_group]) is gl.group_layout(
        first, [inner_group, first]
    )


def test_group_layouts_on_a_view_with_back_edges():
    # Group b feeds root node r which feeds b again: the group-level graph has a cycle.
    g = Graph()
    g.nodes = [
        Node("x", "input"),
        Node("b1", "op", module_path="b.p"),
        Node("r", "op"),
        Node("b2", "op", module_path="b.q"),
        Node("y", "output"),
    ]
    g.edges = [Edge("x", "b1"), Edge("b1", "r"), Edge("r", "b2"), Edge("b2", "y")]
    g.build_groups()
    lay = GroupLayouts(g).layout()
    assert set(lay.positions) == {"x", "group:b", "r", "y"}
    assert_no_overlap(lay.positions)
    assert len(lay.edges) == 4
    d = lay.to_dict()
    assert Layout.from_dict(d).positions == lay.positions


def _segment_hits_box(p, q, box, eps=0.5) -> bool:
    """Does segment p-q pass through the inside of ``box`` (shrunk by ``eps``)? Liang-Barsky."""
    x, y, w, h = box
    x0, y0, x1, y1 = x + eps, y + eps, x + w - eps, y + h - eps
    t0, t1 = 0.0, 1.0
    dx, dy = q[0] - p[0], q[1] - p[1]
    for num, lim in ((-dx, p[0] - x0), (dx, x1 - p[0]), (-dy, p[1] - y0), (dy, y1 - p[1])):
        if num == 0:
            if lim < 0:
                return False
        elif num < 0:
            t0 = max(t0, lim / num)
        else:
            t1 = min(t1, lim / num)
    return t0 < t1


def edges_through_boxes(lay: Layout, long_only: bool = True) -> list[tuple[str, str, str]]:
    """(src, dst, node) for every edge with a segment through a box it is not attached to
    (frames excluded: edges into an expanded group run inside it)."""
    frames = set(lay.frames)
    boxes = [(nid, b) for nid, b in lay.positions.items() if nid not in frames]
    bad = []
    for s, d, pts in lay.edges:
        if long_only and len(pts) <= 2:
            continue
        for nid, box in boxes:
            if nid in (s, d):
                continue
            if any(_segment_hits_box(p, q, box) for p, q in zip(pts, pts[1:])):
                bad.append((s, d, nid))
    return bad


def test_segment_check_sees_an_edge_through_a_box():
    assert _segment_hits_box((0, 0), (0, 100), (-10, 40, 20, 20))
    assert not _segment_hits_box((30, 0), (30, 100), (-10, 40, 20, 20))
    lay = Layout(
        positions={"a": (0, 0, 10, 10), "b": (0, 40, 10, 10), "c": (0, 80, 10, 10)},
        edges=[("a", "c", [(5, 10), (5, 45), (5, 80)])],
    )
    assert edges_through_boxes(lay) == [("a", "c", "b")]


def test_diamond_skip_edge_goes_beside_the_chain():
    # a -> b -> c -> d plus a -> d: the skip edge must not be drawn over b and c.
    ids = ["a", "b", "c", "d"]
    lay = layered_layout(ids, [(60.0, 28.0)] * 4, [(0, 1), (1, 2), (2, 3), (0, 3)])
    skip = next(pts for s, d, pts in lay.edges if (s, d) == ("a", "d"))
    assert len(skip) > 2
    assert edges_through_boxes(lay) == []
    assert edges_through_boxes(lay, long_only=False) == []
    # Where it passes b and c it is clear of their boxes.
    for nid in ("b", "c"):
        x, y, w, h = lay.positions[nid]
        beside = [px for px, py in skip if y - 1e-6 <= py <= y + h + 1e-6]
        assert beside and all(px < x or px > x + w for px in beside), (nid, skip)
    assert_edges_downward(lay)


@pytest.fixture(scope="module")
def resnet_graph():
    from accel.graph import graph_from_model
    from accel.models import load_model

    return graph_from_model(load_model("zoo:resnet"))


def test_resnet_skip_edges_do_not_cross_boxes_flat(resnet_graph):
    g = resnet_graph
    lay = layout_graph(g)
    adds = [n.id for n in g.nodes if n.op == "add"]
    skips = [(s, d, pts) for s, d, pts in lay.edges if d in adds and len(pts) > 2]
    assert len(skips) == len(adds) == 6  # every residual is a long edge
    assert edges_through_boxes(lay, long_only=False) == []
    assert_edges_downward(lay)
    assert_no_overlap(lay.positions)


def test_resnet_skip_edges_reach_add_inside_expanded_blocks(resnet_graph):
    g = resnet_graph
    gl = GroupLayouts(g)
    views = [[], ["layer1"], ["layer1", "layer1.0"], [p for p in g.groups if p]]
    for exp in views:
        lay = gl.layout(exp)
        assert edges_through_boxes(lay, long_only=False) == [], exp
        v = g.view(exp)
        assert set(lay.positions) == {n.id for n in v.nodes} | set(lay.frames)
        for s, d, pts in lay.edges:
            ys = [p[1] for p in pts]
            assert all(b > a for a, b in zip(ys, ys[1:])), (s, d, pts)
    # Fully open: the block input reaches its Add through the block's entry port, as a
    # long edge of its own, next to the edge into conv1.
    lay = gl.layout([p for p in g.groups if p])
    into_block = [pts for s, d, pts in lay.edges if s == "group:layer1.0"]
    ends = {d for s, d, pts in lay.edges if s == "group:layer1.0"}
    assert "add" in ends and "group:layer1.0.conv1" in ends, ends
    skip = next(pts for s, d, pts in lay.edges if (s, d) == ("group:layer1.0", "add"))
    assert len(skip) > 4 and into_block
    # The edge into the block's frame ends where the port's edges start.
    fx, fy, fw, fh = lay.positions["group:layer1.0"]
    assert skip[0][1] == pytest.approx(fy)
    # (edges to the frame's bottom are its exit port's, from inside)
    outer = [pts for s, d, pts in lay.edges if d == "group:layer1.0" and pts[-1][1] < fy + 1]
    assert outer and all(pts[-1] == pytest.approx(skip[0]) for pts in outer)
    exits = [pts for s, d, pts in lay.edges if d == "group:layer1.0" and pts[-1][1] > fy + 1]
    assert exits and all(pts[-1][1] == pytest.approx(fy + fh) for pts in exits)
