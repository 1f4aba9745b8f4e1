"""Events the runner emits while it executes a recipe.

Every event is a frozen dataclass with a ``to_dict()`` that yields plain JSON
(the worker protocol sends exactly that dict) and ``event_from_dict`` turns the
dict back into the event. Keep them flat and JSON-friendly: only str, int,
float, bool, None, lists and dicts, and the typed timing result
(accel.timing.result.StepTiming, sent as its JSON form).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from accel.timing.result import StepTiming

# Fields that hold a StepTiming (JSON form on the wire).
_TIMING_FIELDS = ("timing", "baseline_timing")


@dataclass(frozen=True)
class Event:
    """Base class; ``kind`` names the event in JSON."""

    kind = "event"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for name in _TIMING_FIELDS:
            value = getattr(self, name, None)
            if isinstance(value, StepTiming):
                d[name] = value.to_json()
        d["event"] = self.kind
        return d


@dataclass(frozen=True)
class RunStarted(Event):
    kind = "run_started"
    run_dir: str
    model_source: str
    model_kind: str
    device: str
    recipe: dict[str, Any]
    environment: dict[str, Any]
    num_steps: int
    # Metrics of the original model (step index -1): size, parameters, accuracy.
    baseline: dict[str, float | None] = field(default_factory=dict)
    # The original's latency, timed alone with the steps' machinery (the original's row).
    baseline_timing: StepTiming | None = None
    model_hash: str = ""  # content hash of the original model (weights or file bytes)
    input_spec: str = ""  # the InputSpec the run used, compact form


@dataclass(frozen=True)
class StepStarted(Event):
    kind = "step_started"
    index: int
    pass_name: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Progress(Event):
    kind = "progress"
    index: int  # step index, -1 for the reference / baseline phase
    fraction: float  # 0..1 within the step
    message: str = ""


@dataclass(frozen=True)
class Log(Event):
    kind = "log"
    level: str  # "debug" | "info" | "warning" | "error"
    message: str
    index: int | None = None


@dataclass(frozen=True)
class StepFinished(Event):
    kind = "step_finished"
    index: int
    pass_name: str
    status: str  # "succeeded" | "failed" | "gate_failed" | "skipped"
    duration_s: float
    # Flat numeric metrics other than timing: size_bytes, num_params, accuracy, what the
    # pass reported, ...
    metrics: dict[str, float | None]
    # ParityReport.to_dict(): {"passed": bool, "first_failure": str|None, "outputs": [...]}
    parity: dict[str, Any] | None
    # [{"kind": "model"|"onnx"|"report"|..., "path": str, "sha256": str, "bytes": int}]
    artifacts: list[dict[str, Any]]
    # Pass-specific details for humans: graph breaks, backend used, warnings...
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    # The step's timing: its latency and the original's from the same comparison, and the
    # speedup with its interval (None: not timed, e.g. a failed step).
    timing: StepTiming | None = None


@dataclass(frozen=True)
class RunFinished(Event):
    kind = "run_finished"
    status: str  # "succeeded" | "failed" | "cancelled"
    duration_s: float
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunFailed(Event):
    kind = "run_failed"
    error: str
    error_type: str
    index: int | None = None  # step that failed, None if before any step
    traceback: str = ""


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (RunStarted, StepStarted, Progress, Log, StepFinished, RunFinished, RunFailed)
}


def event_from_dict(d: dict[str, Any]) -> Event:
    """Rebuild an event from its ``to_dict()`` form; unknown keys are ignored."""
    d = dict(d)
    kind = d.pop("event", None)
    cls = EVENT_TYPES.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}; known: {sorted(EVENT_TYPES)}")
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in d.items() if k in names}
    for name in _TIMING_FIELDS:
        if isinstance(kwargs.get(name), dict):
            kwargs[name] = StepTiming.from_json(kwargs[name])
    return cls(**kwargs)
