"""Line counts of the definitions in accel/ and studio/, for the size rules
(tests/test_function_size.py, tests/test_class_size.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("accel", "studio")
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
CLASSES = (ast.ClassDef,)


def definition_sizes(source: str, counted: tuple[type, ...]) -> dict[str, int]:
    """Qualified name (``Class.method``, ``outer.inner``) -> lines, from the ``def``/``class``
    line to the last, of every definition of the ``counted`` node types, nested ones too."""
    sizes: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, FUNCTIONS + CLASSES):
                name = prefix + child.name
                if isinstance(child, counted):
                    sizes[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return sizes


def tree_sizes(counted: tuple[type, ...], root: Path = ROOT) -> dict[str, int]:
    """``path::name`` -> lines of every counted definition in accel/ and studio/."""
    sizes: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for name, n in definition_sizes(path.read_text(encoding="utf-8"), counted).items():
                sizes[f"{rel}::{name}"] = n
    return sizes
