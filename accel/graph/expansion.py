"""Which module groups of a graph view are open: the default view, expand/collapse, reveal.

Plain set arithmetic on ``Graph.groups``; the Graph panel keeps the set and asks these
functions how to change it.
"""

from __future__ import annotations

from collections.abc import Iterable

from accel.graph.model import GROUP_PREFIX, ROOT, Graph, ancestors

# Default view: open groups breadth-first while the view stays this small.
DEFAULT_VISIBLE_UNITS = 90


def wrapper_chain(graph: Graph, path: str) -> list[str]:
    """``path`` plus the groups that only wrap one child group below it
    (``blocks.0`` -> ``blocks.0.layers``): opening one box opens them all."""
    chain = [path]
    g = graph.groups.get(path)
    while g is not None and not g.nodes and len(g.children) == 1:
        chain.append(g.children[0])
        g = graph.groups.get(g.children[0])
    return chain


def default_expanded(graph: Graph, budget: int = DEFAULT_VISIBLE_UNITS) -> set[str]:
    """Open groups breadth-first while the view keeps under ``budget`` units; groups
    holding a single op stay closed (opening them adds nothing), wrappers of a single
    group open for free."""
    units = {path: len(g.children) + len(g.nodes) for path, g in graph.groups.items()}
    visible = units.get(ROOT, 0)
    expanded: set[str] = set()
    frontier = list(graph.groups[ROOT].children) if ROOT in graph.groups else []
    while frontier:
        nxt: list[str] = []
        for path in frontier:
            chain = wrapper_chain(graph, path)
            inner = chain[-1]
            n = units.get(inner, 0)
            if n <= 1 and len(chain) == 1:
                continue
            if visible + n - 1 > budget:
                return expanded
            visible += n - 1
            expanded.update(chain)
            nxt.extend(graph.groups[inner].children)
        frontier = nxt
    return expanded


def expand(graph: Graph, expanded: set[str], path: str) -> set[str]:
    """``expanded`` with ``path``, its ancestors and its wrapper chain open."""
    return set(expanded) | set(ancestors(path)[1:]) | set(wrapper_chain(graph, path))


def collapse(expanded: set[str], path: str) -> set[str]:
    """``expanded`` without ``path`` and the groups inside it."""
    return {g for g in expanded if not (g == path or g.startswith(path + "."))}


def expand_level(graph: Graph, expanded: set[str], boxes: Iterable[str]) -> set[str]:
    """Open every visible group box (``boxes``: their module paths): one more level."""
    out = set(expanded)
    for b in boxes:
        out.update(wrapper_chain(graph, b))
    return out


def needed_to_reveal(graph: Graph, key: str) -> set[str]:
    """The groups that must be open for ``key`` (a node id or module path) to show."""
    if not key:
        return set()
    if key in graph:
        path = graph.node(key).module_path
        need = set(ancestors(path)[1:])
        grp = graph.groups.get(path)
        if grp is not None and len(grp.nodes) + len(grp.children) <= 1:
            need.discard(path)  # a one-op module: its box is the node, no frame needed
        return need
    return set(ancestors(key)[1:-1])


def unit_for(
    graph: Graph, key: str, units: Iterable[str] | set[str], frames: set[str], expanded: set[str]
) -> tuple[str | None, str | None]:
    """(visible unit id, frame path) that shows ``key`` (a node id or module path), given
    the drawn units (node ids / ``group:<path>`` boxes) and open frames."""
    units = units if isinstance(units, set | dict) else set(units)
    if not key:
        return None, None
    if key in units:
        return key, None
    if GROUP_PREFIX + key in units:
        return GROUP_PREFIX + key, None
    if key in frames:
        return None, key
    if key in graph:
        unit = graph.unit_of(graph.node(key), expanded | {ROOT})
        return (unit if unit in units else None), None
    # A module path: a visible group box containing it?
    for p in reversed(ancestors(key)[1:]):
        if GROUP_PREFIX + p in units:
            return GROUP_PREFIX + p, None
    members = [n.id for n in graph.nodes_for_module(key) if n.id in units]
    return (members[0] if members else None), None
