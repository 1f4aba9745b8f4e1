"""The search's final side-by-side re-timing of its top trials.

Each trial was timed against the original in its own measurement, minutes apart from the
others on a machine whose load changes: two trials timed 5.97x and 5.87x that way were 1.8x
apart when timed together. So before the search ends, its top trials (all within the parity
budget) are built again (from the prefix cache where it still holds them) and timed with the
original in ONE round-robin measurement (``accel.timing.compare_round_robin``); the search
chooses its winner on that measurement, and reports the winner's figure from it.

``run_retime(spec, emit, cancel) -> dict`` is the job (``accel.search.job`` hands it a spec with
``retime``: ``[{"trial": n, "steps": [...]}, ...]``, the trial spec's other keys as for a
trial; ``time_limit_s``: the seconds it may take, building and timing). Past its time limit
or at cancel it stops and returns no figures: a measurement cut short is no measurement.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.errors import Cancelled
from accel.events import RunFailed, RunFinished, RunStarted

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]

# The clock of the time limit (seconds). Tests replace it with a fake one.
CLOCK: Callable[[], float] = time.monotonic


def run_retime(spec: dict[str, Any], emit: Emit, cancel: Callable[[], bool]) -> dict[str, Any]:
    """Build each listed trial's model, then time them all with the original in one
    measurement. Returns ``{"status": "succeeded", "retime": {"timings": {trial: StepTiming
    JSON}, "skipped": {trial: why}}}``, or ``{"status": "cancelled" | "timed_out" | "failed",
    "error": why}`` with no timings."""
    t_start = CLOCK()
    limit = spec.get("time_limit_s")
    out = Path(spec["out"])

    def stop() -> bool:
        return cancel() or (limit is not None and CLOCK() - t_start > float(limit))

    def stopped(what: str) -> dict[str, Any]:
        status = "cancelled" if cancel() else "timed_out"
        why = "cancelled" if status == "cancelled" else f"past its time limit of {limit:g} s"
        emit(RunFinished(status="cancelled", duration_s=CLOCK() - t_start, summary={}).to_dict())
        return {
            "status": status,
            "error": f"the final re-timing was {why} while {what}; no figures were kept",
            "run_dir": str(out),
        }

    candidates = list(spec["retime"])
    built = _Built()
    problem = _build_all(spec, candidates, built, emit, stop)
    if problem is not None:
        return stopped(problem) if stop() else _failed(emit, out, problem)
    if built.first is None or len(built.models) < 2:
        reason = f"{len(built.models)} of {len(candidates)} trials built again; nothing to compare"
        return _failed(emit, out, reason, built.skipped)
    try:
        timings = _time_together(built.first, built.models, spec, stop)
    except Cancelled:
        return stopped("timing")
    except Exception as exc:  # noqa: BLE001 - a measurement that failed is no measurement
        return _failed(emit, out, f"timing: {type(exc).__name__}: {exc}", built.skipped)
    if stop():
        return stopped("timing")
    result = {"timings": timings, "skipped": built.skipped}
    summary = {"final_retime": result}
    emit(RunFinished(status="succeeded", duration_s=CLOCK() - t_start, summary=summary).to_dict())
    return {
        "status": "succeeded",
        "trial_status": "ok",
        "retime": result,
        "run_dir": str(out),
        "duration_s": CLOCK() - t_start,
    }


@dataclass
class _Built:
    """The re-timing's models: the first build (it holds the original and the inputs), the
    built models by trial number, and why the others were left out."""

    first: Any = None
    models: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def _build_all(
    spec: dict[str, Any],
    candidates: list[dict[str, Any]],
    built: _Built,
    emit: Emit,
    stop: Callable[[], bool],
) -> str | None:
    """Build every candidate into ``built`` (from the prefix cache where it holds the whole
    chain: then nothing is built again); a candidate that fails to build or its gate is left
    out. Returns what was under way when it stopped, or why the original failed to load."""
    from accel.search.trial import TrialBuild

    out = Path(spec["out"])
    for cand in candidates:
        number = int(cand["trial"])
        if stop():
            return f"building trial {number}"
        sub = {**spec, "steps": list(cand["steps"]), "trial": number}
        sub["out"] = str(out / f"trial_{number:03d}")
        build = TrialBuild(sub, lambda e: None, stop)
        try:
            build.load(shared=built.first)
        except Exception as exc:  # noqa: BLE001 - the original itself failed: nothing to time
            return f"loading the model: {type(exc).__name__}: {exc}"
        if built.first is None:
            built.first = build
            _started(emit, spec, build, [int(c["trial"]) for c in candidates])
        build.restore_cached_prefix()
        if build.build() is not None:  # failed or stopped
            if stop():
                return f"building trial {number}"
            built.skipped[str(number)] = "its chain failed to build again"
            continue
        try:
            _, _, gate_reason = build.gate()
        except Exception as exc:  # noqa: BLE001 - reported as the candidate's problem
            gate_reason = f"{type(exc).__name__}: {exc}"
        if gate_reason is not None:
            built.skipped[str(number)] = f"built again, it failed its gate: {gate_reason}"
            continue
        built.models[str(number)] = build.current
    return None


def _time_together(
    first: Any, built: dict[str, Any], spec: dict[str, Any], stop: Callable[[], bool]
) -> dict[str, dict[str, Any]]:
    """Every built model against the original in one round-robin measurement: StepTiming
    JSON by trial number."""
    from accel.timing import TimingSettings, compare_round_robin

    comparisons = compare_round_robin(
        first.original,
        built,
        first.inputs,
        TimingSettings.from_any(spec.get("benchmark") or {}),
        device=spec.get("device", "cpu"),
        cancel=stop,
        seed=int(spec.get("seed", 0)),
    )
    return {n: cmp.timing().to_json() for n, cmp in comparisons.items()}


def _started(emit: Emit, spec: dict[str, Any], build: Any, numbers: list[int]) -> None:
    from accel.timing.environment import environment_info

    device = spec.get("device", "cpu")
    trials = ", ".join(str(n) for n in numbers)
    emit(
        RunStarted(
            run_dir=str(Path(spec["out"]).resolve()),
            model_source=build.original.source,
            model_kind=build.original.kind,
            device=device,
            recipe={
                "name": f"final side-by-side re-timing of trials {trials}",
                "model": spec["model"],
                "device": device,
                "seed": spec.get("seed", 0),
                "steps": [],
            },
            environment=environment_info(device=device),
            num_steps=0,
            baseline={},
            model_hash=build.original.content_hash,
            input_spec=str(build.original.input_spec),
        ).to_dict()
    )


def _failed(
    emit: Emit, out: Path, reason: str, skipped: dict[str, str] | None = None
) -> dict[str, Any]:
    detail = "; ".join(f"trial {n}: {why}" for n, why in (skipped or {}).items())
    error = f"the final re-timing did not run: {reason}" + (f" ({detail})" if detail else "")
    emit(RunFailed(error=error, error_type="RetimeFailed", index=None, traceback="").to_dict())
    return {"status": "failed", "error": error, "run_dir": str(out)}
