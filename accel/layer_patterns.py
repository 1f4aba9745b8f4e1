"""One pattern language for the layer lists of every pass (exclude, ignore, keep).

A pattern matches a layer (a torch module) by

- type name: ``"Linear"`` matches every ``nn.Linear``;
- exact name: ``"fc1"``;
- name prefix at a dot boundary: ``"layers.0"`` covers ``"layers.0.ffn"`` (not ``"layers.01"``);
- glob (fnmatch, case-sensitive): ``"layers.*.attn.*"``.

Passes on ONNX / OpenVINO models match the torch module path each node came from the same
way (plus the node's own name as a glob). ``layer_matches`` is self-contained (standard
library only, imported inside) because passes copy its source into exported scripts.
Pure Python: no torch import here.
"""

# ruff: noqa: PLC0415 - layer_matches imports inside so its source runs alone in a script

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

PATTERN_HELP = (
    "type names ('Linear'), module names ('fc1'), name prefixes ('layers.0' covers "
    "'layers.0.ffn') or globs ('layers.*.attn.*')"
)


def layer_matches(pattern, name, type_name=""):
    """Whether ``pattern`` selects the layer called ``name`` of class ``type_name``."""
    import fnmatch

    return bool(name) and (
        pattern == type_name
        or name == pattern
        or name.startswith(pattern + ".")
        or fnmatch.fnmatchcase(name, pattern)
    )


def match(
    names_and_types: Iterable[tuple[str, str]], patterns: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Names matched by any pattern (in the given order) and the patterns that matched none."""
    layers = list(names_and_types)
    matched, used = [], set()
    for name, type_name in layers:
        hits = [p for p in patterns if layer_matches(p, name, type_name)]
        used.update(hits)
        if hits:
            matched.append(name)
    return matched, [p for p in patterns if p not in used]


def module_layers(module: Any) -> list[tuple[str, str]]:
    """(name, type name) of every submodule of a torch ``module`` (the root left out): what
    the patterns select from, and what accel.plan checks layer lists against. Empty for an
    object without ``named_modules``."""
    named = getattr(module, "named_modules", None)
    if named is None:
        return []
    return [(n, type(m).__name__) for n, m in named() if n]


def filter_fn(patterns: Sequence[str]) -> Callable[[Any, str], bool]:
    """A torchao-style ``filter_fn(module, fqn)``: true for the modules the patterns select."""
    wanted = list(patterns)

    def fn(module: Any, fqn: str) -> bool:
        return any(layer_matches(p, fqn, type(module).__name__) for p in wanted)

    return fn


def unmatched_message(
    unmatched: Sequence[str], names: Sequence[str], what: str = "pattern(s)", kind: str = "layer"
) -> str:
    """The one error text for patterns that select nothing: the close names (difflib) and a
    sample of the names that exist, so the user sees what to type instead."""
    close = sorted(
        {c for p in unmatched for c in difflib.get_close_matches(p, list(names), n=3, cutoff=0.4)}
    )
    hint = f" Close names: {', '.join(close)}." if close else ""
    sample = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
    return (
        f"{what} {list(unmatched)} match no {kind}.{hint} Names look like: {sample or '(none)'}. "
        f"Patterns are {PATTERN_HELP}."
    )
