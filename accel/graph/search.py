"""Graph search: nodes whose name, op or module path contain a text (case-insensitive)."""

from __future__ import annotations

from accel.graph.model import Graph


def find_nodes(graph: Graph | None, text: str) -> list[str]:
    """Ids of the nodes matching ``text``, in graph order; [] for blank text."""
    needle = text.strip().lower()
    if not needle or graph is None:
        return []
    return [
        n.id
        for n in graph.nodes
        if needle in n.name.lower() or needle in n.op.lower() or needle in n.module_path.lower()
    ]
