"""Evaluating a model against the original: parity of its outputs, accuracy on the recipe's
eval data, and timing (the baseline's own latency; each step timed against the original in
alternating rounds, accel.timing). Nothing here applies a pass or writes run events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.generate.settings import is_generate
from accel.parity import ParityReport, Tolerances, compare, normalize_outputs
from accel.recipe import Recipe, Step
from accel.runner.artifacts import write_json
from accel.timing.result import StepTiming

if TYPE_CHECKING:
    from accel.timing.rounds import Alone

Progress = Callable[[float, str], None]


def _sizes(model: Any) -> dict[str, float | None]:
    return {
        "size_bytes": float(getattr(model, "size_bytes", 0) or 0) or None,
        "num_params": float(getattr(model, "num_params", 0) or 0) or None,
    }


def measure(model: Any, inputs: dict[str, Any], recipe: Recipe, device: str) -> StepTiming:
    """The original model's own row: its latency timed alone with the steps' machinery
    (placement, threads, warm-up, batching, rounds), no speedup."""
    from accel.timing import time_alone

    alone = time_alone(model, inputs, recipe.benchmark, device=device, name="original")
    return alone.timing(recipe.seed)


def measure_against(
    original: Any,
    model: Any,
    inputs: dict[str, Any],
    recipe: Recipe,
    device: str,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
) -> StepTiming:
    """Time ``model`` against ``original`` in alternating rounds (accel.timing): both
    latencies and the speedup with its 95% interval, from the same rounds."""
    from accel.timing import compare_interleaved

    cmp = compare_interleaved(
        original,
        model,
        inputs,
        recipe.benchmark,
        device=device,
        progress=progress,
        cancel=cancel,
        seed=recipe.seed,
        reference_warm=True,  # the baseline warmed the original up at the start of the run
    )
    return cmp.timing()


@dataclass
class OriginalAlone:
    """The original timed on its own right before a step (memory fallback): its timings and
    why the two models were not timed side by side."""

    alone: Alone
    reason: str


def retime_original(
    original: Any, current: Any, inputs: dict[str, Any], recipe: Recipe, device: str
) -> OriginalAlone | None:
    """When the original and the step's model (estimated by the model the step starts from)
    do not both fit in memory, time the original alone now, right before the step; None
    when they fit (they are then timed in alternating rounds after the step)."""
    from accel.timing import side_by_side_problem, time_alone

    reason = side_by_side_problem(
        getattr(original, "size_bytes", None), getattr(current, "size_bytes", None), device
    )
    if reason is None:
        return None
    alone = time_alone(original, inputs, recipe.benchmark, device=device, name="original")
    return OriginalAlone(alone, reason)


def measure_apart(
    alone: OriginalAlone,
    model: Any,
    inputs: dict[str, Any],
    recipe: Recipe,
    device: str,
    cancel: Callable[[], bool] | None = None,
) -> StepTiming:
    """The step's model timed on its own after the original was (``retime_original``): the
    speedup is the ratio of their p50s, with no interval (the rounds are not paired)."""
    from accel.timing import apart_timing, time_alone

    step = time_alone(model, inputs, recipe.benchmark, device=device, cancel=cancel)
    return apart_timing(alone.alone, step, alone.reason, recipe.seed)


def accuracy(model: Any, data: dict[str, Any], recipe: Recipe) -> float | None:
    """The model's accuracy on the recipe's eval data (None when the recipe has none)."""
    if data.get("eval") is None:
        return None
    from accel.data import evaluate_accuracy

    return evaluate_accuracy(model, data["eval"], recipe.data.metric)


def tolerances(gates: Any) -> Tolerances:
    """The parity tolerances of a step's gates (accel.recipe.Gates)."""
    return Tolerances(
        rtol=gates.rtol, atol=gates.atol, min_cosine=gates.min_cosine, min_top1=gates.min_top1
    )


@dataclass
class Baseline:
    """The original model's reference outputs and numbers (the baseline row)."""

    reference: Any
    metrics: dict[str, float | None]  # size, parameters, accuracy
    timing: StepTiming
    accuracy: float | None = None
    generation: Any = None  # accel.generate.evaluate.GenerationBaseline (workload: generate)


