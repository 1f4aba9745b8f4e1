"""What the CLI and the panels show, defined once (no Qt).

The columns of the profile's layer and operator tables and of the sensitivity ranking, the
timing cells of a run's rows (the reference's p50, the row's own p50 and the speedup, all from
one StepTiming, so they agree), and the verdict words of a step, a parity check and an
analysis gate. ``studio profile`` /
``studio analyze`` / ``studio history`` print with them, and the Profile, Runs and Compare
panels build their tables and lines from them, so a column or a word changes in one place.

A :class:`Column` has the raw value of a row (the sort key), and a formatter; a column
without a formatter is text (left aligned, sorted as text).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from accel.timing.result import BASELINE, StepTiming
from studio.fmt import fmt_bytes, fmt_count, fmt_ms, fmt_num, fmt_speedup


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[Any], Any]
    fmt: Callable[[Any], str] | None = None  # None: a text column
    cli: bool = True  # shown in the CLI's table (the panels show every column)
    cli_width: int | None = None  # the CLI cuts longer cells to this many characters

    @property
    def numeric(self) -> bool:
        return self.fmt is not None

    def text(self, row: Any) -> str:
        """The cell: ``-`` for a missing number, empty for missing text."""
        v = self.value(row)
        if v is None:
            return "-" if self.fmt else ""
        return self.fmt(v) if self.fmt else str(v)

    def cli_text(self, row: Any) -> str:
        text = self.text(row)
        w = self.cli_width
        return text if w is None or len(text) <= w else text[: w - 3] + "..."


def _pct(v: float) -> str:
    return f"{v:.1f}%"


def layer_columns() -> list[Column]:
    """The profile's table of layers (torch modules or ONNX / OpenVINO nodes)."""
    return [
        Column("layer", lambda r: r.name or "(root)"),
        Column("type", lambda r: r.type),
        Column("self ms", lambda r: r.self_ms, fmt_ms),
        Column("incl. ms", lambda r: r.inclusive_ms, fmt_ms),
        Column("self %", lambda r: 100.0 * r.share, _pct),
        Column("calls", lambda r: r.calls, str),
        Column("FLOPs", lambda r: r.flops, fmt_count),
        Column("params", lambda r: r.params, fmt_count),
        Column("activations", lambda r: r.output_bytes, fmt_bytes),
        Column("weights", lambda r: r.param_bytes, fmt_bytes),
    ]


def op_columns(cuda: bool = False) -> list[Column]:
    """The profile's table of operators (torch.profiler events, attributed to a module)."""
    return [
        Column("operator", lambda r: r.name),
        Column("module", lambda r: "-" if r.module is None else (r.module or "(root)")),
        Column("calls", lambda r: r.calls, str),
        Column("self CPU ms", lambda r: r.self_cpu_ms, fmt_ms, cli=not cuda),
        Column("CPU ms", lambda r: r.cpu_ms, fmt_ms, cli=False),
        Column("device ms", lambda r: r.self_device_ms, fmt_ms, cli=cuda),
        Column("%", lambda r: 100.0 * r.share, _pct),
        Column("input shapes", lambda r: r.input_shapes, cli_width=48),
    ]


def sensitivity_columns(labelled: bool) -> list[Column]:
    """The ranking of ``accel.sensitivity`` (most sensitive first); rows are (rank, layer)."""
    cols = [
        Column("rank", lambda r: r[0], str),
        Column("layer", lambda r: r[1].name),
        Column("type", lambda r: r[1].type),
        Column("params", lambda r: r[1].num_params, str),
        Column("max_abs", lambda r: _error_or(r[1], r[1].max_abs), _num3_or_text),
        Column("mean_abs", lambda r: r[1].mean_abs, lambda v: fmt_num(v, 3)),
        Column("cosine", lambda r: r[1].cosine, lambda v: f"{v:.6f}"),
    ]
    if labelled:
        cols += [
            Column("accuracy", lambda r: r[1].accuracy, lambda v: fmt_num(v, 4)),
            Column("acc_drop", lambda r: r[1].accuracy_drop, lambda v: fmt_num(v, 4)),
        ]
    return cols


