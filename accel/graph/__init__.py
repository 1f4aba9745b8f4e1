"""Model graphs: the Graph model, layout, diff, per-layer parity; ``graph_from_model``
asks the model's runtime (``accel.runtimes``) to build the graph of its kind.

``from accel.graph import Graph, graph_from_model``.
"""

from accel.graph.model import Edge, Graph, Group, Node, aggregate_by_module, paint

__all__ = [
    "Edge",
    "Graph",
    "Group",
    "Node",
    "aggregate_by_module",
    "graph_from_model",
    "paint",
]


def graph_from_model(model, inputs=None, **kwargs):
    """Graph of a ``LoadedModel`` of any kind (its runtime builds it; torch: sample inputs
    from its InputSpec)."""
    from accel.models.runtime import runtime_of

    return runtime_of(model).graph(model, inputs, **kwargs)
