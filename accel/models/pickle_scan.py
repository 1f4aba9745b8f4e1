"""What a pickle would import and call, read without unpickling it.

Two questions about a ``torch.save`` payload (or any pickle in a model file):

* :func:`weights_only_problem`: does it load with ``torch.load(weights_only=True)`` (tensors
  and torch's own safe types, plus torchao's quantized tensor *classes*, which the runner's
  int8 steps save)? None if so, else torch's reason;
* :func:`pickle_imports`: the globals (``module.name``) it imports, so a person asked for
  ``--trust-pickle`` decides on facts (``builtins.eval``, ``os.system``, a model class...).
  Read with fickling (Trail of Bits' pickle decompiler), which follows the pickle machine's
  stack and memo; pickletools' opcode walk is the fallback for what fickling cannot parse.
"""

from __future__ import annotations

import importlib
import io
import logging
import pickletools
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# Globals a plain state_dict or tensor pickle imports: not worth a person's attention.
_ROUTINE_PREFIXES = ("torch._utils.", "torch.", "collections.OrderedDict", "numpy.")
_ROUTINE = {"builtins.set", "__builtin__.set", "builtins.dict", "builtins.list"}


def pickle_payloads(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The pickles inside a ``torch.save`` payload: its ``data.pkl`` (zip format), or the
    stream itself (the old format, which holds several pickles one after another)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for name in z.namelist():
                if name.endswith(".pkl"):
                    yield name.rsplit("/", 1)[-1], z.read(name)
            return
    except zipfile.BadZipFile:
        pass
    yield from _stacked(data)


def _stacked(data: bytes, limit: int = 16) -> Iterator[tuple[str, bytes]]:
    """The pickles of an old-format stream, one after another (magic number, protocol,
    system info, the object, its storage keys), until the raw tensor bytes that follow."""
    stream = io.BytesIO(data)
    for k in range(limit):
        start = stream.tell()
        if start >= len(data):
            return
        try:
            for op, _, _ in pickletools.genops(stream):
                if op.name == "STOP":
                    break
        except Exception:  # noqa: BLE001 - not a pickle any more: the tensor bytes
            return
        yield f"pickle {k}", data[start : stream.tell()]


def _fickling_imports(data: bytes) -> list[str]:
    from fickling.fickle import Pickled

    found = []
    for node in Pickled.load(data).properties.imports:
        module = getattr(node, "module", None) or ""
        for alias in node.names:
            found.append(f"{module}.{alias.name}" if module else alias.name)
    return found


def _opcode_imports(data: bytes) -> list[str]:
    found: list[str] = []
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            if op.name == "GLOBAL":
                mod, _, name = str(arg).partition(" ")
                found.append(f"{mod}.{name}")
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
            elif isinstance(arg, str):
                strings.append(arg)
    except Exception:  # noqa: BLE001 - a malformed tail: what was read so far
        pass
    return found


def pickle_imports(data: bytes) -> list[str]:
    """Every ``module.name`` the pickles of ``data`` import, in order, once each
    (``__builtin__`` spelled ``builtins``)."""
    names: list[str] = []
    for _, payload in pickle_payloads(data):
        try:
            found = _fickling_imports(payload)
        except Exception as exc:  # noqa: BLE001 - fickling cannot parse it: read the opcodes
            log.debug("fickling could not read a pickle (%s); reading its opcodes", exc)
            found = _opcode_imports(payload)
        names += [n.replace("__builtin__.", "builtins.", 1) for n in found]
    return list(dict.fromkeys(names))


def notable_imports(names: list[str]) -> list[str]:
    """``names`` without the routine ones of a tensor pickle (torch's rebuild helpers...)."""
    return [n for n in names if n not in _ROUTINE and not n.startswith(_ROUTINE_PREFIXES)]


def describe_imports(data: bytes, limit: int = 12) -> str:
    """One line for people: what the pickles of ``data`` import, the unusual ones first."""
    return _describe(pickle_imports(data), limit)


def _describe(names: list[str], limit: int = 12) -> str:
    if not names:
        return "its pickles import nothing"
    notable = notable_imports(names)
    shown = (notable + [n for n in names if n not in notable])[:limit]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    extra = f" ({len(notable)} beyond torch's tensor types)" if notable else ""
    return "its pickles import " + ", ".join(shown) + more + extra


def weights_only_problem(data: bytes) -> str | None:
    """None if ``data`` (a torch.save payload) loads with ``weights_only=True`` (torchao's
    tensor classes allowed, never a function), else the reason."""
    import torch

    extra = []
    for name in pickle_imports(data):
        mod, _, attr = name.rpartition(".")
        if mod.split(".", 1)[0] != "torchao":
            continue
        try:
            obj = getattr(importlib.import_module(mod), attr)
        except Exception:  # noqa: BLE001 - unknown name: the load below refuses it
            continue
        if isinstance(obj, type):  # classes only, never a torchao function
            extra.append(obj)
    try:
        with torch.serialization.safe_globals(extra):
            torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - anything but tensors
        return _reason(exc)
    return None


def _reason(exc: Exception) -> str:
    """The line of torch's weights-only error that says what it refused (no ANSI codes)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in str(exc).splitlines()]
    for line in lines:
        if "WeightsUnpickler error" in line or "Unsupported global" in line:
            line = line.removeprefix("WeightsUnpickler error:").strip()
            return line.split(". Please", 1)[0][:200]
    first = next((ln for ln in lines if ln), "")
    return first[:200] or type(exc).__name__


MAX_SCAN_BYTES = 64 << 20  # a legacy pickle's stream is read this far at most


def file_imports(path: Path) -> str:
    """:func:`describe_imports` for a model file: the ``.pkl`` members of a zip archive (a
    ``torch.save`` file, TorchScript, every pickle of a ``.pt2``), or the head of an
    old-format pickle stream. '' when the file cannot be read."""
    try:
        with zipfile.ZipFile(path) as z:
            blobs = [z.read(n) for n in z.namelist() if _is_pickle(z, n)]
    except zipfile.BadZipFile:
        try:
            with open(path, "rb") as fh:
                blobs = [fh.read(MAX_SCAN_BYTES)]
        except OSError:
            return ""
    except OSError:
        return ""
    names: list[str] = []
    for blob in blobs:
        names += pickle_imports(blob)
    return _describe(list(dict.fromkeys(names)))


def _is_pickle(z: zipfile.ZipFile, name: str) -> bool:
    """A member that holds a pickle: ``*.pkl``, or (in a .pt2) a file starting with a
    pickle's protocol opcode or a nested torch.save zip, whose size is no tensor's."""
    if name.endswith("/"):
        return False
    if name.endswith(".pkl"):
        return True
    if "/data/" in name and not name.endswith(".json"):
        with z.open(name) as fh:
            head = fh.read(2)
        return head[:1] == b"\x80" or head == b"PK"
    return False
