"""No import cycles among the project's modules (issue 16), counting imports made inside
functions; imports under ``if TYPE_CHECKING:`` (annotations only, never executed) do not
count. A cycle makes modules import-order dependent and impossible to take apart."""

from __future__ import annotations

import sys

import pytest

grimp = pytest.importorskip("grimp")


def _cycles(graph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    mods = sorted(graph.modules)
    known = set(mods)
    adj = {
        m: sorted(x for x in graph.find_modules_directly_imported_by(m) if x in known) for m in mods
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10_000))
    try:
        for m in mods:
            if m not in index:
                visit(m)
    finally:
        sys.setrecursionlimit(old)
    return out


def test_no_import_cycles():
    graph = grimp.build_graph("accel", "studio", cache_dir=None, exclude_type_checking_imports=True)
    assert _cycles(graph) == []


def test_the_check_finds_a_cycle():
    g = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        g.add_import(importer=a, imported=b)
    assert _cycles(g) == [["p.a", "p.b", "p.c"]]
