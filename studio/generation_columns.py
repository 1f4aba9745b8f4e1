"""What the CLI and the panels show of a generation workload (no Qt): TTFT, TPOT and
tokens/s with their intervals, memory split into weights and KV cache. The metrics are the
flat keys of ``accel.generate`` (``ttft_ms``, ``ttft_ms_low``, ...), as steps store them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from studio.fmt import fmt_bytes
from studio.tables import Column

# (metric key, label, unit, digits)
FIGURES = (
    ("ttft_ms", "TTFT", "ms", 2),
    ("tpot_ms", "TPOT", "ms/token", 2),
    ("tokens_per_s", "tokens/s", "tokens/s", 1),
)


def with_interval(metrics: Mapping[str, Any], key: str, digits: int = 2) -> str:
    """``12.34 [12.01, 12.90]``; ``-`` when the metric is missing."""
    value = metrics.get(key)
    if value is None:
        return "-"
    low, high = metrics.get(key + "_low"), metrics.get(key + "_high")
    text = f"{value:,.{digits}f}"
    if low is not None and high is not None:
        text += f" [{low:,.{digits}f}, {high:,.{digits}f}]"
    return text


def has_generation(metrics: Mapping[str, Any] | None) -> bool:
    """Whether a step's metrics come from the generation workload."""
    return bool(metrics) and metrics.get("tokens_per_s") is not None


def profile_lines(metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The figure lines of ``studio profile --generate`` (label, value with 95% interval)."""
    lines = [
        (f"{label}", f"{with_interval(metrics, key, digits)} {unit}")
        for key, label, unit, digits in FIGURES
    ]
    weights = metrics.get("weights_bytes") or 0
    kv = metrics.get("kv_cache_bytes") or 0
    lines += [
        ("weights", fmt_bytes(weights)),
        ("KV cache", fmt_bytes(kv)),
        ("peak (weights + KV)", fmt_bytes(weights + kv)),
    ]
    return lines


def _metric(key: str, metrics_of: Callable[[Any], Mapping[str, Any] | None]) -> Callable:
    def value(row: Any) -> Any:
        m = metrics_of(row) or {}
        return m.get(key)

    return value


def generation_columns(metrics_of: Callable[[Any], Mapping[str, Any] | None]) -> list[Column]:
    """Columns of a step table (Runs panel, ``studio compare``) for generation runs:
    TTFT, TPOT, tokens/s and the tokens/s ratio against the original, each with its
    interval in the panel's cell text. ``metrics_of(row)`` gives the row's metrics."""

    def fmt(digits: int) -> Callable[[float], str]:
        return lambda v: f"{v:,.{digits}f}"

    cols = [
        Column(f"{label} {unit}", _metric(key, metrics_of), fmt(digits))
        for key, label, unit, digits in FIGURES
    ]
    cols.append(
        Column("tok/s ratio", _metric("tokens_per_s_ratio", metrics_of), lambda v: f"{v:.2f}x")
    )
    cols.append(Column("TF top-1", _metric("tf_top1", metrics_of), lambda v: f"{v:.3f}"))
    return cols


def interval_text(metrics: Mapping[str, Any]) -> str:
    """One line for a step's generation figures with intervals (tooltips, compare notes)."""
    return "; ".join(
        f"{label} {with_interval(metrics, key, digits)} {unit}"
        for key, label, unit, digits in FIGURES
    )


# The Runs panel's extra columns (after its own): a step's generation figures, each cell the
# median with its 95% interval in the tooltip; empty for a forward-workload run.
PANEL_HEADERS = [f"{label} {unit}" for _key, label, unit, _d in FIGURES]


def panel_cells(metrics: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(text, tooltip) for each of PANEL_HEADERS."""
    m = metrics or {}
    cells = []
    for key, label, unit, digits in FIGURES:
        value = m.get(key)
        text = "" if value is None else f"{value:,.{digits}f}"
        tip = f"{label}: {with_interval(m, key, digits)} {unit} (median [95% interval])"
        cells.append((text, tip if value is not None else ""))
    return cells


def compare_cells(
    rows: Mapping[tuple[int, str, str], list[Any]], index: int, pass_name: str, metric: str
) -> list[str] | None:
    """``studio compare``'s cells of one generation metric row (the value with its interval
    per run); [] for the rows shown inside another (``_low``/``_high``); None: not ours."""
    keys = {key for key, *_ in FIGURES}
    if metric.removesuffix("_low").removesuffix("_high") in keys and metric not in keys:
        return []
    if metric not in keys:
        return None
    digits = next(d for key, _l, _u, d in FIGURES if key == metric)
    values = rows[(index, pass_name, metric)]
    out = []
    for i in range(len(values)):
        m = {
            k: rows[(index, pass_name, k)][i]
            for k in (metric, metric + "_low", metric + "_high")
            if (index, pass_name, k) in rows
        }
        out.append(with_interval(m, metric, digits))
    return out
