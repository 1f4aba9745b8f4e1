"""No class in accel/ or studio/ longer than LIMIT lines (issue 30).

A class that outgrows the limit holds more than one feature: split it by its seams into
collaborators (``studio/controllers/`` for the services, ``studio/workers``' Scheduler,
Supervisor, Watchdog and Dispatcher for the pool), not by line count into mixins. Length is
the class statement's lines (its methods and nested classes included). PENDING lists the
classes over the limit that another change is rewriting now; shrink only.
"""

from __future__ import annotations

import ast
from pathlib import Path

LIMIT = 400
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("accel", "studio")

# "path::qualified name": lines when recorded. Shrink only.
PENDING: dict[str, int] = {}


def class_sizes(source: str) -> dict[str, int]:
    """Qualified name -> line count of every class (nested classes too)."""
    sizes: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = prefix + child.name
                sizes[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return sizes


def tree_class_sizes(root: Path = ROOT) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for name, n in class_sizes(path.read_text(encoding="utf-8")).items():
                sizes[f"{rel}::{name}"] = n
    return sizes


def test_no_class_over_the_limit():
    sizes = tree_class_sizes()
    assert "studio/services.py::Services" in sizes  # the walk sees the studio too
    problems = []
    for key, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if n <= LIMIT:
            continue
        pending = PENDING.get(key)
        if pending is None:
            problems.append(f"{key} is {n} lines (limit {LIMIT}): split it by its seams")
        elif n > pending:
            problems.append(f"{key} grew to {n} lines (pending at {pending}): split it")
    assert not problems, "\n".join(problems)


def test_pending_only_shrinks():
    sizes = tree_class_sizes()
    stale = [key for key in PENDING if sizes.get(key, 0) <= LIMIT]
    assert not stale, f"under the limit or gone now, remove from PENDING: {stale}"


def test_the_measure_counts_nested_classes():
    source = "class A:\n    class B:\n        x = 1\n    def m(self):\n        pass\n"
    assert class_sizes(source) == {"A": 5, "A.B": 2}
