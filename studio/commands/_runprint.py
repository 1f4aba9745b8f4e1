"""Live console view of a run, fed with runner events (typed, or their dicts from a worker)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from accel.events import (
    Event,
    Log,
    Progress,
    RunFailed,
    RunFinished,
    RunStarted,
    StepFinished,
)
from accel.timing.result import StepTiming
from studio.commands._table import fmt_bytes, fmt_ms, render_table
from studio.fmt import NOISY_MARK, is_noisy
from studio.generation_columns import CLI_HEADERS, GENERATION_NOTE, cli_rows
from studio.report import worst_metric as _worst
from studio.tables import (
    TIMING_HEADERS,
    event_parity_passed,
    p50_cell,
    ref_cell,
    speedup_cell,
    step_verdict,
    timing_cells,
)
from studio.usecases import typed_event


class RunPrinter:
    """Prints one line per finished step, a progress bar on long steps, then a summary table."""

    def __init__(self, stream: TextIO | None = None, steps_total: int | None = None):
        self.out = stream or sys.stdout
        self.tty = self.out.isatty()
        self.baseline: dict[str, Any] = {}
        self.baseline_timing: StepTiming | None = None
        self.rows: list[StepFinished] = []
        self.total = steps_total
        self.status: str | None = None
        self.error: str | None = None
        self.run_dir: str | None = None
        self._bar_shown = False

    def on_event(self, event: Event | Mapping[str, Any]) -> None:
        match typed_event(event):
            case RunStarted() as e:
                self._started(e)
            case Progress(index=index, fraction=fraction, message=message):
                if self.tty and index >= 0:
                    bar = "#" * int(fraction * 20)
                    self.out.write(f"\r     {message[:40]:<40} [{bar:<20}] {fraction * 100:3.0f}%")
                    self.out.flush()
                    self._bar_shown = True
            case Log(level=level, message=message) if level in ("warning", "error"):
                self._line(f"     {level}: {message}")
            case StepFinished() as e:
                self.rows.append(e)
                self._line(_step_line(e))
            case RunFinished(status=status):
                self.status = status
            case RunFailed(error=error):
                self.status, self.error = "failed", error

    def _started(self, e: RunStarted) -> None:
        self.baseline, self.total, self.run_dir = e.baseline, e.num_steps, e.run_dir
        self.baseline_timing = e.baseline_timing
        env = e.environment
        self._line(
            f"model {e.model_source} ({e.model_kind}) on {e.device}"
            f" | torch {env.get('torch', '?')} | {env.get('cpu', env.get('cpu_name', ''))}"
        )
        self._line(f"     {'':<22} {'ref ms':>9} {'p50 ms':>9}  {'speedup [95% CI]':>18}")
        self._line(_line_of("  0", "original", self.baseline_timing) + "  reference")

    def summary(self) -> str:
        """The run's table: every row's timing cells from its own StepTiming."""
        b = self.baseline_timing
        rows = [
            ["0", "original", *timing_cells(b), _p90(b), fmt_bytes(self.baseline.get("size_bytes"))]
            + ["-", "-"]
        ]
        for e in self.rows:
            m = e.metrics or {}
            t = e.timing
            rows.append(
                [str(e.index + 1), e.pass_name, *timing_cells(t), _p90(t)]
                + [fmt_bytes(m.get("size_bytes")), _verdict(e)]
                + [_worst(e.parity) if e.parity else (e.error or "")[:60]]
            )
        headers = ["#", "step", *TIMING_HEADERS, "p90 ms", "size", "parity", "worst metric"]
        table = render_table(headers, rows, "rlrrrrrll")
        return table + noise_line(self.rows) + apart_line(self.rows) + self._generation()

    def _generation(self) -> str:
        """The generation table under the run's, when the run generated ("" if not)."""
        steps = [(-1, "original", self.baseline)]
        steps += [(e.index, e.pass_name, e.metrics) for e in self.rows]
        rows = cli_rows(steps)
        if not rows:
            return ""
        align = "rl" + "r" * (len(CLI_HEADERS) - 2)
        return "\n\n" + render_table(CLI_HEADERS, rows, align) + "\n" + GENERATION_NOTE

    def _line(self, text: str) -> None:
        if self._bar_shown:
            self.out.write("\r" + " " * 80 + "\r")
            self._bar_shown = False
        self.out.write(text + "\n")
        self.out.flush()


def _verdict(e: StepFinished) -> str:
    return step_verdict(e.status, event_parity_passed(e.parity), e.index)


def _p90(t: StepTiming | None) -> str:
    own = None if t is None else (t.step or t.reference)
    return fmt_ms(own.p90_ms if own is not None else None)


def _line_of(num: str, name: str, t: StepTiming | None) -> str:
    return f"{num:>3}  {name:<22} {ref_cell(t):>9} {p50_cell(t):>9}  {speedup_cell(t):>18}"


def _step_line(e: StepFinished) -> str:
    """The live line of a finished step, with its noise and timed-apart notes."""
    t = e.timing
    line = (
        f"{_line_of(str(e.index + 1), e.pass_name, t)}  {_verdict(e):<5} {_worst(e.parity or {})}"
    )
    if is_noisy(t) and t.noise_reason:
        line += f"\n     noisy timing: {t.noise_reason}"
    if t is not None and t.mode == "apart" and t.note:
        line += f"\n     {t.note}"
    if e.error:
        line += f"\n     {e.error}"
    return line


def apart_line(step_events: Sequence[StepFinished | Mapping[str, Any]]) -> str:
    """One line under a run's table when some steps were timed apart from the original
    (memory fallback: no interval) ("" if none)."""
    steps_ = [typed_event(e) for e in step_events]
    apart = [
        e
        for e in steps_
        if isinstance(e, StepFinished) and e.timing is not None and e.timing.mode == "apart"
    ]
    if not apart:
        return ""
    steps = ", ".join(str(e.index + 1) for e in apart)
    return (
        f"\nstep(s) {steps} timed apart from the original, not side by side (memory): "
        "the original was re-timed right before each; no interval"
    )


def noise_line(step_events: Sequence[StepFinished | Mapping[str, Any]]) -> str:
    """One line under a run's table when some steps were timed on a busy machine ("" if none)."""
    steps_ = [typed_event(e) for e in step_events]
    noisy = [e for e in steps_ if isinstance(e, StepFinished) and is_noisy(e.timing)]
    if not noisy:
        return ""
    why = next((r for e in noisy if (r := e.timing.noise_reason)), "")
    steps = ", ".join(str(e.index + 1) for e in noisy)
    return (
        f"\n{NOISY_MARK} noisy timing in step(s) {steps}: {why or 'see the step details'}; "
        "re-run on a quieter machine for numbers to rely on"
    )
