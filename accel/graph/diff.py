"""Structural diff of two graphs: what an optimization did to the model.

Nodes are matched by module path and (normalised) op, in execution order, so a
torch graph can be diffed against its ONNX export too. Unmatched original nodes
next to a surviving node are reported as *fused* into it (conv + bn -> conv,
conv + relu -> fused conv) when they are ops a fusion swallows; the others are
*removed*. Matched nodes whose output dtype changed (fp16, int8 ...) are listed as
``dtype_changed``; matched nodes whose op changed (Linear -> quantized linear) as
``op_changed``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from accel.graph.model import Graph, Node

# Aliases so aten, ONNX and module names of one op compare equal.
_ALIASES = {
    "convolution": "conv",
    "conv1d": "conv",
    "conv2d": "conv",
    "conv3d": "conv",
    "batchnorm": "batchnorm",
    "batchnormalization": "batchnorm",
    "batchnorm2d": "batchnorm",
    "batchnorm1d": "batchnorm",
    "nativebatchnormlegitnotraining": "batchnorm",
    "linear": "linear",
    "gemm": "linear",
    "addmm": "linear",
    "layernorm": "layernorm",
    "layernormalization": "layernorm",
    "nativelayernorm": "layernorm",
    "scaleddotproductattention": "attention",
    "softmax": "softmax",
    "gelu": "gelu",
    "relu": "relu",
    "add": "add",
    "matmul": "matmul",
    "mm": "matmul",
    "bmm": "matmul",
    "embedding": "embedding",
    "gather": "embedding",
}

# Ops that a fusion absorbs into a neighbouring op.
FUSIBLE = {
    "batchnorm",
    "relu",
    "relu6",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "hardtanh",
    "hardswish",
    "clip",
    "clamp",
    "add",
    "mul",
    "div",
    "sub",
    "pad",
    "constantpad",
    "layernorm",
    "softmax",
    "transpose",
    "reshape",
    "view",
    "permute",
    "unsqueeze",
    "squeeze",
    "cast",
    "to",
    "copy",
    "t",
}


def normalize_op(op: str) -> str:
    """``aten.conv2d`` / ``Conv`` / ``Conv2d`` -> ``conv``."""
    parts = op.split(".")
    # aten.conv2d.default -> conv2d; com.microsoft.FusedConv -> FusedConv
    base = parts[1] if len(parts) >= 2 and parts[0] in ("aten", "prims", "torch") else parts[-1]
    base = base.lower()
    base = re.sub(r"[^a-z0-9]", "", base)
    return _ALIASES.get(base, base)


@dataclass
class NodeChange:
    a: str  # node id in the original graph
    b: str  # node id in the optimized graph
    before: Any
    after: Any


@dataclass
class GraphDiff:
    """Original (``a``) vs optimized (``b``) graph; ids refer to each graph's nodes."""

    matched: dict[str, str] = field(default_factory=dict)  # a id -> b id
    added: list[str] = field(default_factory=list)  # b ids
    removed: list[str] = field(default_factory=list)  # a ids, gone without a fusion
    fused: dict[str, str] = field(default_factory=dict)  # a id -> b id it was fused into
    dtype_changed: list[NodeChange] = field(default_factory=list)
    op_changed: list[NodeChange] = field(default_factory=list)
    params_before: int = 0
    params_after: int = 0

    @property
    def unchanged(self) -> bool:
        return not (
            self.added or self.removed or self.fused or self.dtype_changed or self.op_changed
        )

    def summary(self) -> str:
        parts = [
            f"{len(self.matched)} matched",
            f"{len(self.added)} added",
            f"{len(self.removed)} removed",
            f"{len(self.fused)} fused",
            f"{len(self.dtype_changed)} dtype changed",
            f"{len(self.op_changed)} op changed",
        ]
        if self.params_before != self.params_after:
            parts.append(f"params {self.params_before} -> {self.params_after}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GraphDiff:
        d = dict(d)
        d["dtype_changed"] = [NodeChange(**c) for c in d.get("dtype_changed", [])]
        d["op_changed"] = [NodeChange(**c) for c in d.get("op_changed", [])]
        return cls(**d)


def _ops(g: Graph) -> list[Node]:
    return [n for n in g.nodes if n.op not in ("input", "output")]


def _fusions(a: Graph, unmatched: list[Node], out: GraphDiff) -> None:
    """Each unmatched node of ``a``: fused into its nearest matched neighbour, or removed."""
    preds, succs = a.predecessors(), a.successors()
    for n in unmatched:
        if normalize_op(n.op) not in FUSIBLE:
            out.removed.append(n.id)
            continue
        into = None
        for p in preds.get(n.id, []):
            if p in out.matched:
                into = out.matched[p]
            elif p in out.fused:
                into = out.fused[p]
            if into:
                break
        if into is None:
            for s in succs.get(n.id, []):
                if s in out.matched and normalize_op(a.node(s).op) in ("conv", "linear", "matmul"):
                    into = out.matched[s]  # e.g. pad folded into the following conv
                    break
        if into is None:
            out.removed.append(n.id)
        else:
            out.fused[n.id] = into


def diff_graphs(a: Graph, b: Graph) -> GraphDiff:
    """What changed from graph ``a`` (original) to graph ``b`` (optimized)."""
    out = GraphDiff(params_before=a.num_params, params_after=b.num_params)
    b_by: dict[tuple[str, str], list[Node]] = {}
    for n in _ops(b):
        b_by.setdefault((n.module_path, normalize_op(n.op)), []).append(n)
    used: set[str] = set()
    unmatched_a: list[Node] = []
    for n in _ops(a):
        cands = b_by.get((n.module_path, normalize_op(n.op)), [])
        while cands and cands[0].id in used:
            cands.pop(0)
        if cands:
            m = cands.pop(0)
            used.add(m.id)
            out.matched[n.id] = m.id
        else:
            unmatched_a.append(n)
    # Second chance: same module, different op (quantized linear, fused conv named after bn).
    b_left_by_path: dict[str, list[Node]] = {}
    for n in _ops(b):
        if n.id not in used:
            b_left_by_path.setdefault(n.module_path, []).append(n)
    still: list[Node] = []
    for n in unmatched_a:
        left = b_left_by_path.get(n.module_path)
        if left and normalize_op(n.op) not in FUSIBLE:
            m = left.pop(0)
            used.add(m.id)
            out.matched[n.id] = m.id
            out.op_changed.append(NodeChange(n.id, m.id, n.op, m.op))
        else:
            still.append(n)
    for n in still:
        left = b_left_by_path.get(n.module_path)
        if left:  # a fusible op turned into something else in its own module
            m = left.pop(0)
            used.add(m.id)
            out.matched[n.id] = m.id
            out.op_changed.append(NodeChange(n.id, m.id, n.op, m.op))
    _fusions(a, [n for n in unmatched_a if n.id not in out.matched], out)
    out.added = [n.id for n in _ops(b) if n.id not in used]
    for aid, bid in out.matched.items():
        na, nb = a.node(aid), b.node(bid)
        da = [d for d in na.output_dtypes if d]
        db = [d for d in nb.output_dtypes if d]
        if da and db and da[0] != db[0]:
            out.dtype_changed.append(NodeChange(aid, bid, da[0], db[0]))
    return out
