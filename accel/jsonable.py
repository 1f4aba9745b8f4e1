"""The one JSON sanitizer: any value as plain JSON data (dict / list / str / int / float /
bool / None), for events, run details, profiles, the store and reports.

Containers become dicts (string keys) and lists; pydantic models, dataclasses, enums, paths
and numpy values their plain forms; anything else its ``str``. ``nonfinite`` says what
NaN and infinities become: ``"keep"`` (Python's json writes NaN), ``"null"`` (strict JSON)
or ``"string"`` ("NaN", "Infinity", "-Infinity": PostgreSQL's JSON rejects NaN)."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, Literal

NonFinite = Literal["keep", "null", "string"]
_MAX_DEPTH = 100
_MAX_ITEMS = 10_000  # larger arrays are written as their text, not element by element


def jsonable(value: Any, nonfinite: NonFinite = "keep") -> Any:
    """``value`` as plain JSON data (see module docstring)."""
    return _convert(value, nonfinite, 0)


def _convert(v: Any, nonfinite: NonFinite, depth: int) -> Any:
    if v is None or isinstance(v, (str, bool, int)) and not isinstance(v, enum.Enum):
        return v
    if isinstance(v, float):
        if math.isfinite(v) or nonfinite == "keep":
            return v
        if nonfinite == "null":
            return None
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if depth > _MAX_DEPTH:
        return str(v)
    d = depth + 1
    if isinstance(v, Mapping):
        return {str(k): _convert(x, nonfinite, d) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_convert(x, nonfinite, d) for x in v]
    if isinstance(v, enum.Enum):
        return _convert(v.value, nonfinite, d)
    if isinstance(v, PurePath):
        return str(v)
    if hasattr(v, "model_dump"):  # pydantic
        return _convert(v.model_dump(mode="json"), nonfinite, d)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _convert(dataclasses.asdict(v), nonfinite, d)
    if hasattr(v, "tolist") and hasattr(v, "dtype"):  # numpy (and torch) scalars and arrays
        n = v.numel() if hasattr(v, "numel") else getattr(v, "size", 1)
        if isinstance(n, int) and n > _MAX_ITEMS:
            return str(v)
        try:
            return _convert(v.tolist(), nonfinite, d)
        except Exception:  # noqa: BLE001 - e.g. a quantized tensor: fall back to its text
            return str(v)
    return str(v)
