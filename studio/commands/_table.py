"""Plain-text tables and number formatting shared by CLI commands."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_count(n: float | None) -> str:
    if n is None:
        return "-"
    n = float(n)
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def fmt_ms(v: float | None) -> str:
    return "-" if v is None else (f"{v:.3f}" if v < 10 else f"{v:.1f}")


def fmt_num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v == 0:
            return "0"
        if abs(v) >= 1e4 or abs(v) < 1e-3:
            return f"{v:.{digits}g}"
        return (
            f"{v:.{digits}f}".rstrip("0").rstrip(".")
            if "." in f"{v:.{digits}f}"
            else f"{v:.{digits}f}"
        )
    return str(v)


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
