"""Nothing outside accel/backends branches on a model-kind string: the handlers do.

An AST scan of accel/ and studio/ flags comparisons (==, !=, in, not in) between a model
kind name ("torch", "onnx", "openvino", "tensorrt") and an expression that mentions a
kind (``model.kind``, ``kind``, ``info.get("kind")``, ``requires.model_kinds``...).
Generated script text is a string, so it is not a comparison here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from accel.backends import KINDS

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {ROOT / "accel" / "backends"}
# Branches still to move into the handlers (file prefix, expression). Keep it empty: a new
# runtime must not need edits outside its handler and its passes.
PENDING: set[tuple[str, str]] = set()


def _mentions_kind(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and "kind" in n.id.lower():
            return True
        if isinstance(n, ast.Attribute) and "kind" in n.attr.lower():
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "kind" in n.value:
            return True
    return False


def _kind_constants(node: ast.AST) -> list[str]:
    vals = []
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and n.value in KINDS:
            vals.append(n.value)
    return vals


def kind_branches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if not all(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
            continue
        sides = [node.left, *node.comparators]
        consts = [s for s in sides if _kind_constants(s) and not _mentions_kind(s)]
        kinds = [s for s in sides if _mentions_kind(s)]
        if consts and kinds:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def _files() -> list[Path]:
    out = []
    for pkg in ("accel", "studio"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            if not any(p.is_relative_to(a) for a in ALLOWED):
                out.append(p)
    return out


def _pending(hit: str) -> bool:
    where, _, expr = hit.partition(": ")
    return any(where.startswith(f) and expr == e for f, e in PENDING)


def test_no_model_kind_branching_outside_the_handlers():
    found = [hit for p in _files() for hit in kind_branches(p) if not _pending(hit)]
    assert not found, (
        "branch on the model kind through its handler (accel.backends.get_backend(kind)) "
        "instead of comparing kind strings:\n" + "\n".join(found)
    )


def test_the_guard_catches_kind_branches(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(model, info, p):\n"
        "    if model.kind == 'onnx':\n"
        "        return 1\n"
        "    if info.get('kind') != 'torch':\n"
        "        return 2\n"
        "    if 'onnx' in p.requires.model_kinds:\n"
        "        return 3\n"
        "    if job_kind == 'run_recipe' or model.source == 'onnx':\n"
        "        return 4\n"
    )
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        hits = kind_branches(sample)
    finally:
        ROOT = old
    assert [h.split(":")[1] for h in hits] == ["2", "4", "6"]