def _error_or(layer: Any, value: Any) -> Any:
    return f"error: {layer.error[:60]}" if getattr(layer, "error", None) else value


def _num3_or_text(v: Any) -> str:
    return v if isinstance(v, str) else fmt_num(v, 3)


def cli_table(columns: Sequence[Column], rows: Sequence[Any]) -> str:
    """The rows as the CLI prints them: the ``cli`` columns, numbers right-aligned."""
    from studio.commands._table import render_table

    shown = [c for c in columns if c.cli]
    return render_table(
        [c.header for c in shown],
        [[c.cli_text(r) for c in shown] for r in rows],
        align="".join("r" if c.numeric else "l" for c in shown),
    )


# -- timing: one row's StepTiming --------------------------------------------------------------

REF_HEADER, P50_HEADER, SPEEDUP_HEADER = "ref p50 ms", "p50 ms", "speedup [95% CI]"
TIMING_HEADERS = (REF_HEADER, P50_HEADER, SPEEDUP_HEADER)


def ref_ms(t: StepTiming | None) -> float | None:
    """The reference's p50 from the row's own comparison (the original's, on its row)."""
    return None if t is None else t.p50_ref_ms


def own_ms(t: StepTiming | None) -> float | None:
    """The row's own p50: the step's, or the original's on the original's row."""
    return None if t is None else t.p50_ms


def speedup_of(t: StepTiming | None) -> float | None:
    """The number a speedup column sorts by (1.0 on the original's row)."""
    if t is None:
        return None
    return 1.0 if t.mode == BASELINE else t.speedup


def ref_cell(t: StepTiming | None) -> str:
    return fmt_ms(ref_ms(t))


def p50_cell(t: StepTiming | None) -> str:
    return fmt_ms(own_ms(t))


def speedup_cell(t: StepTiming | None, *, mark: bool = True) -> str:
    """``2.31x [2.25-2.38]`` (``~`` when noisy), ``1.00x`` on the original's row."""
    if t is not None and t.mode == BASELINE:
        return "1.00x"
    return fmt_speedup(t, mark=mark)


def timing_cells(t: StepTiming | None) -> list[str]:
    """The three timing cells of a row, in TIMING_HEADERS order."""
    return [ref_cell(t), p50_cell(t), speedup_cell(t)]


def timing_columns(timing_of: Callable[[Any], StepTiming | None]) -> list[Column]:
    """The timing columns of a table whose rows give their StepTiming through ``timing_of``."""
    return [
        Column(REF_HEADER, lambda r: ref_ms(timing_of(r)), fmt_ms),
        Column(P50_HEADER, lambda r: own_ms(timing_of(r)), fmt_ms),
        Column(SPEEDUP_HEADER, lambda r: _Speedup(timing_of(r)), str),
    ]


class _Speedup:
    """A speedup cell's value: sorts by the speedup, prints with its interval."""

    def __init__(self, t: StepTiming | None) -> None:
        self.t = t

    def __str__(self) -> str:
        return speedup_cell(self.t)

    def __lt__(self, other: _Speedup) -> bool:
        return (speedup_of(self.t) or 0.0) < (speedup_of(other.t) or 0.0)


def timing_note(t: StepTiming | None) -> str | None:
    """Why a row's timing needs a second look (noise, timed apart, pinned CPUs), or None."""
    if t is None:
        return None
    notes = [n for n in (t.noise_reason if t.noisy else None, t.note) if n]
    return "; ".join(notes) or None


# The Runs panel's step table (and `studio run`'s summary shares its timing cells).
RUN_STEP_HEADERS = (
    "#",
    "step",
    *TIMING_HEADERS,
    "size",
    "parity",
    "worst metric",
    "accuracy",
)


