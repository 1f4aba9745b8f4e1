"""Number formatting shared by the CLI tables and the panels (no Qt)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel.timing.result import StepTiming


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_count(n: float | None, sep: str = "") -> str:
    if n is None:
        return "-"
    n = float(n)
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{sep}{unit}"
    return f"{n:.0f}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """ "1 run", "2 runs" (``plural`` where adding an s is wrong)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


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


NOISY_MARK = "~"  # after a speedup timed while the machine was busy (or too scattered)


def speedup_interval(t: StepTiming | None) -> tuple[float, float, float] | None:
    """(speedup, low, high) of a row's timing; None without an interval (runs recorded
    before intervals existed, steps timed apart, show none, never a made-up one)."""
    if t is None or t.speedup is None or t.speedup_bounds is None:
        return None
    lo, hi = t.speedup_bounds
    return float(t.speedup), float(lo), float(hi)


def is_noisy(t: StepTiming | None) -> bool:
    return t is not None and t.noisy


def fmt_speedup(t: StepTiming | None, *, mark: bool = True) -> str:
    """``2.31x [2.25-2.38]`` (``~`` appended when noisy); ``2.31x`` without an interval."""
    if t is None or t.speedup is None:
        return "-"
    iv = speedup_interval(t)
    text = f"{float(t.speedup):.2f}x"
    if iv is not None:
        text += f" [{iv[1]:.2f}-{iv[2]:.2f}]"
    if mark and is_noisy(t):
        text += NOISY_MARK
    return text


def intervals_overlap(a: StepTiming | None, b: StepTiming | None) -> bool | None:
    """Whether two rows' speedup intervals overlap (a tie); None when either has none."""
    ia, ib = speedup_interval(a), speedup_interval(b)
    if ia is None or ib is None:
        return None
    return ia[1] <= ib[2] and ib[1] <= ia[2]
