"""Model graphs: the Graph model, builders from torch and ONNX, layout, diff, per-layer parity.

``from accel.graph import Graph, graph_from_torch, graph_from_onnx`` — builders import
torch/onnx only when called.
"""

from accel.graph.model import Edge, Graph, Group, Node, aggregate_by_module, paint

__all__ = [
    "Edge",
    "Graph",
    "Group",
    "Node",
    "aggregate_by_module",
    "graph_from_model",
    "graph_from_onnx",
    "graph_from_torch",
    "paint",
]


def graph_from_torch(*args, **kwargs):
    from accel.graph.from_torch import graph_from_torch as f

    return f(*args, **kwargs)


def graph_from_onnx(*args, **kwargs):
    from accel.graph.from_onnx import graph_from_onnx as f

    return f(*args, **kwargs)


def graph_from_model(model, inputs=None, **kwargs):
    """Graph of a ``LoadedModel`` of any kind (its handler builds it; torch: sample inputs
    from its InputSpec)."""
    from accel.backends import backend_of

    return backend_of(model).graph(model, inputs, **kwargs)
