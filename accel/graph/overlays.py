"""Per-node values the Graph panel colours by, node categories, and diff status.

Qt-free: the panel maps these values to colours (``studio/ui/graph_view/style.py``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from accel.graph.model import ROOT, Graph, Node, paint
from accel.models.runtime import rows_are_nodes

OVERLAYS = [
    ("none", "No overlay"),
    ("latency", "Latency (profile)"),
    ("params", "Parameters"),
    ("dtype", "Dtype"),
    ("parity", "Parity error (per layer)"),
]
# Overlays that paint a number per node (the others paint categories).
VALUE_OVERLAYS = ("latency", "params", "parity")
DIFF_KINDS = ("removed", "fused", "changed")

_CATEGORY_OPS = {
    "conv": ("conv", "convolution"),
    "linear": ("linear", "matmul", "mm", "addmm", "bmm", "gemm", "einsum", "baddbmm"),
    "norm": ("norm", "batch_norm", "layer_norm", "group_norm"),
    "act": ("relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "hardtanh", "elu", "clip"),
    "pool": ("pool", "avg", "max_pool", "adaptive", "mean", "reduce"),
    "elem": ("add", "mul", "sub", "div", "cat", "concat", "view", "reshape", "flatten"),
}


def op_category(node: Node) -> str:
    """io | group | conv | linear | norm | act | pool | elem | other."""
    if node.op in ("input", "output"):
        return "io"
    if node.op == "group":
        return "group"
    op = node.op.lower()
    for cat, keys in _CATEGORY_OPS.items():
        if any(k in op for k in keys):
            return cat
    return "other"


def overlay_values(
    graph: Graph | None,
    view_nodes: list[Node],
    key: str,
    profile: Any = None,
    layer_parity: dict[str, float] | None = None,
) -> dict[str, float]:
    """Values of overlay ``key`` per visible unit (node id or ``group:<path>``)."""
    if graph is None or not view_nodes:
        return {}
    view = Graph(nodes=list(view_nodes))
    if key == "latency":
        return _latency_values(graph, view, profile) if profile is not None else {}
    if key == "params":
        return {n.id: float(n.num_params) for n in view.nodes if n.num_params}
    if key == "parity":
        return paint(view, graph, layer_parity, "max") if layer_parity else {}
    return {}


def _latency_values(graph: Graph, view: Graph, prof: Any) -> dict[str, float]:
    # The root row is the whole forward: its unexplained remainder would land on the
    # few ops outside any submodule and make them look hottest.
    gen = getattr(prof, "generation", None)
    if gen is not None:  # a decoder profiled generating: decode time per token, per module
        values = {k: v for k, v in gen.decode_inclusive().items() if k != ROOT}
        return paint(view, graph, values, "sum")
    if rows_are_nodes(getattr(prof, "kind", "")):
        # ONNX / OpenVINO rows are per node name: paint nodes directly, groups by sum.
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
    values = {r.name: r.inclusive_ms for r in prof.rows if r.name != ROOT}
    return paint(view, graph, values, "sum")


def node_dtype(graph: Graph | None, node: Node) -> str:
    """A node's output dtype; a group box's most common one ("" when unknown)."""
    if node.op != "group":
        return next((d for d in node.output_dtypes if d), "") or ""
    members = graph.nodes_of_group(node.module_path) if graph else []
    counts = Counter(next((d for d in m.output_dtypes if d), "") for m in members)
    counts.pop("", None)
    return counts.most_common(1)[0][0] if counts else ""


def diff_status(diff: Any) -> dict[str, str]:
    """Original node id -> removed | fused | changed, from an ``accel.graph.diff.GraphDiff``."""
    status: dict[str, str] = {}
    for c in diff.dtype_changed + diff.op_changed:
        status[c.a] = "changed"
    for a in diff.fused:
        status[a] = "fused"
    for a in diff.removed:
        status[a] = "removed"
    return status


def diff_summary(step: str, diff: Any) -> str:
    changed = len(diff.dtype_changed) + len(diff.op_changed)
    return (
        f"{step}: {len(diff.removed)} removed, {len(diff.fused)} fused, "
        f"{changed} changed, +{len(diff.added)} added"
    )


def diff_of(graph: Graph | None, node: Node | None, status: dict[str, str]) -> str | None:
    """removed | fused | changed | None for a visible node or group box (worst member)."""
    if node is None or not status or graph is None:
        return None
    if node.op != "group":
        return status.get(node.id)
    found = {status.get(n.id) for n in graph.nodes_of_group(node.module_path)}
    return next((k for k in DIFF_KINDS if k in found), None)
