"""Nothing outside accel/runtimes branches on a model kind, a model file suffix or a Triton
platform: the runtime of the kind does (``accel.models.runtime``).

An AST scan of accel/ and studio/ flags
- comparisons (==, !=, in, not in) between a model kind name and an expression that
  mentions a kind (``model.kind``, ``kind``, ``info.get("kind")``, ``requires.model_kinds``);
- comparisons with, and ``endswith`` calls on, a model file suffix (".onnx", ".xml", ...):
  the one suffix table is the runtimes' (``model_file_suffixes``, ``runtime_for_file``);
- any string naming a Triton platform or backend ("onnxruntime_onnx", ...): a runtime's
  ``serve`` names it.
Generated script text is a string, so it is not a comparison here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import accel  # noqa: F401  (registers the built-in runtimes)
from accel.models.runtime import kinds, model_file_suffixes

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {ROOT / "accel" / "runtimes"}
PLATFORMS = {"onnxruntime_onnx", "pytorch_libtorch", "tensorrt_plan", "openvino"}
# Branches still to move into the runtimes (file prefix, expression). Keep it empty: a new
# runtime must not need edits outside its package and its registration line.
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


def _constants(node: ast.AST, values: set[str] | tuple[str, ...]) -> list[str]:
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in values
    ]


def _kind_compare(node: ast.Compare) -> bool:
    sides = [node.left, *node.comparators]
    consts = [s for s in sides if _constants(s, kinds()) and not _mentions_kind(s)]
    return bool(consts) and any(_mentions_kind(s) for s in sides)


def _about_models(parts: list[ast.AST]) -> bool:
    """Whether ``parts`` test model file suffixes: some are, and no other suffix is named
    with them (``(".npz", ".pt")`` is about tensor data files)."""
    suffixes = model_file_suffixes()
    named = [
        n.value
        for p in parts
        for n in ast.walk(p)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and n.value.startswith(".")
        and 1 < len(n.value) <= 6
    ]
    return bool(named) and all(v in suffixes for v in named)


def _suffix_test(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        return _about_models([node.left, *node.comparators])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "endswith" and _about_models(list(node.args))
    return False


def kind_branches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        what = ""
        if isinstance(node, ast.Compare) and all(
            isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops
        ):
            if _kind_compare(node):
                what = "kind"
        if not what and _suffix_test(node):
            what = "suffix"
        if not what and isinstance(node, ast.Constant) and node.value in PLATFORMS:
            if isinstance(node.value, str) and node.value != "openvino":  # also a kind name
                what = "platform"
        if what:
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


def test_no_model_kind_branching_outside_the_runtimes():
    found = [hit for p in _files() for hit in kind_branches(p) if not _pending(hit)]
    assert not found, (
        "ask the model's runtime (accel.models.runtime: runtime_of, get_runtime, "
        "runtime_for_file, model_file_suffixes) instead of comparing kinds, suffixes or "
        "Triton platforms:\n" + "\n".join(found)
    )


def test_the_guard_catches_kind_suffix_and_platform_branches(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(model, info, p, path):\n"
        "    if model.kind == 'onnx':\n"
        "        return 1\n"
        "    if info.get('kind') != 'torch':\n"
        "        return 2\n"
        "    if 'onnx' in p.requires.model_kinds:\n"
        "        return 3\n"
        "    if job_kind == 'run_recipe' or model.source == 'onnx':\n"
        "        return 4\n"
        "    if path.endswith(('.onnx', '.pt')):\n"
        "        return 5\n"
        "    if path.suffix == '.xml':\n"
        "        return 6\n"
        "    platform = 'pytorch_libtorch'\n"
        "    if path.suffix in ('.npz', '.pt'):\n"
        "        return 7\n"
    )
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        hits = kind_branches(sample)
    finally:
        ROOT = old
    assert sorted(int(h.split(":")[1]) for h in hits) == [2, 4, 6, 10, 12, 14]
