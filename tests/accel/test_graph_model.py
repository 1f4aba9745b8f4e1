"""Graph model: JSON round trip, group tree, views, per-module painting (no torch needed)."""

from __future__ import annotations

import json

import pytest

from accel.graph.model import Edge, Graph, Node, aggregate_by_module, paint
from accel.graph.synthetic import synthetic_graph


def small_graph() -> Graph:
    """x -> a.conv -> a.bn -> b.fc1 -> b.fc2 -> add(root) -> out, plus a skip a.bn -> add."""
    g = Graph(name="g")
    g.nodes = [
        Node("in", "input", "x", outputs=["x"]),
        Node("c", "conv2d", "c", "a.conv", num_params=100, output_dtypes=["float32"]),
        Node("bn", "batch_norm", "bn", "a.bn", num_params=8),
        Node("f1", "linear", "f1", "b.fc1", num_params=30),
        Node("r", "relu", "r", "b"),
        Node("f2", "linear", "f2", "b.fc2", num_params=10),
        Node("add", "add", "add", ""),
        Node("out", "output", "y"),
    ]
    g.edges = [
        Edge("in", "c", "x", [1, 3], "float32"),
        Edge("c", "bn", "t1"),
        Edge("bn", "f1", "t2"),
        Edge("f1", "r", "t3"),
        Edge("r", "f2", "t4"),
        Edge("f2", "add", "t5"),
        Edge("bn", "add", "t2"),
        Edge("add", "out", "t6"),
    ]
    g.inputs, g.outputs = ["in"], ["out"]
    g.build_groups({"": "Net", "a": "Block", "b": "Head"})
    return g


def test_json_round_trip_keeps_everything():
    g = small_graph()
    g.notes.append("n")
    g.fallback_reason = "why"
    d = json.loads(json.dumps(g.to_dict()))
    g2 = Graph.from_dict(d)
    assert g2.to_dict() == g.to_dict()
    assert g2.node("bn").num_params == 8
    assert g2.groups["a"].children == ["a.conv", "a.bn"]


def test_group_tree_and_membership():
    g = small_graph()
    assert g.groups[""].children == ["a", "b"]
    assert g.groups["b"].children == ["b.fc1", "b.fc2"]
    assert g.groups["b"].nodes == ["r"]  # only direct members
    assert g.groups["a"].type == "Block"
    assert [n.id for n in g.nodes_of_group("b")] == ["f1", "r", "f2"]
    assert [n.id for n in g.nodes_of_group("b", recursive=False)] == ["r"]
    assert [n.id for n in g.nodes_for_module("a")] == ["c", "bn"]
    # Paths are matched on whole components: "a" is not a prefix of "ab".
    assert g.nodes_for_module("a.c") == []
    assert g.execution_order() == ["a", "a.conv", "a.bn", "b", "b.fc1", "b.fc2"]


def test_collapsed_view_aggregates_edges_and_params():
    g = small_graph()
    v = g.collapsed()
    ids = [n.id for n in v.nodes]
    assert ids == ["in", "group:a", "group:b", "add", "out"]
    ga = v.node("group:a")
    assert ga.num_params == 108 and ga.attributes["num_nodes"] == 2
    assert ga.attributes["type"] == "Block"
    pairs = {(e.src, e.dst): e for e in v.edges}
    assert set(pairs) == {
        ("in", "group:a"),
        ("group:a", "group:b"),
        ("group:b", "add"),
        ("group:a", "add"),
        ("add", "out"),
    }
    # Internal edges vanish, the view is self-consistent.
    assert all(e.src in v and e.dst in v for e in v.edges)


def test_expand_opens_one_group():
    g = small_graph()
    v = g.expand(g.collapsed(), "b")
    ids = [n.id for n in v.nodes]
    assert ids == ["in", "group:a", "group:b.fc1", "r", "group:b.fc2", "add", "out"]
    assert v.expanded == ["", "b"]
    v2 = g.expand(v, "a.bn")  # opening a nested group opens its ancestors too
    assert "bn" in [n.id for n in v2.nodes] and "group:a.conv" in [n.id for n in v2.nodes]
    full = g.view(g.groups)
    assert [n.id for n in full.nodes] == [n.id for n in g.nodes]
    assert len(full.edges) == len(g.edges) - 0  # t2 feeds two nodes: two edges either way


def test_edge_aggregation_counts_distinct_tensors():
    g = small_graph()
    # Two more tensors from a to b: three edges between the groups, counted as 3 tensors.
    g.edges.append(Edge("c", "f1", "t1"))
    g.edges.append(Edge("c", "r", "t1"))  # same tensor to another node of b: not a new one
    v = g.collapsed()
    e = next(e for e in v.edges if (e.src, e.dst) == ("group:a", "group:b"))
    assert e.count == 2
    assert set(e.tensor.split(",")) == {"t2", "t1"}


def test_group_graph_is_the_inside_of_one_group():
    g = small_graph()
    inner = g.group_graph("b")
    assert [n.id for n in inner.nodes] == ["group:b.fc1", "r", "group:b.fc2"]
    assert {(e.src, e.dst) for e in inner.edges} == {("group:b.fc1", "r"), ("r", "group:b.fc2")}


def test_aggregate_sum_splits_inclusive_module_values():
    g = small_graph()
    # Inclusive times: b = 10 of which fc1 3 and fc2 2 -> the rest (5) goes to b's own node r.
    per_node, per_group = aggregate_by_module(
        g, {"b": 10.0, "b.fc1": 3.0, "b.fc2": 2.0, "a.conv": 4.0}
    )
    assert per_node == {"f1": 3.0, "f2": 2.0, "r": 5.0, "c": 4.0}
    assert per_group["b"] == pytest.approx(10.0)
    assert per_group[""] == pytest.approx(14.0)
    assert per_group["a"] == pytest.approx(4.0)
    assert "bn" not in per_node


def test_aggregate_max_for_errors_and_paint_on_a_view():
    g = small_graph()
    values = {"a.conv": 0.5, "a.bn": 2.0, "b": 0.1}
    per_node, per_group = aggregate_by_module(g, values, how="max")
    assert per_node["bn"] == 2.0 and per_node["r"] == 0.1 and per_node["f1"] == 0.1
    assert per_group["a"] == 2.0
    assert per_group["b"] == 0.1
    painted = paint(g.collapsed(), g, values, how="max")
    assert painted == {"group:a": 2.0, "group:b": 0.1}
    with pytest.raises(ValueError, match="how"):
        aggregate_by_module(g, values, how="median")


def test_synthetic_graph_shape():
    g = synthetic_graph(2000, blocks=5, seed=1)
    assert len(g.nodes) == 2000
    ids = {n.id for n in g.nodes}
    assert all(e.src in ids and e.dst in ids for e in g.edges)
    index = {n.id: i for i, n in enumerate(g.nodes)}
    assert all(index[e.src] < index[e.dst] for e in g.edges)  # execution order is topological
    assert len(g.groups[""].children) >= 1


def test_node_keyed_values_go_to_their_node():
    g = small_graph()
    per_node, per_group = aggregate_by_module(g, {"c": 1.5, "f2": 0.5, "nope": 9.0, "in": 3.0})
    assert per_node == {"c": 1.5, "f2": 0.5}
    assert per_group["a"] == 1.5 and per_group["b"] == 0.5 and per_group[""] == 2.0


def test_view_opens_ancestors_like_the_layout():
    g = small_graph()
    v = g.view(["b.fc1"])
    assert v.expanded == ["", "b", "b.fc1"]
    assert "f1" in [n.id for n in v.nodes] and "group:b.fc2" in [n.id for n in v.nodes]