def evaluate_baseline(
    original: Any,
    inputs: dict[str, Any],
    data: dict[str, Any],
    recipe: Recipe,
    device: str,
    run_dir: Path,
    progress: Progress,
    cancelled: Callable[[], bool],
) -> Baseline | None:
    """Reference outputs (saved as reference_outputs.pt), baseline latency and accuracy.
    None when the run was cancelled after the reference outputs."""
    import torch

    progress(0.3, "reference outputs")
    reference = normalize_outputs(original.forward(inputs))
    torch.save(reference, run_dir / "reference_outputs.pt")
    if cancelled():
        return None
    progress(0.5, "benchmarking the original model")
    generation = None
    if is_generate(recipe.benchmark):
        from accel.generate.evaluate import generation_baseline

        progress(0.5, "generating with the original model")
        generation = generation_baseline(original, recipe.benchmark, recipe.seed)
        timing = generation.timing
        metrics = {**generation.metrics, **_sizes(original)}
    else:
        timing = measure(original, inputs, recipe, device)
        metrics = _sizes(original)
    acc = accuracy(original, data, recipe)
    if acc is not None:
        metrics["accuracy"] = acc
    return Baseline(reference, metrics, timing, acc, generation)


@dataclass
class StepEvaluation:
    """A step's verdict: ``succeeded`` or ``gate_failed`` (parity or accuracy gate)."""

    status: str
    metrics: dict[str, float | None]
    parity: ParityReport
    timing: StepTiming | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def why(self) -> str:
        return self.parity.first_failure or "accuracy gate"


def evaluate_step(
    original: Any,
    model: Any,
    inputs: dict[str, Any],
    baseline: Baseline,
    *,
    recipe: Recipe,
    step: Step,
    data: dict[str, Any],
    device: str,
    step_dir: Path,
    pass_metrics: dict[str, float | None],
    progress: Progress,
    cancel: Callable[[], bool],
    original_alone: OriginalAlone | None = None,
) -> StepEvaluation:
    """Parity against the reference (outputs.pt, parity.json in ``step_dir``), timing against
    the original, then accuracy with its gate. ``pass_metrics`` (what the pass reported)
    override the timing's keys; accuracy comes last. ``original_alone``: the original was
    timed on its own before the step (memory fallback); the step's model is then timed
    alone too."""
    import torch

    progress(0.9, "checking parity")
    outputs = normalize_outputs(model.forward(inputs))
    torch.save(outputs, step_dir / "outputs.pt")
    gates = recipe.gates_for(step)
    report = compare(baseline.reference, outputs, tolerances(gates))
    generation = None
    if baseline.generation is not None:  # gated on teacher-forced logits, timed generating
        from accel.generate.evaluate import evaluate_generation

        progress(0.92, "generating against the original")
        generation = evaluate_generation(
            baseline.generation, model, tolerances(gates), recipe.benchmark, cancel
        )
        report = generation.parity.report
        write_json(step_dir / "generation.json", generation.parity.to_dict())
    write_json(step_dir / "parity.json", report.to_dict())
    progress(0.92, "timing against the original")
    timing = (
        generation.timing
        if generation is not None
        else _time_step(original, model, inputs, recipe, device, progress, cancel, original_alone)
    )
    metrics = _sizes(model)
    metrics.update(pass_metrics)
    if generation is not None:
        metrics.update(generation.metrics)
    ev = StepEvaluation("succeeded" if report.passed else "gate_failed", metrics, report, timing)
    if data.get("eval") is not None:
        _gate_accuracy(ev, model, data, recipe, gates.max_accuracy_drop, baseline.accuracy)
    return ev


def _time_step(
    original: Any,
    model: Any,
    inputs: dict[str, Any],
    recipe: Recipe,
    device: str,
    progress: Progress,
    cancel: Callable[[], bool],
    original_alone: OriginalAlone | None,
) -> Any:
    """The step's model timed against the original: apart when the original was timed
    alone (too big for both side by side), else in alternating rounds."""
    if original_alone is not None:
        return measure_apart(original_alone, model, inputs, recipe, device, cancel)
    # The original and this step's model, timed in alternating rounds in this process:
    # a change of load during the run hits both alike and cancels in the ratio.
    return measure_against(
        original,
        model,
        inputs,
        recipe,
        device,
        progress=lambda f, m: progress(0.92 + 0.06 * f, m),
        cancel=cancel,
    )


def _gate_accuracy(
    ev: StepEvaluation,
    model: Any,
    data: dict[str, Any],
    recipe: Recipe,
    drop: float | None,
    baseline_accuracy: float | None,
) -> None:
    """Accuracy on the eval data into ``ev.metrics``; a drop past ``drop`` (the gate's
    max_accuracy_drop) fails the step's gate."""
    metrics = ev.metrics
    acc = accuracy(model, data, recipe)
    metrics["accuracy"] = acc
    if acc is not None and baseline_accuracy is not None:
        metrics["accuracy_drop"] = baseline_accuracy - acc
        if drop is not None and baseline_accuracy - acc > drop:
            ev.status = "gate_failed"
            ev.warnings.append(
                f"accuracy dropped {baseline_accuracy - acc:.4f} > max_accuracy_drop {drop}"
            )
