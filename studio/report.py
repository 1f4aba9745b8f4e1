"""Run reports without Qt: per-step rows, Pareto fronts, CSV / JSON / Markdown exports.

Used by the History and Runs panels and testable on plain store records.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accel.jsonable import jsonable
from accel.timing.result import StepTiming
from studio.tables import own_ms, ref_ms, speedup_cell, speedup_of, step_verdict

STEP_COLUMNS = (
    "run",
    "model",
    "recipe",
    "status",
    "step",
    "pass",
    "ref_p50_ms",
    "p50_ms",
    "speedup",
    "speedup_low",
    "speedup_high",
    "size_bytes",
    "parity",
    "max_abs",
    "cosine",
    "accuracy",
)


@dataclass(frozen=True)
class StepRow:
    run_id: str
    model: str
    recipe: str
    run_status: str
    index: int  # -1: the original model
    pass_name: str
    status: str
    timing: StepTiming | None  # latencies and speedup from one comparison
    size_bytes: float | None
    parity_passed: bool | None
    max_abs: float | None
    cosine: float | None
    accuracy: float | None
    error: str = ""

    @property
    def verdict(self) -> str:
        return step_verdict(self.status, self.parity_passed, self.index)

    @property
    def p50_ms(self) -> float | None:
        """The row's own latency (the original's on its row), as its table shows it."""
        return own_ms(self.timing)

    @property
    def speedup(self) -> float | None:
        return speedup_of(self.timing)

    @property
    def noisy(self) -> bool:
        return self.timing is not None and self.timing.noisy


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def worst_parity(step: Any) -> tuple[float | None, float | None]:
    """(largest max-abs error, smallest cosine) over a step's outputs."""
    max_abs: float | None = None
    cosine: float | None = None
    for p in getattr(step, "parity", []) or []:
        m = p.metrics if hasattr(p, "metrics") else p
        a, c = _num(m.get("max_abs")), _num(m.get("cosine"))
        if a is not None:
            max_abs = a if max_abs is None else max(max_abs, a)
        if c is not None:
            cosine = c if cosine is None else min(cosine, c)
    return max_abs, cosine


def step_rows(detail: Any) -> list[StepRow]:
    """One row for the original model and one per step of a stored run (RunDetail)."""
    run = detail.run
    base = detail.baseline or {}
    original = next((st for st in detail.steps if st.index < 0), None)
    head = (run.id, run.model_source, run.recipe_name, run.status)
    rows = [
        StepRow(
            *head,
            -1,
            "original",
            "reference",
            original.timing if original is not None else None,
            _num(base.get("size_bytes")),
            None,
            None,
            None,
            _num(base.get("accuracy")),
        )
    ]
    for st in sorted(detail.steps, key=lambda s: s.index):
        if st.index < 0:
            continue
        m = st.metrics or {}
        max_abs, cos = worst_parity(st)
        rows.append(
            StepRow(
                *head,
                st.index,
                st.pass_name,
                st.status,
                st.timing,
                _num(m.get("size_bytes")),
                st.parity_passed,
                max_abs,
                cos,
                _num(m.get("accuracy")),
                st.error or "",
            )
        )
    return rows


def worst_metric(parity: dict[str, Any] | None, sep: str = " ") -> str:
    """The worst output's max abs error and cosine of a ParityReport dict,
    e.g. 'max_abs=3.1e-03 cos=0.99991 (out: cosine 0.91 < 0.999)'."""
    outs = (parity or {}).get("outputs") or []
    if not outs:
        return ""
    max_abs = max((o.get("max_abs") or 0.0) for o in outs)
    cos_vals = [o.get("cosine") for o in outs if o.get("cosine") is not None]
    text = f"max_abs={max_abs:.2e}"
    if cos_vals:
        text += f"{sep}cos={min(cos_vals):.5f}"
    if parity.get("first_failure"):
        text += f" ({parity['first_failure']})"
    return text


