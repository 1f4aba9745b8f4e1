"""What a run returns: one StepResult per executed step inside a RunResult, and the run's
summary line (the ``summary`` of RunFinished)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.jsonable import jsonable
from accel.recipe import Recipe
from accel.timing.result import StepTiming

__all__ = ["RunResult", "StepResult", "jsonable", "run_summary"]


@dataclass
class StepResult:
    index: int
    pass_name: str
    label: str
    params: dict[str, Any]
    status: str
    duration_s: float
    metrics: dict[str, float | None] = field(default_factory=dict)
    parity: dict[str, Any] | None = None
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    timing: StepTiming | None = None


@dataclass
class RunResult:
    status: str  # succeeded | failed | cancelled
    run_dir: Path
    recipe: Recipe
    baseline: dict[str, float | None]  # the original's size, parameters, accuracy
    environment: dict[str, Any]
    steps: list[StepResult] = field(default_factory=list)
    error: str | None = None
    duration_s: float = 0.0
    model: Any = None  # the final LoadedModel (not serialisable; None after a failure)
    baseline_timing: StepTiming | None = None  # the original's row

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"


def run_summary(result: RunResult) -> dict[str, Any]:
    """The numbers of RunFinished's summary: the last good step's speedup and its timing
    (StepTiming's JSON form), and the original's row."""
    last = next(
        (s for s in reversed(result.steps) if s.status in ("succeeded", "gate_failed")), None
    )
    final = last.timing if last is not None else None
    noisy = [s for s in result.steps if s.timing is not None and s.timing.noisy]
    reason = next((s.timing.noise_reason for s in noisy if s.timing.noise_reason), None)
    base = result.baseline_timing
    return {
        "steps": len(result.steps),
        "final_speedup": final.speedup if final else None,
        "final_speedup_low": final.speedup_low if final else None,
        "final_speedup_high": final.speedup_high if final else None,
        "noisy_steps": [s.index for s in noisy],
        # One line for the run: were its speedups timed on a busy machine?
        "noise": (
            f"{len(noisy)} of {len(result.steps)} step(s) timed while the machine was busy: "
            f"{reason}"
            if noisy
            else None
        ),
        "final_timing": final.to_json() if final else None,
        "baseline_timing": base.to_json() if base else None,
    }
