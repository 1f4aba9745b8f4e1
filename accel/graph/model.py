"""The graph model: nodes, edges and module groups, as plain JSON-friendly dataclasses.

A ``Graph`` is what the graph view draws, what profile rows and per-layer parity
results are painted on, and what crosses the worker boundary (``to_dict()``).
Every node carries the dotted ``module_path`` of the ``nn.Module`` it came from
(``""`` for the top-level module), so any per-module value maps onto nodes and
groups. Groups form a tree keyed by module path; the root group has id ``""``.

Views: ``graph.view(expanded)`` shows every group that is not expanded as one
node (id ``"group:<path>"``, op ``"group"``) with edges aggregated between the
visible units; ``collapsed()`` expands only the root, ``expand(view, path)``
opens one more group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

ROOT = ""
GROUP_PREFIX = "group:"

Shape = list[int | str] | None


def _shape_json(shape: Any) -> Shape:
    if shape is None:
        return None
    return [d if isinstance(d, int) else str(d) for d in shape]


def parent_path(path: str) -> str:
    """``"a.b.c"`` -> ``"a.b"``; top-level paths -> ``""`` (the root)."""
    return path.rsplit(".", 1)[0] if "." in path else ROOT


def ancestors(path: str) -> list[str]:
    """Module paths from the root down to ``path`` inclusive: ``"a.b"`` -> ``["", "a", "a.b"]``."""
    if path == ROOT:
        return [ROOT]
    parts = path.split(".")
    return [ROOT] + [".".join(parts[: i + 1]) for i in range(len(parts))]


def is_within(path: str, group: str) -> bool:
    """True when module ``path`` is ``group`` or lies below it."""
    return group == ROOT or path == group or path.startswith(group + ".")


@dataclass
class Node:
    """One operation (or graph input/output, op ``"input"``/``"output"``)."""

    id: str
    op: str
    name: str = ""
    module_path: str = ROOT
    inputs: list[str] = field(default_factory=list)  # tensor names consumed
    outputs: list[str] = field(default_factory=list)  # tensor names produced
    input_shapes: list[Shape] = field(default_factory=list)
    input_dtypes: list[str | None] = field(default_factory=list)
    output_shapes: list[Shape] = field(default_factory=list)
    output_dtypes: list[str | None] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    num_params: int = 0
    # Names of the parameters/initializers this node consumes (weights are not drawn as nodes).
    params: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Node:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def label(self) -> str:
        return self.name or self.op


@dataclass
class Edge:
    """A tensor flowing from node ``src`` to node ``dst``."""

    src: str
    dst: str
    tensor: str = ""
    shape: Shape = None
    dtype: str | None = None
    count: int = 1  # how many tensors an aggregated (group-level) edge stands for

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Edge:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class Group:
    """A module in the hierarchy: ``id`` is its dotted path, ``""`` for the root."""

    id: str
    type: str = ""  # module class name, e.g. "Conv2d"
    parent: str | None = None
    children: list[str] = field(default_factory=list)  # child group ids, in call order
    nodes: list[str] = field(default_factory=list)  # node ids directly in this group

    @property
    def name(self) -> str:
        return self.id.rsplit(".", 1)[-1] if self.id else "(root)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Group:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class Graph:
    """Nodes in execution (topological) order, edges between them, the module-group tree."""

    name: str = ""
    # How it was built: "torch.export", "fx", "modules" (forward hooks), "onnx", "view".
    source: str = ""
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    groups: dict[str, Group] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)  # node ids of graph inputs
    outputs: list[str] = field(default_factory=list)  # node ids of graph outputs
    notes: list[str] = field(default_factory=list)
    fallback_reason: str | None = None
    # For views: the groups shown open (the root always is); empty for a full graph.
    expanded: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._index: dict[str, Node] | None = None
        self._producers: dict[str, str] | None = None  # tensor name -> node id

    # ---- serialization ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [e.to_dict() for e in self.edges],
            "groups": {k: g.to_dict() for k, g in self.groups.items()},
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "notes": list(self.notes),
            "fallback_reason": self.fallback_reason,
            "expanded": list(self.expanded),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Graph:
        return cls(
            name=d.get("name", ""),
            source=d.get("source", ""),
            nodes=[Node.from_dict(n) for n in d.get("nodes", [])],
            edges=[Edge.from_dict(e) for e in d.get("edges", [])],
            groups={k: Group.from_dict(g) for k, g in d.get("groups", {}).items()},
            inputs=list(d.get("inputs", [])),
            outputs=list(d.get("outputs", [])),
            notes=list(d.get("notes", [])),
            fallback_reason=d.get("fallback_reason"),
            expanded=list(d.get("expanded", [])),
        )

    # ---- lookup -------------------------------------------------------------------------

    def node(self, node_id: str) -> Node:
        if self._index is None or len(self._index) != len(self.nodes):
            self._index = {n.id: n for n in self.nodes}
        return self._index[node_id]

    def __contains__(self, node_id: object) -> bool:
        try:
            self.node(node_id)  # type: ignore[arg-type]
        except (KeyError, TypeError):
            return False
        return True

    def resolve_node(self, key: str) -> str | None:
        """Node id for a name a profiler or runtime uses for it, or None.

        Accepts the node id, ``"fused <id>"`` (ONNX Runtime's fused nodes) and names built
        from a node's output tensor (``/stem/stem.2/Relu_output_0_nchwc``: a node ONNX
        Runtime made from the one producing ``/stem/stem.2/Relu_output_0``).
        """
        if key in self:
            return key
        key = key.removeprefix("fused ")
        if key in self:
            return key
        producers = self._producers
        if producers is None or len(producers) < len(self.nodes):
            producers = {t: n.id for n in self.nodes for t in n.outputs}
            self._producers = producers
        cand = key
        while cand:
            if cand in self:
                return cand
            if cand in producers:
                return producers[cand]
            if "_" not in cand:
                break
            cand = cand.rsplit("_", 1)[0]
        return None

    @property
    def num_params(self) -> int:
        return sum(n.num_params for n in self.nodes)

    def predecessors(self) -> dict[str, list[str]]:
        preds: dict[str, list[str]] = {n.id: [] for n in self.nodes}
        for e in self.edges:
            preds.setdefault(e.dst, []).append(e.src)
        return preds

    def successors(self) -> dict[str, list[str]]:
        succ: dict[str, list[str]] = {n.id: [] for n in self.nodes}
        for e in self.edges:
            succ.setdefault(e.src, []).append(e.dst)
        return succ

    def nodes_of_group(self, group: str, recursive: bool = True) -> list[Node]:
        """Nodes directly in ``group`` or (``recursive``) anywhere below it, in graph order."""
        if recursive:
            return [n for n in self.nodes if is_within(n.module_path, group)]
        return [n for n in self.nodes if n.module_path == group]

    def nodes_for_module(self, path: str) -> list[Node]:
        """Nodes that implement module ``path`` (the module itself and its submodules).

        Graph inputs/outputs are never part of a module.
        """
        return [
            n
            for n in self.nodes
            if n.op not in ("input", "output") and is_within(n.module_path, path)
        ]

    def execution_order(self) -> list[str]:
        """Module paths (groups other than the root) in the order they first run."""
        seen: dict[str, None] = {}
        for n in self.nodes:
            for p in ancestors(n.module_path)[1:]:
                seen.setdefault(p, None)
        return list(seen)

    # ---- groups -------------------------------------------------------------------------

    def build_groups(self, types: Mapping[str, str] | None = None) -> None:
        """(Re)build the group tree from the nodes' module paths (children in first-use order)."""
        types = dict(types or {})
        groups: dict[str, Group] = {ROOT: Group(ROOT, types.get(ROOT, ""), None)}
        for n in self.nodes:
            chain = ancestors(n.module_path)
            for parent, child in zip(chain, chain[1:]):
                if child not in groups:
                    groups[child] = Group(child, types.get(child, ""), parent)
                    groups[parent].children.append(child)
            groups[chain[-1]].nodes.append(n.id)
        self.groups = groups

    def subgroups(self, group: str) -> list[str]:
        """All groups strictly below ``group`` (depth-first, call order)."""
        out: list[str] = []
        stack = list(reversed(self.groups[group].children))
        while stack:
            g = stack.pop()
            out.append(g)
            stack.extend(reversed(self.groups[g].children))
        return out

    # ---- views --------------------------------------------------------------------------

    def unit_of(self, node: Node, expanded: set[str]) -> str:
        """Visible unit of ``node`` when only ``expanded`` groups are open (root always is)."""
        for p in ancestors(node.module_path)[1:]:
            if p not in expanded:
                return GROUP_PREFIX + p
        return node.id

    def view(self, expanded: Iterable[str] = ()) -> Graph:
        """A graph where each non-expanded group is one node and edges are aggregated.

        Opening a group opens its ancestors too (as ``GroupLayouts.layout`` does).

        Group nodes have id ``"group:<path>"``, op ``"group"``, ``module_path`` = the
        group path, the summed parameter count and ``attributes["num_nodes"]``. The
        view keeps the group tree and the original node ids of visible nodes.
        """
        exp = {ROOT}
        for g in expanded:
            exp.update(ancestors(g))  # an open group's ancestors are open too
        unit: dict[str, str] = {}
        units: dict[str, Node] = {}
        for n in self.nodes:
            u = self.unit_of(n, exp)
            unit[n.id] = u
            if u == n.id:
                units[u] = n
                continue
            g = units.get(u)
            if g is None:
                path = u[len(GROUP_PREFIX) :]
                grp = self.groups.get(path)
                g = units[u] = Node(
                    id=u,
                    op="group",
                    name=path.rsplit(".", 1)[-1],
                    module_path=path,
                    attributes={"type": grp.type if grp else "", "num_nodes": 0},
                )
            g.attributes["num_nodes"] += 1
            g.num_params += n.num_params
        v = Graph(
            name=self.name,
            source="view",
            nodes=list(units.values()),
            edges=self._edges_between(unit),
            groups=self.groups,
            inputs=list(self.inputs),
            outputs=list(self.outputs),
            notes=list(self.notes),
            fallback_reason=self.fallback_reason,
            expanded=sorted(exp),
        )
        return v

    def _edges_between(self, unit: dict[str, str]) -> list[Edge]:
        """The edges between the view's units (``unit``: node id -> its unit's id), one per
        pair, counting the distinct tensors that cross."""
        edges: dict[tuple[str, str], Edge] = {}
        for e in self.edges:
            s, d = unit.get(e.src, e.src), unit.get(e.dst, e.dst)
            if s == d:
                continue
            key = (s, d)
            if key in edges:
                agg = edges[key]
                # Count distinct tensors: one output feeding several nodes of a group is one edge.
                if e.tensor not in agg.tensor.split(","):
                    agg.count += 1
                    agg.tensor = f"{agg.tensor},{e.tensor}"
                    agg.shape, agg.dtype = None, agg.dtype if agg.dtype == e.dtype else None
            else:
                edges[key] = Edge(s, d, e.tensor, e.shape, e.dtype, 1)
        return list(edges.values())

    def collapsed(self) -> Graph:
        """Top-level view: every top-level group is one node."""
        return self.view(())

    def expand(self, view: Graph, group: str) -> Graph:
        """``view`` with ``group`` (and its ancestors) opened one level."""
        exp = set(view.expanded) | {ROOT}
        exp.update(ancestors(group))
        return self.view(exp)

    def group_graph(self, group: str, expanded: Iterable[str] = ()) -> Graph:
        """The inside of one group: its member nodes and collapsed child groups only.

        Edges from or to units outside the group are dropped; this is what the layout of
        one group needs.
        """
        exp = set(expanded) | set(ancestors(group))
        full = self.view(exp)
        keep = {
            u.id
            for u in full.nodes
            if (u.op == "group" and parent_path(u.module_path) == group)
            or (u.op != "group" and u.module_path == group)
        }
        return Graph(
            name=group or self.name,
            source="view",
            nodes=[u for u in full.nodes if u.id in keep],
            edges=[e for e in full.edges if e.src in keep and e.dst in keep],
            groups=self.groups,
        )


