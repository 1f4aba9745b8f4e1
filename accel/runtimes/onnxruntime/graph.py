"""Build a ``Graph`` from an ONNX model.

Module paths come from the exporter's naming: the TorchScript exporter names nodes
``/layer1/layer1.0/conv1/Conv`` (scopes joined by ``/``, op last); the dynamo exporter
stores ``pkg.torch.onnx.name_scopes`` in each node's metadata. Shapes come from
``onnx.shape_inference``; initializer sizes are the nodes' parameter counts.
``Constant`` nodes are folded into their consumers (they are weights, not work).
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from typing import Any

from accel.graph.model import ROOT, Edge, Graph, Node, scope_to_module_path

log = logging.getLogger(__name__)


def module_path_of(node: Any) -> str:
    """Dotted module path of an ONNX ``NodeProto`` ("" when it carries none)."""
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(p.value)
            except (ValueError, SyntaxError):
                break
            # The last scope is the op itself.
            return scope_to_module_path([str(s) for s in scopes[:-1]])
    name = node.name or ""
    if "/" in name:
        parts = [p for p in name.split("/") if p]
        return scope_to_module_path(parts[:-1])
    return ROOT


_DTYPES: dict[int, str] = {}


def _dtype_name(elem_type: int) -> str | None:
    if not _DTYPES:
        import onnx

        for name, value in onnx.TensorProto.DataType.items():
            _DTYPES[value] = name.lower()
        _DTYPES.update({1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"})
    return _DTYPES.get(elem_type)


def _value_info(vi: Any) -> tuple[list | None, str | None]:
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        return None, None
    dtype = _dtype_name(t.elem_type) if t.elem_type else None
    if not t.HasField("shape"):
        return None, dtype
    shape: list[int | str] = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        else:
            shape.append(d.dim_param or "?")
    return shape, dtype


def _attr_plain(a: Any) -> Any:
    import onnx

    if a.type in (onnx.AttributeProto.TENSOR, onnx.AttributeProto.GRAPH):
        return f"<{onnx.AttributeProto.AttributeType.Name(a.type).lower()}>"
    if a.type in (onnx.AttributeProto.GRAPHS, onnx.AttributeProto.TENSORS):
        return "<list>"
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v[:16]]
    return v


def graph_from_onnx(model: Any, *, name: str = "", infer_shapes: bool = True) -> Graph:
    """Graph of an ONNX model: a path, an ``onnx.ModelProto`` or an onnx-kind ``LoadedModel``."""
    proto, name = _read_proto(model, name, infer_shapes)
    g = proto.graph
    graph = Graph(name=name or g.name or "onnx", source="onnx")
    if not infer_shapes:
        graph.notes.append("shape inference skipped")
    build = _Builder(graph, g)
    build.add_inputs(g)
    used_ids: set[str] = {n.id for n in graph.nodes}
    for i, onode in enumerate(g.node):
        if onode.op_type == "Constant" and not onode.input:
            build.constants.update(onode.output)
            continue
        nid = onode.name or f"{onode.op_type}_{i}"
        if nid in used_ids:
            nid = f"{nid}#{i}"
        used_ids.add(nid)
        build.add_op(onode, nid)
    build.add_outputs(g)
    if any(n.op != "Constant" and n.op in {"If", "Loop", "Scan"} for n in graph.nodes):
        graph.notes.append("control-flow subgraphs (If/Loop/Scan) are shown as single nodes")
    graph.build_groups()
    return graph


def _read_proto(model: Any, name: str, infer_shapes: bool) -> tuple[Any, str]:
    """The ModelProto (external data not loaded: structure needs only initializer shapes),
    shapes inferred when asked (they are optional), and the name for the graph."""
    import onnx

    if hasattr(model, "onnx_path") and getattr(model, "onnx_path", None) is not None:
        model = model.onnx_path
    if isinstance(model, str | Path):
        path = Path(model)
        name = name or path.stem
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as exc:
            from accel.errors import ModelLoadError

            raise ModelLoadError(
                f"{path} is not a readable ONNX model ({type(exc).__name__}: {exc}); "
                "check that the file is complete and really is .onnx"
            ) from None
    else:
        proto = model
    if infer_shapes:
        try:
            proto = onnx.shape_inference.infer_shapes(proto)
        except Exception as exc:  # shapes are optional
            log.info("ONNX shape inference failed: %s", exc)
    return proto, name


class _Builder:
    """Adds an ONNX graph's inputs, ops and outputs to ``graph``; knows every tensor's shape
    and dtype, the initializers (parameters) and which node produced each tensor."""

    def __init__(self, graph: Graph, g: Any) -> None:
        self.graph = graph
        self.info: dict[str, tuple[list | None, str | None]] = {}
        for vi in [*g.input, *g.value_info, *g.output]:
            self.info[vi.name] = _value_info(vi)
        self.init_numel: dict[str, int] = {}
        for t in g.initializer:
            n = 1
            for d in t.dims:
                n *= int(d)
            self.init_numel[t.name] = n
            self.info.setdefault(t.name, (list(t.dims), _dtype_name(t.data_type)))
        self.constants: set[str] = set()  # outputs of Constant nodes (not drawn)
        self.producer: dict[str, str] = {}  # tensor -> id of the node that makes it
        self.counted: set[str] = set()  # initializers already counted as parameters

    def add_inputs(self, g: Any) -> None:
        for vi in g.input:
            if vi.name in self.init_numel:
                continue
            shape, dtype = self.info.get(vi.name, (None, None))
            node = Node(
                f"input:{vi.name}",
                "input",
                vi.name,
                outputs=[vi.name],
                output_shapes=[shape],
                output_dtypes=[dtype],
            )
            self.graph.nodes.append(node)
            self.graph.inputs.append(node.id)
            self.producer[vi.name] = node.id

    def add_op(self, onode: Any, nid: str) -> None:
        node = Node(
            nid,
            onode.op_type if not onode.domain else f"{onode.domain}.{onode.op_type}",
            onode.name or onode.op_type,
            module_path_of(onode),
        )
        for a in onode.attribute:
            node.attributes[a.name] = _attr_plain(a)
        for t in onode.input:
            if not t:
                continue
            if t in self.init_numel:
                node.params.append(t)
                if t not in self.counted:  # a shared initializer counts once
                    self.counted.add(t)
                    node.num_params += self.init_numel[t]
                continue
            if t in self.constants:
                continue
            shape, dtype = self.info.get(t, (None, None))
            node.inputs.append(t)
            node.input_shapes.append(shape)
            node.input_dtypes.append(dtype)
            if t in self.producer:
                self.graph.edges.append(Edge(self.producer[t], nid, t, shape, dtype))
        for t in onode.output:
            if not t:
                continue
            shape, dtype = self.info.get(t, (None, None))
            node.outputs.append(t)
            node.output_shapes.append(shape)
            node.output_dtypes.append(dtype)
            self.producer[t] = nid
        self.graph.nodes.append(node)

    def add_outputs(self, g: Any) -> None:
        for vi in g.output:
            shape, dtype = self.info.get(vi.name, (None, None))
            node = Node(
                f"output:{vi.name}",
                "output",
                vi.name,
                inputs=[vi.name],
                input_shapes=[shape],
                input_dtypes=[dtype],
            )
            if vi.name in self.producer:
                self.graph.edges.append(
                    Edge(self.producer[vi.name], node.id, vi.name, shape, dtype)
                )
            self.graph.nodes.append(node)
            self.graph.outputs.append(node.id)
