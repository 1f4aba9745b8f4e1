"""Build a ``Graph`` from a PyTorch model.

Order of attempts: ``torch.export`` (aten ops, ``nn_module_stack`` gives each op's
module path), then ``torch.fx.symbolic_trace`` (module calls and functions, shapes by
running it), then a module-level graph recorded with forward hooks (leaf modules in
call order). Each fallback records why the better one failed in ``graph.notes`` and
``graph.fallback_reason``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from accel.graph.model import ROOT, Edge, Graph, Node, _shape_json

log = logging.getLogger(__name__)

# Ops that only rename or select outputs; folded into edges.
_GETITEM_NAMES = {"getitem", "<built-in function getitem>"}


def graph_from_torch(
    model: Any,
    inputs: Mapping[str, Any] | tuple | None = None,
    *,
    method: str = "auto",
    name: str = "",
) -> Graph:
    """Graph of an ``nn.Module`` (or a torch-kind ``LoadedModel``) run on sample ``inputs``.

    ``inputs``: dict name -> tensor (the InputSpec's sample) or a tuple of positional
    tensors; defaults to ``model.example_inputs()`` for a ``LoadedModel``. ``method``:
    ``"auto"`` (export, then fx, then hooks), ``"export"``, ``"fx"`` or ``"modules"``.
    """
    import torch

    module = getattr(model, "module", model)
    if not isinstance(module, torch.nn.Module):
        raise TypeError(
            f"graph_from_torch needs an nn.Module or torch LoadedModel, not {type(model)}"
        )
    if inputs is None:
        if not hasattr(model, "example_inputs"):
            raise ValueError("pass sample inputs (dict name -> tensor) for a bare nn.Module")
        inputs = model.example_inputs()
    if isinstance(inputs, Mapping) and hasattr(model, "prepare_inputs"):
        inputs = model.prepare_inputs(inputs)  # dtype casts of an fp16/bf16 model
    if isinstance(inputs, Mapping):
        names = list(inputs)
        args = tuple(inputs.values())
    else:
        args = tuple(inputs)
        names = [f"input_{i}" for i in range(len(args))]
    name = name or type(module).__name__
    types = {p: type(m).__name__ for p, m in module.named_modules()}

    order = {"auto": ["export", "fx", "modules"]}.get(method, [method])
    reasons: list[str] = []
    for m in order:
        builder = {"export": _from_export, "fx": _from_fx, "modules": _from_hooks}.get(m)
        if builder is None:
            raise ValueError(f"unknown method {m!r}; use auto, export, fx or modules")
        try:
            graph, stack_types = builder(module, args, names)
        except Exception as exc:  # any tracing failure: try the next method
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            reason = f"{m} failed: {type(exc).__name__}: {first}"[:500]
            log.info("graph_from_torch: %s", reason)
            reasons.append(reason)
            if m == order[-1]:
                raise
            continue
        graph.name = name
        # Class names recorded while tracing win: a loaded .pt2 is a flat GraphModule.
        graph.build_groups({**types, **stack_types})
        if reasons:
            graph.notes.extend(reasons)
            graph.fallback_reason = reasons[0]
        return graph
    raise AssertionError("unreachable")


def _meta_shape_dtype(val: Any) -> tuple[list | None, str | None]:
    import torch

    if isinstance(val, torch.Tensor):
        return _shape_json(val.shape), str(val.dtype).removeprefix("torch.")
    return None, None


def _plain(v: Any, depth: int = 0) -> Any:
    """Attribute value as JSON: scalars, short lists, else its repr."""
    import torch

    if isinstance(v, bool | int | float | str) or v is None:
        return v
    if isinstance(v, torch.dtype | torch.device | torch.memory_format | torch.layout):
        return str(v).removeprefix("torch.")
    if isinstance(v, list | tuple) and depth < 2 and len(v) <= 16:
        return [_plain(x, depth + 1) for x in v]
    return repr(v)[:80]


def _op_name(target: Any) -> str:
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name.split("::")[-1]
    return getattr(target, "__name__", str(target))


def _from_export(module: Any, args: tuple, names: list[str]) -> tuple[Graph, dict[str, str]]:
    import torch

    ep = torch.export.export(module, args, strict=False)
    build = _ExportBuilder(ep.graph_signature, names)
    for fx in ep.graph.nodes:
        if fx.op == "placeholder":
            build.placeholder(fx)
        elif fx.op == "output":
            build.output(fx)
        elif fx.op != "call_function":
            continue
        elif (
            _op_name(fx.target) in _GETITEM_NAMES and fx.args and fx.args[0].name in build.producer
        ):
            build.getitem(fx)
        else:
            build.call(fx)
    return build.graph, build.stack_types


class _ExportBuilder:
    """Adds the nodes of an exported program's graph to a Graph: user inputs, outputs and
    calls (getitem folded into its producer; parameters, buffers and constants become
    the params of the calls that use them)."""

    def __init__(self, sig: Any, names: list[str]) -> None:
        self.params = dict(sig.inputs_to_parameters)
        self.buffers = dict(sig.inputs_to_buffers)
        self.consts = set(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
        self.user_inputs = list(sig.user_inputs)
        self.names = names
        self.graph = Graph(source="torch.export")
        # fx node name -> (producer node id, output index) for tensors, getitem folded.
        self.producer: dict[str, tuple[str, int]] = {}
        self.weights: dict[str, tuple[str, int]] = {}  # placeholder -> (fqn, numel)
        self.counted: set[str] = set()
        self.stack_types: dict[str, str] = {}

    def placeholder(self, fx: Any) -> None:
        val = fx.meta.get("val")
        if fx.name in self.params or fx.name in self.buffers or fx.name in self.consts:
            fqn = self.params.get(fx.name) or self.buffers.get(fx.name) or fx.name
            numel = int(val.numel()) if fx.name in self.params and hasattr(val, "numel") else 0
            self.weights[fx.name] = (fqn, numel)
            return
        graph = self.graph
        if fx.name in self.user_inputs:
            idx = self.user_inputs.index(fx.name)
        else:
            idx = len(graph.inputs)
        label = self.names[idx] if idx < len(self.names) else fx.name
        shape, dtype = _meta_shape_dtype(val)
        node = Node(
            id=f"input:{label}",
            op="input",
            name=label,
            outputs=[fx.name],
            output_shapes=[shape],
            output_dtypes=[dtype],
        )
        graph.nodes.append(node)
        graph.inputs.append(node.id)
        self.producer[fx.name] = (node.id, 0)

    def output(self, fx: Any) -> None:
        import torch

        outs = fx.args[0] if fx.args else ()
        flat = list(outs) if isinstance(outs, list | tuple) else [outs]
        for i, o in enumerate(flat):
            if not isinstance(o, torch.fx.Node) or o.name not in self.producer:
                continue
            src, _ = self.producer[o.name]
            shape, dtype = _meta_shape_dtype(o.meta.get("val"))
            oname = f"output_{i}" if len(flat) > 1 else "output"
            node = Node(
                id=f"output:{oname}",
                op="output",
                name=oname,
                inputs=[o.name],
                input_shapes=[shape],
                input_dtypes=[dtype],
            )
            self.graph.nodes.append(node)
            self.graph.outputs.append(node.id)
            self.graph.edges.append(Edge(src, node.id, o.name, shape, dtype))

    def getitem(self, fx: Any) -> None:
        """An element of a multi-output call: one more output of that call's node."""
        src, _ = self.producer[fx.args[0].name]
        self.producer[fx.name] = (src, int(fx.args[1]) if isinstance(fx.args[1], int) else 0)
        node = self.graph.node(src)
        shape, dtype = _meta_shape_dtype(fx.meta.get("val"))
        node.outputs.append(fx.name)
        node.output_shapes.append(shape)
        node.output_dtypes.append(dtype)

    def call(self, fx: Any) -> None:
        import torch

        val = fx.meta.get("val")
        node = Node(
            id=fx.name, op=_op_name(fx.target), name=fx.name, module_path=self._module_path(fx)
        )
        node.attributes["target"] = str(fx.target)
        for i, a in enumerate(fx.args):
            if not isinstance(a, torch.fx.Node) and not (
                isinstance(a, list | tuple) and any(isinstance(x, torch.fx.Node) for x in a)
            ):
                node.attributes[f"arg{i}"] = _plain(a)
        for k, a in fx.kwargs.items():
            if not isinstance(a, torch.fx.Node):
                node.attributes[k] = _plain(a)
        self._connect_inputs(fx, node)
        if isinstance(val, torch.Tensor):
            shape, dtype = _meta_shape_dtype(val)
            node.outputs.append(fx.name)
            node.output_shapes.append(shape)
            node.output_dtypes.append(dtype)
        self.graph.nodes.append(node)
        self.producer[fx.name] = (node.id, 0)

    def _module_path(self, fx: Any) -> str:
        """The innermost module of the call's nn_module_stack (recording the class names of
        the stack's modules, for modules the traced object no longer has: .pt2)."""
        stack = fx.meta.get("nn_module_stack") or {}
        path = ROOT
        for entry in stack.values():
            if isinstance(entry, tuple) and len(entry) >= 2:
                self.stack_types.setdefault(entry[0], str(entry[1]).rsplit(".", 1)[-1])
        if stack:
            last = list(stack.values())[-1]
            path = last[0] if isinstance(last, tuple) else str(last)
        return path

    def _connect_inputs(self, fx: Any, node: Node) -> None:
        """Weights become params (a tied weight counts once, on its first user); tensors
        from other nodes become inputs and one edge per (source, tensor)."""
        seen_src: set[tuple[str, str]] = set()
        for inp in fx.all_input_nodes:
            if inp.name in self.weights:
                fqn, numel = self.weights[inp.name]
                node.params.append(fqn)
                if fqn not in self.counted:
                    self.counted.add(fqn)
                    node.num_params += numel
                continue
            if inp.name not in self.producer:
                continue
            src, _ = self.producer[inp.name]
            shape, dtype = _meta_shape_dtype(inp.meta.get("val"))
            node.inputs.append(inp.name)
            node.input_shapes.append(shape)
            node.input_dtypes.append(dtype)
            if (src, inp.name) not in seen_src:
                seen_src.add((src, inp.name))
                self.graph.edges.append(Edge(src, node.id, inp.name, shape, dtype))


def _from_fx(module: Any, args: tuple, names: list[str]) -> tuple[Graph, dict[str, str]]:
    import torch
    from torch.fx.passes.shape_prop import ShapeProp

    gm = torch.fx.symbolic_trace(module)
    ShapeProp(gm).propagate(*args)
    named = dict(gm.named_modules())
    param_numel = {n: p.numel() for n, p in gm.named_parameters()}
    graph = Graph(source="fx")
    producer: dict[str, str] = {}
    placeholders = 0
    for fx in gm.graph.nodes:
        tm = fx.meta.get("tensor_meta")
        shape = _shape_json(tm.shape) if hasattr(tm, "shape") else None
        dtype = str(tm.dtype).removeprefix("torch.") if hasattr(tm, "dtype") else None
        if fx.op == "placeholder":
            label = names[placeholders] if placeholders < len(names) else fx.name
            placeholders += 1
            node = Node(f"input:{label}", "input", label, outputs=[fx.name])
            node.output_shapes, node.output_dtypes = [shape], [dtype]
            graph.inputs.append(node.id)
        elif fx.op == "output":
            node = Node("output:output", "output", "output")
            graph.outputs.append(node.id)
        elif fx.op == "get_attr":
            continue
        else:
            if fx.op == "call_module":
                path = str(fx.target)
                op = type(named[path]).__name__
                numel = sum(v for k, v in param_numel.items() if k.startswith(path + "."))
                params = [k for k in param_numel if k.startswith(path + ".")]
            else:
                stack = fx.meta.get("nn_module_stack") or {}
                path = ROOT
                if stack:
                    last = list(stack.values())[-1]
                    path = last[0] if isinstance(last, tuple) else str(last)
                op, numel, params = _op_name(fx.target), 0, []
            node = Node(fx.name, op, fx.name, path, num_params=numel, params=params)
            node.outputs, node.output_shapes, node.output_dtypes = [fx.name], [shape], [dtype]
        for inp in fx.all_input_nodes:
            if inp.name in producer:
                itm = inp.meta.get("tensor_meta")
                ishape = _shape_json(itm.shape) if hasattr(itm, "shape") else None
                idtype = str(itm.dtype).removeprefix("torch.") if hasattr(itm, "dtype") else None
                node.inputs.append(inp.name)
                node.input_shapes.append(ishape)
                node.input_dtypes.append(idtype)
                graph.edges.append(Edge(producer[inp.name], node.id, inp.name, ishape, idtype))
        producer[fx.name] = node.id
        graph.nodes.append(node)
    return graph, {}


def _from_hooks(module: Any, args: tuple, names: list[str]) -> tuple[Graph, dict[str, str]]:
    """Leaf modules in call order; edges follow tensor identity where it is known."""
    import torch

    rec = _HookRecorder(names, args)
    handles = [
        m.register_forward_hook(rec.hook(p, m))
        for p, m in module.named_modules()
        if p and not list(m.children())
    ]
    try:
        with torch.no_grad():
            out = module(*args)
    finally:
        for h in handles:
            h.remove()
    rec.add_outputs(out)
    if rec.approx:
        rec.graph.notes.append(
            "module-level graph: some inputs came from code between modules; "
            "those edges link to the previously called module"
        )
    return rec.graph, {}


def _tensors(x: Any) -> list[Any]:
    """The tensors in a module's inputs or outputs (nested lists, tuples, mappings)."""
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, Mapping):
        return [t for v in x.values() for t in _tensors(v)]
    return []