def run_step_cells(
    number: int,
    name: str,
    timing: StepTiming | None,
    size_bytes: float | None,
    verdict: str,
    worst: str,
    accuracy: float | None,
) -> list[str]:
    """One row of RUN_STEP_HEADERS: the original's (number 0) or a step's."""
    return [
        str(number),
        name,
        *timing_cells(timing),
        fmt_bytes(size_bytes),
        verdict,
        worst,
        fmt_num(accuracy),
    ]


# -- verdicts ---------------------------------------------------------------------------------

PARITY_WORDS = {True: "pass", False: "FAIL", None: "-"}

# A step's status (accel.events.StepFinished / the store) when its parity does not decide.
_STATUS_WORDS = {
    "gate_failed": "FAIL",
    "failed": "error",
    "crashed": "crashed",
    "skipped": "skipped",
    "succeeded": "-",
}


def parity_verdict(passed: bool | None) -> str:
    """``pass`` / ``FAIL`` / ``-`` (not checked)."""
    return PARITY_WORDS[None if passed is None else bool(passed)]


def step_verdict(status: str | None, parity_passed: bool | None = None, index: int = 0) -> str:
    """One word for a step: ``reference`` for the original, ``error`` / ``crashed`` /
    ``skipped`` / ``FAIL`` (a gate) from the status, else the parity check's verdict."""
    if index < 0:
        return "reference"
    if status in ("failed", "crashed", "skipped", "gate_failed"):
        return _STATUS_WORDS[status]
    if parity_passed is not None:
        return parity_verdict(parity_passed)
    return _STATUS_WORDS.get(status or "", status or "-")


def event_parity_passed(parity: dict[str, Any] | None) -> bool | None:
    """The verdict of a StepFinished event's parity report (None: not checked)."""
    if not parity:
        return None
    passed = parity.get("passed")
    return None if passed is None else bool(passed)


def gate_verdict(met: bool) -> str:
    """The analysis gate's verdict on its proposed keep-in-float list."""
    return (
        "meets the gate" if met else "no exclude list that leaves a layer quantized meets the gate"
    )


def trial_note(t: Any) -> str:
    """A search trial's note, the same in the CLI and the Optimize dialog: why its gate or
    its build failed, or that the original was left untimed (a latency or generation
    objective is a ratio against the original: timed against itself it says nothing)."""
    if t.gate or t.error:
        return str(t.gate or t.error)
    if not t.steps and t.status == "ok" and t.timing is None:
        return "the reference: not timed against itself"
    return ""


def best_figure(res: Any) -> str:
    """': 5.40x [5.10-5.70] (the final side-by-side measurement)' when the final re-timing
    chose a search's best; else its own trial's figure. The same in the CLI and the Optimize
    dialog: the best is named with the figure it was chosen on."""
    t = res.best_timing()
    if t is None or t.speedup is None:
        return ""
    final = res.final is not None and res.final.done
    where = "the final side-by-side measurement" if final else "its own trial's measurement"
    low, high = t.speedup_low, t.speedup_high
    rng = f" [{low:.2f}-{high:.2f}]" if low is not None and high is not None else ""
    return f": {t.speedup:.2f}x{rng} ({where})"


def final_retime_line(res: Any) -> str:
    """The final side-by-side re-timing in one line ('' when there was none): each re-timed
    trial's figure from that one measurement, so a best chosen there is not read against the
    table's figures, which are each trial's own measurement."""
    final = res.final
    if final is None:
        return ""
    if not final.done:
        return f"Final side-by-side re-timing not done ({final.reason}): chosen on own figures."
    parts = []
    for n in final.trials:
        ft = final.timings.get(n)
        side = "not timed" if ft is None or ft.speedup is None else f"{ft.speedup:.2f}x"
        parts.append(f"trial {n} {side}" + (" (chosen)" if n == final.winner else ""))
    return (
        "Side by side with the original in one final measurement: "
        + ", ".join(parts)
        + "; the table's speedups are each trial's own measurement."
    )
