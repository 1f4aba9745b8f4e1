"""The graph of an OpenVINO model: its ops, constant subgraphs folded into their
consumers as parameters, module paths from the op names."""

from __future__ import annotations

from typing import Any

from accel.runtimes.openvino.ir import _OV_DTYPES, module_path_of


def graph_from_ov(ov_model: Any, *, name: str = "") -> Any:
    """Graph of an ``ov.Model``: its ops (constant subgraphs folded into their consumers as
    parameters), module paths from the op names (ops without one join the module of the
    op they feed)."""
    from accel.graph.model import Graph

    graph = Graph(name=name or ov_model.get_friendly_name() or "openvino", source="openvino")
    ops = list(ov_model.get_ordered_ops())
    const, numel = _ov_constants(ops)
    paths = _ov_module_paths(ops, const)
    for op in ops:
        nm = op.get_friendly_name()
        if nm in const:
            continue
        if op.get_type_name() == "Parameter":
            node = _ov_input_node(op)
            graph.nodes.append(node)
            graph.inputs.append(node.id)
        else:
            _add_ov_op(graph, op, const, numel, paths)
    graph.build_groups()
    return graph


def _ov_shape(port: Any) -> list[int | str]:
    return [d.get_length() if d.is_static else "?" for d in port.get_partial_shape()]


def _ov_dtype(port: Any) -> str:
    return _OV_DTYPES.get(port.get_element_type().get_type_name(), str(port.get_element_type()))


def _ov_constants(ops: list[Any]) -> tuple[set[str], dict[str, int]]:
    """Names of the constant ops (constants and ops computed from constants only, such as
    weight decompression) and their element counts (0 for non-float constants)."""
    const: set[str] = set()
    numel: dict[str, int] = {}
    for op in ops:
        t = op.get_type_name()
        nm = op.get_friendly_name()
        if t == "Constant":
            const.add(nm)
            shape = op.get_output_partial_shape(0)
            size = 1
            if shape.is_static:
                for d in shape.to_shape():
                    size *= int(d)
            numel[nm] = size if op.get_output_element_type(0).is_real() else 0
        elif (
            t != "Parameter"
            and op.inputs()
            and all(
                i.get_source_output().get_node().get_friendly_name() in const for i in op.inputs()
            )
        ):
            const.add(nm)  # weight decompression (Convert, Multiply of constants)
            numel[nm] = max(
                numel.get(i.get_source_output().get_node().get_friendly_name(), 0)
                for i in op.inputs()
            )
    return const, numel


def _ov_module_paths(ops: list[Any], const: set[str]) -> dict[str, str]:
    """Module paths: named ops carry one; unnamed ones take the module of their first named
    consumer's parent (a fused conv feeding "layer1.0.bn1" belongs in "layer1.0")."""
    from accel.graph.model import parent_path

    paths = {op.get_friendly_name(): module_path_of(op.get_friendly_name()) for op in ops}
    for op in reversed(ops):
        nm = op.get_friendly_name()
        if paths[nm] or nm in const:
            continue
        for out in op.outputs():
            for tgt in out.get_target_inputs():
                p = paths.get(tgt.get_node().get_friendly_name(), "")
                if p:
                    own = module_path_of(tgt.get_node().get_friendly_name())
                    paths[nm] = parent_path(p) if own else p
                    break
            if paths[nm]:
                break
    return paths


def _ov_input_node(op: Any) -> Any:
    """The graph's input node for a Parameter op."""
    from accel.graph.model import Node

    out = op.output(0)
    label = out.get_any_name() if out.get_names() else op.get_friendly_name()
    return Node(
        f"input:{label}",
        "input",
        label,
        outputs=[f"{op.get_friendly_name()}:0"],
        output_shapes=[_ov_shape(out)],
        output_dtypes=[_ov_dtype(out)],
    )


def _add_ov_op(
    graph: Any, op: Any, const: set[str], numel: dict[str, int], paths: dict[str, str]
) -> None:
    """An op's node (a Result: an output node) and its incoming edges; constant inputs
    become the node's parameters."""
    from accel.graph.model import Edge, Node

    nm = op.get_friendly_name()
    is_result = op.get_type_name() == "Result"
    node = Node(
        f"output:{nm}" if is_result else nm, "output" if is_result else op.get_type_name(), nm
    )
    node.module_path = "" if is_result else paths.get(nm, "")
    for inp in op.inputs():
        src = inp.get_source_output()
        sname = src.get_node().get_friendly_name()
        if sname in const:
            node.params.append(sname)
            node.num_params += numel.get(sname, 0)
            continue
        tensor = f"{sname}:{src.get_index()}"
        node.inputs.append(tensor)
        node.input_shapes.append(_ov_shape(src))
        node.input_dtypes.append(_ov_dtype(src))
        src_node = src.get_node()
        src_id = (
            f"input:{src.get_any_name() if src.get_names() else sname}"
            if src_node.get_type_name() == "Parameter"
            else sname
        )
        graph.edges.append(Edge(src_id, node.id, tensor, _ov_shape(src), _ov_dtype(src)))
    if not is_result:
        for out in op.outputs():
            node.outputs.append(f"{nm}:{out.get_index()}")
            node.output_shapes.append(_ov_shape(out))
            node.output_dtypes.append(_ov_dtype(out))
    graph.nodes.append(node)
    if is_result:
        graph.outputs.append(node.id)