def pareto_front(
    points: Sequence[tuple[float, float]],
    intervals: Sequence[tuple[float, float] | None] | None = None,
) -> list[int]:
    """Indices of points not dominated when maximising x (speedup) and minimising y (error).

    With ``intervals`` (the speedups' (low, high), None where unknown), a speedup only beats
    another when its interval lies wholly above the other's; overlapping intervals are a
    tie, and of two tied points only a strictly lower error dominates."""

    def iv(i: int) -> tuple[float, float]:
        got = intervals[i] if intervals is not None else None
        return got if got is not None else (points[i][0], points[i][0])

    def dominates(j: int, i: int) -> bool:
        (lo_j, hi_j), (lo_i, hi_i) = iv(j), iv(i)
        y_j, y_i = points[j][1], points[i][1]
        faster = lo_j > hi_i
        tie = lo_j <= hi_i and lo_i <= hi_j
        return (faster and y_j <= y_i) or (tie and y_j < y_i)

    front = [
        i
        for i in range(len(points))
        if not any(dominates(j, i) for j in range(len(points)) if j != i)
    ]
    return sorted(front, key=lambda i: points[i][0])


def fastest(
    speedups: Sequence[float], intervals: Sequence[tuple[float, float] | None]
) -> list[int]:
    """The fastest point and every point tied with it (intervals overlapping its interval).

    More than one index means a tie: the data cannot tell which is faster."""
    if not speedups:
        return []
    best = max(range(len(speedups)), key=lambda i: speedups[i])
    lo_b, hi_b = intervals[best] or (speedups[best], speedups[best])
    tied = [
        i
        for i, iv in enumerate(intervals)
        if i != best and iv is not None and iv[0] <= hi_b and lo_b <= iv[1]
    ]
    return [best, *tied]


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _row_values(r: StepRow) -> list[Any]:
    return [
        r.run_id,
        r.model,
        r.recipe,
        r.run_status,
        r.index + 1,
        r.pass_name,
        ref_ms(r.timing),
        r.p50_ms,
        r.speedup,
        *(r.timing.speedup_bounds or (None, None) if r.timing else (None, None)),
        r.size_bytes,
        r.verdict,
        r.max_abs,
        r.cosine,
        r.accuracy,
    ]


def runs_to_csv(details: Sequence[Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(STEP_COLUMNS)
    for d in details:
        for r in step_rows(d):
            w.writerow([_fmt(v) for v in _row_values(r)])
    return buf.getvalue()


def runs_to_json(details: Sequence[Any]) -> str:
    from studio.store.records import to_json

    return json.dumps([_json_safe(to_json(d)) for d in details], indent=2, default=str)


def _json_safe(v: Any) -> Any:
    return jsonable(v, nonfinite="null")


def runs_to_markdown(details: Sequence[Any]) -> str:
    lines = ["# Accel Studio runs", ""]
    for d in details:
        run = d.run
        env = d.environment or {}
        lines += [
            f"## {run.name or run.recipe_name or 'run'} `{run.id[:8]}` — {run.status}",
            "",
            f"- model: `{run.model_source}` ({run.model_kind}) on {run.device}",
            f"- recipe: {run.recipe_name} (`{(run.recipe_hash or '')[:12]}`)",
            f"- started: {run.started_at or run.created_at}; duration: {_fmt(run.duration_s)} s",
            f"- torch {env.get('torch', '?')}, onnxruntime {env.get('onnxruntime', '?')}, CPU {env.get('cpu', env.get('cpu_name', '?'))}",
        ]
        if run.tags:
            lines.append(f"- tags: {', '.join(run.tags)}")
        if run.notes:
            lines.append(f"- notes: {run.notes}")
        if run.error:
            lines.append(f"- error: {run.error}")
        lines += [
            "",
            "| # | step | ref p50 ms | p50 ms | speedup [95% CI] | size | parity | max abs | cosine | accuracy |",
            "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
        ]
        for r in step_rows(d):
            lines.append(
                f"| {r.index + 1} | {r.pass_name} | {_fmt(ref_ms(r.timing))} | {_fmt(r.p50_ms)} | "
                f"{speedup_cell(r.timing) if r.timing else ''} | {_fmt(r.size_bytes)} | {r.verdict} | "
                f"{_fmt(r.max_abs)} | {_fmt(r.cosine)} | {_fmt(r.accuracy)} |"
            )
        lines.append("")
    return "\n".join(lines)
