"""What the CLI and the panels show, defined once (no Qt).

The columns of the profile's layer and operator tables and of the sensitivity ranking, and
the verdict words of a step, a parity check and an analysis gate. ``studio profile`` /
``studio analyze`` / ``studio history`` print with them, and the Profile, Runs and Compare
panels build their tables and lines from them, so a column or a word changes in one place.

A :class:`Column` has the raw value of a row (the sort key), and a formatter; a column
without a formatter is text (left aligned, sorted as text).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from studio.fmt import fmt_bytes, fmt_count, fmt_ms, fmt_num


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
