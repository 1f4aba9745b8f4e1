"""Live console view of a run, fed with runner event dicts (in-process or from a worker)."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from studio.commands._table import fmt_bytes, fmt_ms, render_table
from studio.fmt import NOISY_MARK, fmt_speedup, is_noisy
from studio.report import worst_metric as _worst


class RunPrinter:
    """Prints one line per finished step, a progress bar on long steps, then a summary table."""

    def __init__(self, stream: TextIO | None = None, steps_total: int | None = None):
        self.out = stream or sys.stdout
        self.tty = self.out.isatty()
        self.baseline: dict[str, Any] = {}
        self.rows: list[dict[str, Any]] = []
        self.total = steps_total
        self.status: str | None = None
        self.error: str | None = None
        self.run_dir: str | None = None
        self._bar_shown = False

    def on_event(self, e: dict[str, Any]) -> None:
        kind = e.get("event")
        if kind == "run_started":
            self.baseline = e.get("baseline", {})
            self.total = e.get("num_steps")
            self.run_dir = e.get("run_dir")
            env = e.get("environment", {})
            self._line(
                f"model {e['model_source']} ({e['model_kind']}) on {e['device']}"
                f" | torch {env.get('torch', '?')} | {env.get('cpu', env.get('cpu_name', ''))}"
            )
            self._line(
                f"  0  {'original':<22} {fmt_ms(self.baseline.get('latency_p50_ms')):>9} ms    1.00x"
            )
        elif kind == "step_started":
            self._step_label = e["pass_name"]
        elif kind == "progress":
            if self.tty and e.get("index", -1) >= 0:
                frac = float(e.get("fraction", 0))
                bar = "#" * int(frac * 20)
                self.out.write(
                    f"\r     {e.get('message', '')[:40]:<40} [{bar:<20}] {frac * 100:3.0f}%"
                )
                self.out.flush()
                self._bar_shown = True
        elif kind == "log":
            if e.get("level") in ("warning", "error"):
                self._line(f"     {e['level']}: {e['message']}")
        elif kind == "step_finished":
            self.rows.append(e)
            m = e.get("metrics") or {}
            parity = e.get("parity") or {}
            verdict = {"succeeded": "pass", "gate_failed": "FAIL", "failed": "ERROR"}.get(
                e["status"], e["status"]
            )
            line = (
                f"{e['index'] + 1:>3}  {e['pass_name']:<22} {fmt_ms(m.get('latency_p50_ms')):>9} ms"
                f"  {fmt_speedup(m):>18}  {verdict:<5} {_worst(parity)}"
            )
            timing = (e.get("details") or {}).get("timing") or {}
            reason = timing.get("noise_reason")
            if is_noisy(m) and reason:
                line += f"\n     noisy timing: {reason}"
            if timing.get("mode") == "sequential":
                line += f"\n     {timing.get('note')}"
            if e.get("error"):
                line += f"\n     {e['error']}"
            self._line(line)
        elif kind == "run_finished":
            self.status = e["status"]
        elif kind == "run_failed":
            self.status = "failed"
            self.error = e.get("error")

    def summary(self) -> str:
        rows = [
            [
                "0",
                "original",
                fmt_ms(self.baseline.get("latency_p50_ms")),
                fmt_ms(self.baseline.get("latency_p90_ms")),
                "1.00x",
                fmt_bytes(self.baseline.get("size_bytes")),
                "-",
                "-",
            ]
        ]
        for e in self.rows:
            m = e.get("metrics") or {}
            parity = e.get("parity") or {}
            rows.append(
                [
                    str(e["index"] + 1),
                    e["pass_name"],
                    fmt_ms(m.get("latency_p50_ms")),
                    fmt_ms(m.get("latency_p90_ms")),
                    fmt_speedup(m),
                    fmt_bytes(m.get("size_bytes")),
                    {"succeeded": "pass", "gate_failed": "FAIL", "failed": "error"}.get(
                        e["status"], e["status"]
                    ),
                    _worst(parity) if parity else (e.get("error") or "")[:60],
                ]
            )
        table = render_table(
            ["#", "step", "p50 ms", "p90 ms", "speedup [95% CI]", "size", "parity", "worst metric"],
            rows,
            "rlrrrrll",
        )
        return table + noise_line(self.rows) + apart_line(self.rows)

    def _line(self, text: str) -> None:
        if self._bar_shown:
            self.out.write("\r" + " " * 80 + "\r")
            self._bar_shown = False
        self.out.write(text + "\n")
        self.out.flush()


def apart_line(step_events: list[dict[str, Any]]) -> str:
    """One line under a run's table when some steps were timed apart from the original
    (memory fallback: no interval) ("" if none)."""
    apart = [
        e
        for e in step_events
        if ((e.get("details") or {}).get("timing") or {}).get("mode") == "sequential"
    ]
    if not apart:
        return ""
    steps = ", ".join(str(e["index"] + 1) for e in apart)
    why = apart[0]["details"]["timing"].get("sequential_reason") or "memory"
    return (
        f"\nstep(s) {steps} timed apart from the original, not side by side ({why}): "
        "the original was re-timed right before each; no interval"
    )


def noise_line(step_events: list[dict[str, Any]]) -> str:
    """One line under a run's table when some steps were timed on a busy machine ("" if none)."""
    noisy = [e for e in step_events if is_noisy(e.get("metrics"))]
    if not noisy:
        return ""
    why = next(
        (
            r
            for e in noisy
            if (r := ((e.get("details") or {}).get("timing") or {}).get("noise_reason"))
        ),
        "",
    )
    steps = ", ".join(str(e["index"] + 1) for e in noisy)
    return (
        f"\n{NOISY_MARK} noisy timing in step(s) {steps}: {why or 'see the step details'}; "
        "re-run on a quieter machine for numbers to rely on"
    )
