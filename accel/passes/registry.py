"""The pass registry: finds the pass modules of this package (a folder scan, so a new pass
needs no list to edit) and looks passes up by name. Pass modules import ``accel.passes.base``
only, never this module, so the scan's imports by name make no cycle."""

from __future__ import annotations

import importlib
import logging
import pkgutil
from pathlib import Path

from accel.errors import PassError
from accel.passes.base import CATEGORIES, REGISTERED, Pass

log = logging.getLogger(__name__)

_SCANNED = False
# Pass modules that failed to import: module name -> error. A broken pass module must not
# take the whole registry (and the studio) down; it is logged and listed here instead.
SCAN_ERRORS: dict[str, str] = {}
_NOT_PASSES = {"base", "registry"}


def _scan() -> None:
    global _SCANNED
    if _SCANNED:
        return
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):  # this package's modules
        if info.name.startswith("_") or info.name in _NOT_PASSES:
            continue
        try:
            importlib.import_module(f"accel.passes.{info.name}")
        except Exception as exc:  # a broken module must not hide the other passes
            SCAN_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
            log.error("pass module accel.passes.%s failed to import: %s", info.name, exc)
    _SCANNED = True


def list_passes(include_test: bool = False) -> list[type[Pass]]:
    """All registered passes, sorted by category then name."""
    _scan()
    order = {c: i for i, c in enumerate(CATEGORIES)}
    return sorted(
        (p for p in REGISTERED.values() if include_test or p.category != "test"),
        key=lambda p: (order.get(p.category, 99), p.name),
    )


def pass_names() -> list[str]:
    _scan()
    return sorted(REGISTERED)


def get_pass(name: str) -> type[Pass]:
    _scan()
    try:
        return REGISTERED[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, list(REGISTERED), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise PassError(
            f"unknown pass {name!r}.{hint} Known passes: {', '.join(sorted(REGISTERED))}"
        ) from None
