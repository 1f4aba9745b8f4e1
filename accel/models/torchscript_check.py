"""Does a TorchScript file call file, process or network ops? Checked around ``torch.jit.load``.

TorchScript is code: a scripted ``torch.from_file(path, shared=True)`` writes any file the user
can write, ``torch.save`` writes one, ``torch.ops.debugprims.load_tensor`` reads one, and the
distributed ops talk to other machines. A model never needs them, so a file that calls them is
refused unless the person trusts the file (``--trust-pickle``).

Two looks, because ``torch.jit.load`` already runs a module's ``__setstate__``:

* :func:`scan_code` reads the archive's serialized source (``code/**/*.py``) *before* loading
  and refuses any reference to those ops, in any method or function;
* :func:`scan_module` walks every method of every submodule *after* loading, with calls
  inlined, over the graph's nodes (blocks of ``if``/``loop`` included), by op name.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accel.errors import ModelLoadError

# Ops that read or write files, call Python, or communicate (by schema name).
DENIED_OPS = frozenset(
    {
        "aten::from_file",
        "aten::save",
        "debugprims::load_tensor",
        "prim::PythonOp",
        "prim::IgnoredPythonOp",
    }
)
DENIED_NAMESPACES = frozenset(
    {
        "c10d",
        "_c10d_functional",
        "_c10d_functional_autograd",
        "symm_mem",
        "_dtensor",
        "debugprims",
        "_test",
    }
)
_CODE_REF = re.compile(
    r"\.\s*(from_file|save|load_tensor)\b"
    r"|\bops\s*\.\s*(c10d|_c10d_functional\w*|symm_mem|_dtensor|debugprims|_test)\b"
)
HINT = (
    "A model never needs them. If you trust this file to run code, pass trust_pickle=True "
    "(CLI: --trust-pickle)."
)


def scan_code(path: Path) -> None:
    """Refuse a TorchScript archive whose serialized code names a file, process or network
    op (read before ``torch.jit.load`` compiles and runs any of it)."""
    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if "/code/" not in f"/{name}" or not name.endswith(".py"):
                    continue
                text = z.read(name).decode("utf-8", errors="replace")
                m = _CODE_REF.search(text)
                if m:
                    line = text.count("\n", 0, m.start()) + 1
                    raise ModelLoadError(
                        f"{path}: its TorchScript code calls {m.group(0).strip('. ')!r} "
                        f"({name}, line {line}), an op that reads or writes files or talks "
                        f"to other processes; it was not loaded. {HINT}"
                    )
    except zipfile.BadZipFile:
        return  # not an archive: torch.jit.load reports it


def _kinds(block: Any) -> Iterator[str]:
    for node in block.nodes():
        yield node.kind()
        for sub in node.blocks():
            yield from _kinds(sub)


def denied(kind: str) -> bool:
    return kind in DENIED_OPS or kind.split("::", 1)[0] in DENIED_NAMESPACES


def scan_module(path: Path | str, module: Any) -> None:
    """Refuse a loaded ScriptModule any of whose methods (every submodule's, calls inlined)
    runs a denied op."""
    import torch

    for sub_name, sub in module.named_modules():
        c = getattr(sub, "_c", None)
        if c is None:
            continue
        for method_name in c._method_names():
            graph = c._get_method(method_name).graph.copy()
            torch._C._jit_pass_inline(graph)
            for kind in _kinds(graph):
                if denied(kind):
                    where = f"{sub_name}.{method_name}" if sub_name else method_name
                    raise ModelLoadError(
                        f"{path}: its TorchScript method {where} calls {kind}, an op that "
                        f"reads or writes files or talks to other processes; refused. {HINT}"
                    )
