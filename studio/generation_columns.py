"""What the CLI and the panels show of a generation workload (no Qt): TTFT, TPOT and
tokens/s with their intervals, memory split into weights and KV cache. The metrics are the
flat keys of ``accel.generate`` (``ttft_ms``, ``ttft_ms_low``, ...), as steps store them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from studio.fmt import fmt_bytes

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


def reference_value(metrics: Mapping[str, Any], key: str, original: bool) -> Any:
    """The original's figure that a row is compared with: on a step's row the one measured
    beside it (``baseline_<key>``, alternating rounds), on the original's row its own."""
    return metrics.get(key if original else "baseline_" + key)


# (column header, value of a row's metrics, formatter) for the generation table of a run: the
# reference's tokens/s and TTFT measured beside each step, so each row's ratio is its own
# tok/s over its own ref tok/s (the original's row, measured alone, is its own reference).
def _cli_columns(original: bool) -> list[tuple[str, Callable[[Mapping[str, Any]], str]]]:
    def ratio(m: Mapping[str, Any]) -> str:
        if original:
            return "1.00x" if m.get("tokens_per_s") is not None else "-"
        if m.get("tokens_per_s_ratio") is None:
            return "-"
        low, high = m.get("tokens_per_s_ratio_low"), m.get("tokens_per_s_ratio_high")
        text = f"{m['tokens_per_s_ratio']:.2f}x"
        return text + (f" [{low:.2f}-{high:.2f}]" if low is not None and high is not None else "")

    def ref(key: str, digits: int) -> Callable[[Mapping[str, Any]], str]:
        def cell(m: Mapping[str, Any]) -> str:
            v = reference_value(m, key, original)
            return "-" if v is None else f"{v:,.{digits}f}"

        return cell

    def number(key: str, digits: int) -> Callable[[Mapping[str, Any]], str]:
        return lambda m: "-" if m.get(key) is None else f"{m[key]:,.{digits}f}"

    return [
        ("ref tok/s", ref("tokens_per_s", 1)),
        ("tokens/s [95% CI]", lambda m: with_interval(m, "tokens_per_s", 1)),
        ("tok/s ratio [95% CI]", ratio),
        ("ref TTFT ms", ref("ttft_ms", 1)),
        ("TTFT ms [95% CI]", lambda m: with_interval(m, "ttft_ms", 1)),
        ("TPOT ms", number("tpot_ms", 2)),
        ("KV cache", lambda m: fmt_bytes(m.get("kv_cache_bytes"))),
        ("TF top-1", number("tf_top1", 3)),
    ]


CLI_HEADERS = ["#", "step", *(h for h, _ in _cli_columns(True))]


def cli_rows(steps: Sequence[tuple[int, str, Mapping[str, Any] | None]]) -> list[list[str]]:
    """The rows of a run's generation table (``studio run``, ``studio show``): one per
    ``(index, step name, metrics)``, index -1 for the original; [] when nothing generated."""
    if not any(has_generation(m) for _i, _n, m in steps):
        return []
    rows = []
    for index, name, metrics in steps:
        m = metrics or {}
        cells = [cell(m) for _h, cell in _cli_columns(index < 0)]
        rows.append([str(index + 1), "original" if index < 0 else name, *cells])
    return rows


GENERATION_NOTE = (
    "generation: ref tok/s and ref TTFT are the original's, timed in alternating rounds with "
    "each step; TPOT is ms per token after the first; TF top-1: teacher-forced agreement"
)


def interval_text(metrics: Mapping[str, Any]) -> str:
    """One line for a step's generation figures with intervals (tooltips, compare notes)."""
    return "; ".join(
        f"{label} {with_interval(metrics, key, digits)} {unit}"
        for key, label, unit, digits in FIGURES
    )


# The Runs panel's extra columns (after its own): the original's tokens/s measured beside the
# step (the step's speedup is the ratio of its tokens/s to this), then the step's generation
# figures, each cell the median with its 95% interval in the tooltip; empty for a
# forward-workload run.
PANEL_HEADERS = ["ref tokens/s", *(f"{label} {unit}" for _key, label, unit, _d in FIGURES)]


def panel_cells(metrics: Mapping[str, Any] | None, original: bool = False) -> list[tuple[str, str]]:
    """(text, tooltip) for each of PANEL_HEADERS; ``original``: the original's own row."""
    m = metrics or {}
    ref = reference_value(m, "tokens_per_s", original)
    ref_tip = (
        "the original's tokens/s, timed in alternating rounds with this step"
        if not original
        else "the original's tokens/s"
    )
    cells = [("" if ref is None else f"{ref:,.1f}", ref_tip if ref is not None else "")]
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
    per run; the step's own figures and the original's measured beside it, ``baseline_``);
    [] for the rows shown inside another (``_low``/``_high``); None: not ours."""
    digits_of = {key: d for key, _l, _u, d in FIGURES}
    digits_of.update({"baseline_" + key: d for key, d in list(digits_of.items())})
    if metric.removesuffix("_low").removesuffix("_high") in digits_of and metric not in digits_of:
        return []
    if metric not in digits_of:
        return None
    digits = digits_of[metric]
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


def sweep_settings(recipe: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(prompt tokens, new tokens) of a stored generation run's recipe; None otherwise."""
    from accel.generate.settings import DEFAULT_NEW_TOKENS, DEFAULT_PROMPT_TOKENS

    bench = (recipe or {}).get("benchmark") or {}
    if bench.get("workload") != "generate":
        return None
    return (
        int(bench.get("prompt_tokens") or DEFAULT_PROMPT_TOKENS),
        int(bench.get("new_tokens") or DEFAULT_NEW_TOKENS),
    )