class _HookRecorder:
    """Builds the module-level graph from forward hooks on the leaf modules."""

    def __init__(self, names: list[str], args: tuple) -> None:
        import torch

        self.graph = Graph(source="modules")
        self.producer: dict[int, tuple[str, str]] = {}  # id(tensor) -> (node id, tensor name)
        self.keep: list[Any] = []  # keep tensors alive so their ids stay unique during the run
        for label, a in zip(names, args):
            node = Node(f"input:{label}", "input", label, outputs=[label])
            if isinstance(a, torch.Tensor):
                node.output_shapes = [_shape_json(a.shape)]
                node.output_dtypes = [str(a.dtype)[6:]]
                self.producer[id(a)] = (node.id, label)
            self.graph.nodes.append(node)
            self.graph.inputs.append(node.id)
        self.calls: dict[str, int] = {}
        self.last: list[str] = [self.graph.inputs[-1]] if self.graph.inputs else []
        self.approx = False  # an edge was guessed (input made by code between modules)

    def hook(self, path: str, mod: Any) -> Any:
        def fn(_m: Any, inp: Any, out: Any) -> None:
            self.record(path, mod, inp, out)

        return fn

    def record(self, path: str, mod: Any, inp: Any, out: Any) -> None:
        """One call of a leaf module: its node, edges from its inputs' producers."""
        k = self.calls.get(path, 0)
        self.calls[path] = k + 1
        nid = path if k == 0 else f"{path}#{k}"
        node = Node(
            nid,
            type(mod).__name__,
            path.rsplit(".", 1)[-1],
            path,
            num_params=sum(p.numel() for p in mod.parameters(recurse=False)) if k == 0 else 0,
            params=[f"{path}.{n}" for n, _ in mod.named_parameters(recurse=False)],
        )
        linked = False
        for t in _tensors(inp):
            node.input_shapes.append(_shape_json(t.shape))
            node.input_dtypes.append(str(t.dtype)[6:])
            if id(t) in self.producer:
                src, tname = self.producer[id(t)]
                node.inputs.append(tname)
                self.graph.edges.append(
                    Edge(src, nid, tname, _shape_json(t.shape), str(t.dtype)[6:])
                )
                linked = True
        if not linked and self.last:
            # Input made by a function between modules: assume the previous module fed it.
            self.approx = True
            self.graph.edges.append(Edge(self.last[-1], nid, "", None, None))
        for i, t in enumerate(_tensors(out)):
            tname = f"{nid}:{i}"
            node.outputs.append(tname)
            node.output_shapes.append(_shape_json(t.shape))
            node.output_dtypes.append(str(t.dtype)[6:])
            self.producer[id(t)] = (nid, tname)
            self.keep.append(t)
        self.graph.nodes.append(node)
        self.last.append(nid)

    def add_outputs(self, out: Any) -> None:
        graph, last = self.graph, self.last
        for i, t in enumerate(_tensors(out)):
            oname = "output" if len(_tensors(out)) == 1 else f"output_{i}"
            node = Node(f"output:{oname}", "output", oname)
            src = self.producer.get(id(t), (last[-1], ""))[0] if last else None
            if src is not None:
                graph.edges.append(Edge(src, node.id, "", _shape_json(t.shape), str(t.dtype)[6:]))
            graph.nodes.append(node)
            graph.outputs.append(node.id)
