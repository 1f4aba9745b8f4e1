"""Sort keys of the History table's columns: numbers sort as numbers, blanks last (no Qt)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from studio.tables import P50_HEADER, REF_HEADER, SPEEDUP_HEADER, own_ms, ref_ms, speedup_of

NUMERIC = {
    "duration s": lambda r: r.duration_s,
    REF_HEADER: lambda r: ref_ms(r.final),
    P50_HEADER: lambda r: own_ms(r.final),
    SPEEDUP_HEADER: lambda r: speedup_of(r.final),
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


STATUSES = [
    "any status",
    "succeeded",
    "failed",
    "crashed",
    "cancelled",
    "timed_out",
    "running",
    "queued",
]
PERIODS = {"any time": None, "last 24 hours": 1, "last 7 days": 7, "last 30 days": 30}


def run_filter(status: str, period: str, model: str, search: str, pass_name: str) -> Any:
    """The store's RunFilter of History's filter widgets' texts."""
    from studio.store import RunFilter

    days = PERIODS[period]
    kwargs: dict[str, Any] = {
        "status": () if status == STATUSES[0] else (status,),
        "model": model.strip() or None,
        "search": search.strip() or None,
        "since": dt.datetime.now(dt.UTC) - dt.timedelta(days=days) if days else None,
    }
    pass_name = pass_name.strip()
    if pass_name and "pass_name" in RunFilter.__dataclass_fields__:
        kwargs["pass_name"] = pass_name
    elif pass_name:
        kwargs["search"] = " ".join(filter(None, [kwargs["search"], pass_name]))
    return RunFilter(**kwargs)
