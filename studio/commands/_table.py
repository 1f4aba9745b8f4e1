"""Plain-text tables and number formatting shared by CLI commands."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from studio.fmt import fmt_bytes, fmt_count, fmt_ms, fmt_num

__all__ = [
    "fmt_bytes",
    "fmt_count",
    "fmt_duration",
    "fmt_ms",
    "fmt_num",
    "fmt_when",
    "render_pairs",
    "render_table",
]


def fmt_when(t: dt.datetime | None) -> str:
    """A stored time in the local zone, to the minute ("-" when unknown)."""
    return t.astimezone().strftime("%Y-%m-%d %H:%M") if t else "-"


def fmt_duration(s: float | None) -> str:
    """Seconds as "12.3 s", or minutes from two minutes on ("-" when unknown)."""
    if s is None:
        return "-"
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def render_pairs(pairs: Sequence[tuple[str, str]]) -> str:
    """``key  value`` lines with the keys padded to one width."""
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in pairs)


def render_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None
) -> str:
    """Aligned table; ``align`` is one char per column: 'l' or 'r' (default: numbers right)."""
    cells = [[str(c) for c in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if align is None:
        align = "".join(
            "r" if rows and all(_numeric(r[i]) for r in rows if r[i] not in (None, "-")) else "l"
            for i in range(len(headers))
        )
    out = []
    for j, r in enumerate(cells):
        line = "  ".join(
            c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(r, widths, align)
        )
        out.append(line.rstrip())
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _numeric(v: Any) -> bool:
    if isinstance(v, (int, float)):
        return True
    s = str(v).strip().rstrip("x%").replace(",", "")
    for suffix in (" ms", " B", " KiB", " MiB", " GiB", "k", "M", "G", "T"):
        s = s.removesuffix(suffix)
    try:
        float(s)
        return True
    except ValueError:
        return False
