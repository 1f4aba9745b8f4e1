"""Is a ``.pt2`` archive one torch can load without running code? Checked before torch reads it.

``torch.export.load`` deserializes *every* program in the archive (``models/<name>.json``),
and on the way unpickles with ``weights_only=False``: weights and constants whose config says
``use_pickle``, legacy ``data/weights/<name>.pt`` / ``data/constants/<name>.pt`` files (a
fallback after a failed weights-only load), custom and opaque objects; it loads AOTInductor
shared libraries from ``data/aotinductor/``; and it hands symbolic-shape expressions from the
JSON to ``sympy.sympify``, which evaluates Python. So the check is an allow-list: every member
must be one the loader expects for the programs the archive declares, every pickle in it must
load with ``weights_only=True``, and every shape expression must be plain arithmetic over
sympy's and torch's shape functions. Anything else is refused with its name.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accel.errors import ModelLoadError
from accel.models.pickle_scan import describe_imports, weights_only_problem

HINT = (
    "If you trust this file, pass trust_pickle=True (CLI: --trust-pickle). Safer: re-save it "
    "with torch.export.save from a model whose weights are plain tensors."
)
_FIXED = {
    "archive_format",
    "archive_version",
    "byteorder",
    ".data/version",
    ".data/serialization_id",
}
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_MODEL_JSON = re.compile(r"models/([A-Za-z0-9_\-]+)\.json")


def check_pt2_archive(path: Path) -> None:
    """Raise ModelLoadError unless ``path`` is a torch.export archive whose every member the
    loader expects and whose every pickle loads with ``weights_only=True``."""
    try:
        with zipfile.ZipFile(path) as z:
            root, members = _layout(path, z)
            expected = set(_FIXED)
            models = sorted(m.group(1) for r in members if (m := _MODEL_JSON.fullmatch(r)))
            if "model" not in models:
                raise ModelLoadError(f"{path}: the archive holds no program named 'model'")
            for name in models:
                expected |= _model_members(path, z, root, name, members)
            extra = {r for r in members if r.startswith("extra/") and not r.endswith("/")}
            unexpected = sorted(members - expected - extra - _folders(expected | extra))
            if unexpected:
                raise ModelLoadError(
                    f"{path}: the archive holds members torch.export.save does not write for "
                    f"its programs ({', '.join(unexpected[:5])}); torch could run code from "
                    "them, so it was not loaded. " + HINT
                )
    except zipfile.BadZipFile:
        raise ModelLoadError(f"{path} is not a torch.export archive (not a zip file)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError) as exc:
        raise ModelLoadError(f"{path}: malformed archive ({type(exc).__name__}: {exc})") from None


def _layout(path: Path, z: zipfile.ZipFile) -> tuple[str, set[str]]:
    """The archive's root folder and its members relative to it (layout checked)."""
    names = [i.filename for i in z.infolist()]
    if len(set(names)) != len(names):
        raise ModelLoadError(
            f"{path}: the archive holds several entries with the same name; refused "
            "(a reader could pick a different one than the check). " + HINT
        )
    roots = {n.split("/", 1)[0] for n in names}
    if len(roots) != 1 or any(".." in n.split("/") or n.startswith("/") for n in names):
        raise ModelLoadError(f"{path}: not a torch.export archive (unexpected layout)")
    root = roots.pop()
    members = {n[len(root) + 1 :] for n in names if len(n) > len(root) + 1}
    if "archive_format" not in members:
        raise ModelLoadError(
            f"{path} is in the old torch.export format, which unpickles its contents; "
            "it is loaded only with trust_pickle. " + HINT
        )
    return root, members


def _folders(members: set[str]) -> set[str]:
    out = set()
    for m in members:
        parts = m.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]) + "/")
    return out


