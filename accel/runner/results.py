"""What a run returns: one StepResult per executed step inside a RunResult, and the run's
summary line (the ``summary`` of RunFinished)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.jsonable import jsonable
from accel.recipe import Recipe

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


@dataclass
class RunResult:
    status: str  # succeeded | failed | cancelled
    run_dir: Path
    recipe: Recipe
    baseline: dict[str, float | None]
    environment: dict[str, Any]
    steps: list[StepResult] = field(default_factory=list)
    error: str | None = None
    duration_s: float = 0.0
    model: Any = None  # the final LoadedModel (not serialisable; None after a failure)

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"


def run_summary(result: RunResult) -> dict[str, Any]:
    """The numbers of RunFinished's summary: the last good step's speedup and latency."""
    last = next(
        (s for s in reversed(result.steps) if s.status in ("succeeded", "gate_failed")), None
    )
    noisy = [s for s in result.steps if s.metrics.get("noisy")]
    reason = next(
        (r for s in noisy if (r := (s.details.get("timing") or {}).get("noise_reason"))), None
    )
    return {
        "steps": len(result.steps),
        "final_speedup": (last.metrics.get("speedup") if last else None),
        "final_speedup_low": (last.metrics.get("speedup_low") if last else None),
        "final_speedup_high": (last.metrics.get("speedup_high") if last else None),
        "noisy_steps": [s.index for s in noisy],
        # One line for the run: were its speedups timed on a busy machine?
        "noise": (
            f"{len(noisy)} of {len(result.steps)} step(s) timed while the machine was busy: "
            f"{reason}"
            if noisy
            else None
        ),
        "final_latency_p50_ms": (last.metrics.get("latency_p50_ms") if last else None),
        "baseline_latency_p50_ms": result.baseline.get("latency_p50_ms"),
    }