# ---- painting per-module values ----------------------------------------------------------


def aggregate_by_module(
    graph: Graph,
    values: Mapping[str, float],
    how: str = "sum",
) -> tuple[dict[str, float], dict[str, float]]:
    """Map per-module or per-node values (profile times, parity errors ...) onto nodes and groups.

    ``values`` maps module path -> value (``""`` = root), or node id -> value (ONNX
    profiles are keyed by node name, which is the node's id). Returns ``(per_node,
    per_group)``. A node-keyed value goes to that node. A module value is spread over
    the nodes of the module that no deeper key claims: with ``how="sum"`` (times,
    FLOPs) values are inclusive and the remainder after the submodules' share is split
    evenly, so group totals add up; with ``"max"``/``"mean"`` (errors) every node of
    the module gets the value. A group's value is the sum (or max/mean) over its
    nodes; groups named in ``values`` keep their own value when ``how`` is not
    ``"sum"``. Keys that match no node are ignored.
    """
    if how not in ("sum", "max", "mean"):
        raise ValueError(f"how must be 'sum', 'max' or 'mean', not {how!r}")
    tree = _ModuleTree(graph)
    per_node: dict[str, float] = {}
    module_keys = []
    for key, v in values.items():
        if key in tree.by_path or key in graph.groups:
            module_keys.append(key)
            continue
        nid = graph.resolve_node(key)
        if nid is None or graph.node(nid).op in ("input", "output") or math.isnan(float(v)):
            continue
        # Several runtime nodes can map to one graph node (ONNX Runtime's rewrites): add up.
        if how == "sum":
            per_node[nid] = per_node.get(nid, 0.0) + float(v)
        else:
            per_node[nid] = max(per_node.get(nid, -math.inf), float(v))
    _spread_module_values(tree, values, module_keys, per_node, how)
    per_group = _group_values(graph, per_node, how)
    if how != "sum":
        for path in module_keys:
            v = values[path]
            if path in graph.groups:
                per_group[path] = float(v)
    return per_node, per_group


