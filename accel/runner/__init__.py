"""Run a recipe step by step: apply, evaluate against the original, record.

``run_recipe`` never prints; it reports through ``on_event`` (accel.events) and returns a
RunResult. A failing step ends the run with its error and keeps the results of the steps
before it. Cancellation is checked between steps and, via ``PassContext.check_cancelled``,
inside long loops.

The parts: ``prepare`` (recipe overrides, run folder, original model and data), ``steps``
(one pass applied), ``evaluate`` (parity, accuracy, timing against the original),
``artifacts`` (files and saved step models), ``results`` (StepResult, RunResult, summary)
and ``loop`` (run_recipe).
"""

from accel.parity import normalize_outputs, to_float_outputs
from accel.runner.artifacts import (
    MAX_SAVED_MODEL_BYTES,
    MODEL_ARTIFACT_KINDS,
    SAVE_MODELS_ENV,
    default_run_dir,
    file_artifact,
    save_step_model,
)
from accel.runner.evaluate import measure, measure_against
from accel.runner.loop import run_recipe
from accel.runner.results import RunResult, StepResult

__all__ = [
    "MAX_SAVED_MODEL_BYTES",
    "MODEL_ARTIFACT_KINDS",
    "SAVE_MODELS_ENV",
    "RunResult",
    "StepResult",
    "default_run_dir",
    "file_artifact",
    "measure",
    "measure_against",
    "normalize_outputs",
    "run_recipe",
    "save_step_model",
    "to_float_outputs",
]