def _model_members(
    path: Path, z: zipfile.ZipFile, root: str, name: str, members: set[str]
) -> set[str]:
    """The members program ``name`` may have, each checked; its shape expressions too."""
    expected = {f"models/{name}.json"}
    check_expressions(path, json.loads(z.read(f"{root}/models/{name}.json").decode("utf-8")))
    pickles = [f"data/sample_inputs/{name}.pt"]
    for folder, kind in (("data/weights/", "weights"), ("data/constants/", "constants")):
        legacy = f"{folder}{name}.pt"
        if legacy in members:
            pickles.append(legacy)  # torch reads it instead of the config
        config = f"{folder}{name}_{kind}_config.json"
        if config in members:
            expected.add(config)
            for file, pickled in _config_files(path, z, f"{root}/{config}"):
                expected.add(folder + file)
                if pickled and folder + file in members:
                    pickles.append(folder + file)
    for member in pickles:
        if member in members:
            expected.add(member)
            _require_weights_only(path, z.read(f"{root}/{member}"), member)
    return expected


def _config_files(path: Path, z: zipfile.ZipFile, name: str) -> Iterator[tuple[str, bool]]:
    """(file name, is a pickle) of each entry of a weights/constants config."""
    data = json.loads(z.read(name).decode("utf-8"))
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path}: malformed archive config {name}")
    for fqn, meta in config.items():
        if not isinstance(meta, dict):
            raise ModelLoadError(f"{path}: malformed entry {fqn!r} in {name}")
        file = str(meta.get("path_name", ""))
        if not _NAME.fullmatch(file) or ".." in file:
            raise ModelLoadError(f"{path}: bad file name {file!r} for {fqn!r} in {name}")
        if file.startswith(("custom_obj", "opaque_obj")):
            raise ModelLoadError(
                f"{path}: {fqn!r} is stored as a custom Python object ({name}: {file!r}), "
                "which torch unpickles with no restriction, so the file was not loaded. " + HINT
            )
        yield file, meta.get("use_pickle") is not False


_ROLES = {"data/sample_inputs/": "sample inputs", "data/weights/": "weights"}


def _require_weights_only(path: Path, data: bytes, member: str) -> None:
    why = weights_only_problem(data)
    if why:
        role = next((r for p, r in _ROLES.items() if member.startswith(p)), "constants")
        raise ModelLoadError(
            f"{path}: its {role} ({member}) hold pickled Python objects ({why}; "
            f"{describe_imports(data)}), "
            "and loading it can run arbitrary code, so the file was not loaded. " + HINT
        )


# -- symbolic shapes ----------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s+|(?P<num>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<str>'[A-Za-z][A-Za-z0-9_]*')"
    r"|(?P<name>[A-Za-z][A-Za-z0-9_]*)|\*\*|//|[-+*/%(),=<>!&|~^]"
)
_SYMBOL = re.compile(r"[a-z]{1,6}\d+")
_CONSTANTS = {"True", "False", "None", "oo", "zoo", "nan", "pi", "E", "true", "false"}


def _allowed_names() -> set[str]:
    """Names a shape expression may use: sympy's expression classes and singletons, torch's
    shape functions, and sympy's assumption keywords (``positive=True``)."""
    import sympy
    import torch.utils._sympy.functions as shape_functions
    from sympy.core.assumptions import _assume_defined

    names = set(_CONSTANTS) | set(_assume_defined)
    for module in (sympy, shape_functions):
        for attr in dir(module):
            obj = getattr(module, attr, None)
            if (isinstance(obj, type) and issubclass(obj, sympy.Basic)) or isinstance(
                obj, sympy.Basic
            ):
                names.add(attr)
    return names


def check_expressions(path: Path, program: Any) -> None:
    """Refuse a program whose ``expr_str`` values are anything but arithmetic over shape
    symbols (``sympy.sympify`` evaluates them as Python)."""
    allowed: set[str] | None = None
    for expr in _expressions(program):
        allowed = allowed if allowed is not None else _allowed_names()
        bad = _bad_token(expr, allowed)
        if bad is not None:
            raise ModelLoadError(
                f"{path}: a symbolic shape in the program is not an arithmetic expression "
                f"({bad!r} in {expr[:80]!r}); torch would evaluate it as Python, so the file "
                "was not loaded"
            )


def _expressions(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key == "expr_str":
                    yield str(value)
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


def _bad_token(expr: str, allowed: set[str]) -> str | None:
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            return expr[pos : pos + 10]
        name = m.group("name")
        if name is not None and name not in allowed and not _SYMBOL.fullmatch(name):
            return name
        pos = m.end()
    return None