class _ModuleTree:
    """The graph's nodes by module path (inputs and outputs left out), and the paths below
    each module from the group tree (O(subtree), not O(all paths))."""

    def __init__(self, graph: Graph) -> None:
        self.by_path: dict[str, list[Node]] = {}
        for n in graph.nodes:
            if n.op not in ("input", "output"):
                self.by_path.setdefault(n.module_path, []).append(n)
        children: dict[str, list[str]] = {}
        for p in self.by_path:
            for a, b in zip(ancestors(p), ancestors(p)[1:]):
                lst = children.setdefault(a, [])
                if not lst or lst[-1] != b:
                    lst.append(b)
        self.children = {k: list(dict.fromkeys(v)) for k, v in children.items()}

    def subtree(self, path: str) -> list[Node]:
        """The nodes of module ``path`` and of every module below it."""
        out: list[Node] = []
        stack = [path]
        while stack:
            q = stack.pop()
            out.extend(self.by_path.get(q, ()))
            stack.extend(self.children.get(q, ()))
        return out


def _spread_module_values(
    tree: _ModuleTree,
    values: Mapping[str, float],
    module_keys: list[str],
    per_node: dict[str, float],
    how: str,
) -> None:
    """Give each module's value to its nodes that no deeper key claimed. The most specific
    value wins for a node: the deepest module paths go first."""
    for path in sorted(module_keys, key=lambda p: -(p.count(".") + (p != ROOT))):
        v = float(values[path])
        if math.isnan(v):
            continue
        members = tree.subtree(path)
        free = [n for n in members if n.id not in per_node]
        if not free:
            continue
        if how == "sum":
            # Module values are inclusive (a module's time contains its submodules'):
            # spread what the deeper modules do not account for over the remaining nodes.
            claimed = sum(per_node[n.id] for n in members if n.id in per_node)
            share = max(v - claimed, 0.0) / len(free)
            for n in free:
                per_node[n.id] = share
        else:
            for n in free:
                per_node[n.id] = v


