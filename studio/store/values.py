"""Value helpers of the store: NaN as a flag, JSON made PostgreSQL-safe, UTC times, recipe
hashes, parity reports flattened into rows, tag and status checks."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import socket
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from accel.jsonable import jsonable
from studio.store.models import RUN_STATUSES, MetricRow, StepRow


def split_float(value: Any) -> tuple[float | None, bool]:
    """A metric value as (value, is_nan): NaN is stored as a flag, not as a float."""
    if value is None or isinstance(value, str):
        return None, False
    f = float(value)
    if math.isnan(f):
        return None, True
    return f, False


def join_float(value: float | None, is_nan: bool) -> float | None:
    return math.nan if is_nan else value


def json_safe(obj: Any) -> Any:
    """Non-finite floats become strings: PostgreSQL's JSON (rightly) rejects NaN."""
    return jsonable(obj, nonfinite="string")


def aware(t: dt.datetime | None) -> dt.datetime | None:
    # SQLite drops the time zone; everything is stored in UTC.
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=dt.UTC)


def recipe_hash(content: Mapping[str, Any]) -> str:
    text = json.dumps(json_safe(content), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def flatten_parity(parity: Mapping[str, Any] | None) -> list[tuple[str, str, Any, bool | None]]:
    """ParityReport.to_dict() -> [(output name, metric, value, output passed)].

    Numbers (and booleans other than the verdict, as 0/1) of each output become
    metrics; nested dicts are flattened with dots.
    """
    if not parity:
        return []
    rows: list[tuple[str, str, Any, bool | None]] = []
    for i, out in enumerate(parity.get("outputs") or []):
        if not isinstance(out, Mapping):
            continue
        name = str(out.get("name") or out.get("output") or out.get("path") or f"output{i}")
        passed = out.get("passed")
        passed = bool(passed) if isinstance(passed, bool) else None

        def walk(prefix: str, d: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
            for k, v in d.items():
                key = f"{prefix}{k}"
                if key in ("name", "output", "path", "passed"):
                    continue
                if isinstance(v, bool):
                    yield key, float(v)
                elif is_number(v):
                    yield key, v
                elif isinstance(v, str) and v in ("NaN", "nan"):
                    yield key, math.nan
                elif isinstance(v, Mapping):
                    yield from walk(f"{key}.", v)

        seen: set[str] = set()
        for key, value in walk("", out):
            if key not in seen:
                seen.add(key)
                rows.append((name, key[:64], value, passed))
    return rows


# --- the repository -----------------------------------------------------------------------


def process_owner() -> str:
    """``host:pid`` of this process (the recorder of the runs it creates)."""
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


def check_status(status: str) -> None:
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}; one of {', '.join(RUN_STATUSES)}")


def clean_tags(tags: Iterable[str]) -> list[str]:
    out: list[str] = []
    for t in tags:
        t = str(t).strip()[:128]
        if t and t not in out:
            out.append(t)
    return out


def escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def set_metrics(s: Session, step: StepRow, metrics: Mapping[str, Any]) -> None:
    if not getattr(step, "_fresh", False):
        s.execute(delete(MetricRow).where(MetricRow.step_id == step.id))
    for key, value in metrics.items():
        if isinstance(value, bool):
            value = float(value)
        if value is not None and not is_number(value):
            continue  # non-numeric entries belong in details
        v, nan = split_float(value)
        s.add(MetricRow(step_id=step.id, key=str(key)[:128], value=v, is_nan=nan))
