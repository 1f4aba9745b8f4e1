"""What the Graph panel's details pane shows for a node, a group box or an open frame.

Plain text rows (label, value; a value may hold several lines); the panel escapes them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from accel.graph.model import ROOT, Graph, Node, ancestors
from accel.models.runtime import rows_are_nodes


@dataclass
class Details:
    title: str
    subtitle: str = ""
    rows: list[tuple[str, str]] = field(default_factory=list)


def fmt_count(n: float | int | None) -> str:
    """1234567 -> "1.23M" (counts of parameters and FLOPs)."""
    if n is None:
        return "–"
    n = float(n)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def _tensor_lines(shapes: list[Any], dtypes: list[Any] | None) -> str:
    return "\n".join(
        f"{d or ''}{list(s) if s is not None else '?'}"
        for s, d in zip(shapes, dtypes or [None] * len(shapes))
    )


def _op_rows(node: Node) -> list[tuple[str, str]]:
    rows = [("Module", node.module_path or "(root)")]
    for label, shapes, dtypes in (
        ("Inputs", node.input_shapes, node.input_dtypes),
        ("Outputs", node.output_shapes, node.output_dtypes),
    ):
        text = _tensor_lines(shapes, dtypes)
        if text:
            rows.append((label, text))
    if node.num_params:
        rows.append(("Parameters", f"{node.num_params:,}"))
    if node.params:
        rows.append(("Weights", "\n".join(node.params[:6])))
    for k, v in list(node.attributes.items())[:12]:
        rows.append((str(k), str(v)[:160]))
    return rows


def details(
    graph: Graph,
    node: Node | None,
    path: str,
    expanded: set[str],
    profile: Any = None,
) -> Details:
    """Details of the visible ``node`` (None: the open frame or module ``path``).

    A group box that holds a single op (a leaf module such as ``fc``) is shown as that
    op, with its tensor shapes: there is nothing to open.
    """
    if node is not None and node.op == "group":
        members = graph.nodes_for_module(node.module_path)
        if len(members) == 1:
            node = members[0]
    if node is not None and node.op != "group":
        out = Details(node.op, node.name, _op_rows(node))
        path = node.module_path
    else:
        grp = graph.groups.get(path)
        members = graph.nodes_for_module(path)
        out = Details(path or "(root)", grp.type if grp else "")
        out.rows.append(("Ops", str(len(members))))
        out.rows.append(("Parameters", f"{sum(n.num_params for n in members):,}"))
        ops = Counter(n.op for n in members).most_common(6)
        out.rows.append(("Op mix", ", ".join(f"{o}×{c}" for o, c in ops)))
        if path in expanded:
            out.rows.append(("Group", "open (double-click its title to close)"))
        else:
            out.rows.append(("Group", "closed (double-click to open)"))
    out.rows.extend(_profile_rows(profile, node, path))
    return out


def _profile_rows(prof: Any, node: Node | None, path: str) -> list[tuple[str, str]]:
    if prof is None:
        return []
    by = prof.by_name()
    row = None
    for p in reversed(ancestors(path)) if path else [ROOT]:
        if p in by:
            row = by[p]
            break
    if (
        node is not None
        and node.op != "group"
        and node.name in by
        and rows_are_nodes(getattr(prof, "kind", ""))
    ):
        row = by[node.name]
    if row is None:
        return []
    own = row.name == path or (node is not None and row.name == node.name)
    label = "Time" if own else f"Time ({row.name})"
    rows = [(label, f"{row.inclusive_ms:.3f} ms ({100 * row.inclusive_share:.1f} %)")]
    if row.flops is not None:
        rows.append(("FLOPs", fmt_count(row.flops)))
    return rows
