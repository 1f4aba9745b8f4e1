"""No function in accel/ longer than LIMIT lines (issue 16).

Length is counted with ast: from the ``def`` line to the function's last line (docstring,
comments and nested functions included). Methods and nested functions are named by their
qualified name (``Class.method``, ``outer.inner``).

ALLOWED lists the functions that were over the limit when this test was added and are not
split yet, with their size then. The list may only shrink: a listed function may not grow
past its recorded size, a function that is now under the limit must be removed from the list
(the test says so), and no new entry may be added — split the function instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

LIMIT = 80
ROOT = Path(__file__).resolve().parents[1]

# "path::qualified name": lines when recorded. Shrink only.
ALLOWED: dict[str, int] = {
    # copied verbatim into exported scripts (inspect.getsource): splitting it means adding
    # the new helpers to every to_script that ships it
}


def function_sizes(source: str) -> dict[str, int]:
    """Qualified name -> line count of every function (methods and nested ones too)."""
    sizes: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                sizes[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return sizes


def accel_function_sizes() -> dict[str, int]:
    sizes: dict[str, int] = {}
    for path in sorted((ROOT / "accel").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for name, n in function_sizes(path.read_text(encoding="utf-8")).items():
            sizes[f"{rel}::{name}"] = n
    return sizes


def test_no_accel_function_over_the_limit():
    sizes = accel_function_sizes()
    problems = []
    for key, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if n <= LIMIT:
            continue
        allowed = ALLOWED.get(key)
        if allowed is None:
            problems.append(f"{key} is {n} lines (limit {LIMIT}): split it into named steps")
        elif n > allowed:
            problems.append(f"{key} grew to {n} lines (allow-list: {allowed}): split it")
    assert not problems, "\n".join(problems)


def test_allow_list_only_shrinks():
    sizes = accel_function_sizes()
    stale = [
        f"{key}: now {sizes[key]} lines, remove it from ALLOWED"
        if key in sizes
        else f"{key}: no such function any more, remove it from ALLOWED"
        for key in ALLOWED
        if sizes.get(key, 0) <= LIMIT
    ]
    assert not stale, "\n".join(stale)


def test_the_measure_counts_methods_and_nested_functions():
    source = (
        "class A:\n"
        "    def m(self):\n"
        "        def inner():\n"
        "            return 1\n"
        "        return inner()\n"
        "def f():\n"
        "    pass\n"
    )
    assert function_sizes(source) == {"A.m": 4, "A.m.inner": 2, "f": 2}
