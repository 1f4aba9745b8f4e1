"""Sort keys of the History table's columns: numbers sort as numbers, blanks last (no Qt)."""

from __future__ import annotations

import datetime as dt
from typing import Any

NUMERIC = {
    "duration s": lambda r: r.duration_s,
    "latency ms": lambda r: (r.final or {}).get("latency_p50_ms"),
    "speedup [95% CI]": lambda r: (r.final or {}).get("speedup"),
}
TEXT = {
    "run": lambda r: r.id,
    "recipe": lambda r: r.name or r.recipe_name,
    "model": lambda r: r.model_source,
    "status": lambda r: r.status,
    "device": lambda r: r.device,
    "tags": lambda r: ", ".join(r.tags),
    "notes": lambda r: r.notes,
}


def sort_rows(rows: list[Any], column: str, descending: bool) -> list[Any]:
    """Rows sorted by a column; runs without a value come last in either order."""
    if column in NUMERIC:
        get = NUMERIC[column]

        def key(r):
            v = get(r)
            return float(v) if v is not None else None

    elif column == "created":

        def key(r):
            return r.created_at.timestamp() if isinstance(r.created_at, dt.datetime) else None

    else:
        get = TEXT.get(column, lambda r: "")

        def key(r):
            return str(get(r) or "").lower() or None

    have = [r for r in rows if key(r) is not None]
    blank = [r for r in rows if key(r) is None]
    return sorted(have, key=key, reverse=descending) + blank