def _group_values(graph: Graph, per_node: dict[str, float], how: str) -> dict[str, float]:
    """Each group's sum (or max, or mean) over its nodes' values."""
    per_group: dict[str, float] = {}
    counts: dict[str, int] = {}
    for nid, v in per_node.items():
        for g in ancestors(graph.node(nid).module_path):
            if how == "max":
                per_group[g] = max(per_group.get(g, -math.inf), v)
            else:
                per_group[g] = per_group.get(g, 0.0) + v
            counts[g] = counts.get(g, 0) + 1
    if how == "mean":
        per_group = {g: s / counts[g] for g, s in per_group.items()}
    return per_group


def paint(view: Graph, graph: Graph, values: Mapping[str, float], how: str = "sum") -> dict:
    """Values for every node of a ``view`` (group nodes get their group's aggregate)."""
    per_node, per_group = aggregate_by_module(graph, values, how)
    out: dict[str, float] = {}
    for n in view.nodes:
        if n.op == "group":
            if n.module_path in per_group:
                out[n.id] = per_group[n.module_path]
        elif n.id in per_node:
            out[n.id] = per_node[n.id]
    return out


def scope_to_module_path(scopes: list[str]) -> str:
    """Join exporter scopes into a dotted module path.

    A scope is either relative (``conv1`` under ``layer1.0``) or qualified by the scope
    before it (``downsample.0`` under ``downsample``; the dynamo exporter's full paths
    ``layer2.0.downsample`` under ``layer2.0``): a qualified one extends the path by
    what it adds.
    """
    path = ROOT
    prev = ""
    for s in scopes:
        if not s:
            continue
        if prev and s.startswith(prev + "."):
            path = path + s[len(prev) :]
        else:
            path = f"{path}.{s}" if path else s
        prev = s
    return path
