"""The run loop: prepare, check the plan (accel.plan), load the original, check the steps'
layer patterns against its layers, take its baseline, then per step apply the pass
(accel.runner.steps), evaluate it (accel.runner.evaluate), save what it leaves
(accel.runner.artifacts) and report through events."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel.errors import AccelError, Cancelled, PassError
from accel.events import (
    Event,
    Log,
    Progress,
    RunFailed,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
)
from accel.layer_patterns import module_layers
from accel.models.forms import EAGER, model_form
from accel.plan import PlanError, plan
from accel.recipe import Recipe, Step
from accel.runner.artifacts import save_step_model, step_artifacts
from accel.runner.evaluate import Baseline, evaluate_baseline, evaluate_step, retime_original
from accel.runner.prepare import Original, RunSetup, load_original, prepare_run
from accel.runner.results import RunResult, StepResult, jsonable, run_summary
from accel.runner.steps import apply_step, copy_model, make_context, preflight, step_error
from accel.trust import RECIPE_TRUST_PICKLE_IGNORED, code_trust

CancelLike = Callable[[], bool] | Any


def run_recipe(
    recipe: Recipe | str | Path | dict[str, Any],
    on_event: Callable[[Event], None] | None = None,
    cancel: CancelLike = None,
    *,
    out_dir: str | Path | None = None,
    model_source: str | None = None,
    device: str | None = None,
    save_models: bool | None = None,
    trust_pickle: bool = False,
    trust_recipe_code: bool = False,
) -> RunResult:
    """Execute ``recipe`` and return its results (see accel.runner).

    ``save_models``: save each torch step's model as ``model.pt2`` in its step folder (for
    bisect and the graph diff); default: on unless env ``ACCEL_SAVE_STEP_MODELS=0``.
    ``trust_pickle`` / ``trust_recipe_code``: the caller's opt-ins to unpickle the model file
    and to import the code the recipe names (``model_source`` is the caller's own, always
    allowed); a recipe never grants them itself (SECURITY.md).
    The run uses one thread count (``benchmark.threads``, default: the physical cores); the
    caller's torch thread setting is restored afterwards."""
    import torch

    old_threads = torch.get_num_threads()
    try:
        with code_trust(trust_recipe_code):
            t_run = time.perf_counter()
            setup = prepare_run(recipe, out_dir, model_source, device, save_models)
            run = _Run(setup, on_event or (lambda e: None), _cancel_fn(cancel), t_run)
            return run.execute(trust_pickle, trusted_source=bool(model_source))
    finally:
        torch.set_num_threads(old_threads)


def _cancel_fn(cancel: CancelLike) -> Callable[[], bool]:
    if cancel is None:
        return lambda: False
    if hasattr(cancel, "is_set"):
        return cancel.is_set
    return cancel


class _Run:
    """One execution of a prepared recipe; holds the RunResult it fills."""

    def __init__(
        self,
        setup: RunSetup,
        emit: Callable[[Event], None],
        is_cancelled: Callable[[], bool],
        t_run: float,
    ) -> None:
        self.setup, self.recipe, self.device = setup, setup.recipe, setup.recipe.device
        self.emit, self.is_cancelled, self.t_run = emit, is_cancelled, t_run
        self.result = RunResult("failed", setup.run_dir, setup.recipe, {}, setup.environment)

    def execute(self, trust_pickle: bool, trusted_source: bool) -> RunResult:
        import torch

        recipe = self.recipe
        # Before any work: a step order that cannot run fails now, not after the baseline
        # (with on_step_error: skip, such steps fail when they come and are skipped).
        planned = plan(recipe)
        if not planned.ok and recipe.on_step_error == "stop":
            return self.fail(PlanError(planned), None)
        torch.manual_seed(recipe.seed)
        torch.set_num_threads(self.setup.threads)  # restored by run_recipe
        started = self._load_and_time_original(trust_pickle, trusted_source)
        if isinstance(started, RunResult):
            return started  # failed or cancelled
        orig, not_applicable, baseline = started
        self.result.baseline = baseline.metrics
        self.result.baseline_timing = baseline.timing
        self._started(orig, baseline)
        return self._run_steps(orig, baseline, not_applicable)

    def _load_and_time_original(
        self, trust_pickle: bool, trusted_source: bool
    ) -> tuple[Original, dict[int, str], Baseline] | RunResult:
        """Load the original, check the steps against it and take its baseline: the
        original, the steps that cannot apply to it (index -> why) and the baseline, or the
        run's result when it ends here (failed or cancelled)."""
        recipe, emit = self.recipe, self.emit
        try:
            emit(Progress(index=-1, fraction=0.0, message=f"loading {recipe.model.source}"))
            if recipe.model.trust_pickle and not trust_pickle:
                emit(Log(level="warning", message=RECIPE_TRUST_PICKLE_IGNORED))
            orig = load_original(recipe, trust_pickle, trusted_source)
            if (bad_patterns := self._check_layers(orig)) is not None:
                return bad_patterns
            not_applicable = preflight(recipe.enabled_steps(), orig.model)
            if not_applicable and recipe.on_step_error == "stop":
                index, why = next(iter(not_applicable.items()))
                return self.fail(
                    PassError(
                        f"step {index + 1} cannot apply to this model: {why} "
                        "(or set on_step_error: skip to run the other steps)"
                    ),
                    index,
                )
            baseline = evaluate_baseline(
                orig.model,
                orig.inputs,
                orig.data,
                recipe,
                self.device,
                self.setup.run_dir,
                progress=lambda f, m: emit(Progress(index=-1, fraction=f, message=m)),
                cancelled=self.is_cancelled,
            )
        except Exception as exc:  # noqa: BLE001 - reported as RunFailed with its message
            return self.fail(exc, None)
        if baseline is None:
            return self.cancelled()
        return orig, not_applicable, baseline

    def _run_steps(
        self, orig: Original, baseline: Baseline, not_applicable: dict[int, str]
    ) -> RunResult:
        """Every enabled step in order, each on the model the one before left (a skipped or,
        with on_step_error: skip, failed step leaves it as it was); the run's result."""
        recipe = self.recipe
        # Passes may change the module they get in place; keep the original intact for passes
        # that need it (sensitivity, QAT) by handing the first step a copy.
        current = copy_model(orig.model)
        for index, step in recipe.enabled_steps():
            if self.is_cancelled():
                return self.cancelled()
            if index in not_applicable:
                self.emit(StepStarted(index=index, pass_name=step.pass_name, params=step.params))
                self._skipped(index, step, not_applicable[index], 0.0, {})
                continue
            # With on_step_error: skip, a failed step leaves the model as it was before it.
            backup = copy_model(current) if recipe.on_step_error == "skip" else None
            try:
                sr, new_model, why = self._step(index, step, current, orig, baseline)
            except Cancelled:
                return self.cancelled()
            if sr.status == "failed" and backup is not None:
                self.result.steps.pop()  # recorded as skipped instead
                self._skipped(index, step, sr.error or "", sr.duration_s, sr.details)
                current = backup
                continue
            if sr.status == "failed":
                return self.fail(PassError(f"step {index + 1} ({step.label}): {sr.error}"), index)
            if sr.status == "gate_failed" and recipe.on_gate_fail == "stop":
                self.result.model = new_model
                msg = f"step {index + 1} ({step.label}) failed its parity gate: {why}"
                return self.fail(PassError(msg), index)
            current = new_model
        self.result.status, self.result.model = "succeeded", current
        self.result.duration_s = time.perf_counter() - self.t_run
        summary = run_summary(self.result)
        self.emit(
            RunFinished(status="succeeded", duration_s=self.result.duration_s, summary=summary)
        )
        return self.result

    def _check_layers(self, orig: Original) -> RunResult | None:
        """The steps' layer patterns (exclude, keep, ignore) against the loaded torch model's
        layers, before the baseline: a typo fails the run now with the close names (the
        failed result), not after minutes of benchmarking; None when they select layers (or
        with on_step_error: skip, where such a step fails when it comes and is skipped)."""
        model = orig.model
        form = model_form(model)
        if self.recipe.on_step_error != "stop" or form != EAGER:
            return None  # only an eager torch model's layer names are the recipe's names
        planned = plan(self.recipe, start_form=form, layers=module_layers(model.module))
        return None if planned.ok else self.fail(PlanError(planned), None)

    def _started(self, orig: Original, baseline: Baseline) -> None:
        self.emit(
            RunStarted(
                run_dir=str(self.setup.run_dir.resolve()),
                model_source=self.recipe.model.source,
                model_kind=orig.model.kind,
                device=self.device,
                recipe=self.recipe.to_dict(),
                environment=self.setup.environment,
                num_steps=len(self.recipe.enabled_steps()),
                baseline=baseline.metrics,
                baseline_timing=baseline.timing,
                model_hash=orig.model.content_hash,
                input_spec=str(orig.model.input_spec),
            )
        )

    def _step(
        self, index: int, step: Step, current: Any, orig: Original, baseline: Baseline
    ) -> tuple[StepResult, Any, str]:
        """Apply, evaluate and save one step: its result (recorded and reported), its model
        and why its gate failed. A step that raises gives a ``failed`` result (no model);
        Cancelled propagates."""
        self.emit(StepStarted(index=index, pass_name=step.pass_name, params=step.params))
        t0 = time.perf_counter()
        step_dir = self.setup.run_dir / f"step_{index:02d}_{step.pass_name}"
        step_dir.mkdir(parents=True, exist_ok=True)

        def progress(f: float, m: str) -> None:
            self.emit(Progress(index=index, fraction=f, message=m))

        ctx = make_context(
            index, step_dir, self.recipe, orig, self.device, progress, self.is_cancelled
        )
        try:
            alone = retime_original(orig.model, current, orig.inputs, self.recipe, self.device)
            new_model = apply_step(step, current, ctx, self.recipe.seed)
            ev = evaluate_step(
                orig.model, new_model, orig.inputs, baseline, recipe=self.recipe, step=step,
                data=orig.data, device=self.device, step_dir=step_dir, pass_metrics=ctx.metrics,
                progress=progress, cancel=self.is_cancelled, original_alone=alone,
            )  # fmt: skip
            for w in ev.warnings:
                ctx.warn(w)
            save_s = self._save(new_model, orig, step_dir, ctx)
            artifacts = step_artifacts(ctx.artifacts, step_dir)
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing step ends the run with its message
            sr = StepResult(
                index, step.pass_name, step.label, step.params, "failed",
                time.perf_counter() - t0, details=ctx.details, error=step_error(step, exc),
            )  # fmt: skip
            self._finished(sr, jsonable(ctx.details))
            return sr, None, ""
        sr = StepResult(
            index, step.pass_name, step.label, step.params, ev.status,
            time.perf_counter() - t0 - save_s, ev.metrics, ev.parity.to_dict(), artifacts,
            jsonable(ctx.details), timing=ev.timing,
        )  # fmt: skip
        self._finished(sr, sr.details)
        if ev.status == "gate_failed":
            why = f"step {index + 1} ({step.label}) failed its gate: {ev.why}"
            self.emit(Log(level="warning", message=why, index=index))
        return sr, new_model, ev.why

    def _skipped(
        self, index: int, step: Step, why: str, duration: float, details: dict[str, Any]
    ) -> None:
        """A step that could not apply, skipped by on_step_error: skip: recorded and said."""
        sr = StepResult(
            index, step.pass_name, step.label, step.params, "skipped", duration, error=why
        )
        self._finished(sr, jsonable(details))
        msg = f"step {index + 1} ({step.label}) skipped: {why}"
        self.emit(Log(level="warning", message=msg, index=index))

    def _save(self, model: Any, orig: Original, step_dir: Path, ctx: Any) -> float:
        """Save the step's model (when the run saves models); the seconds it took. After
        benchmarking and parity: saving never changes the step's outputs or timings, and its
        time is not part of the step's duration."""
        t_save = time.perf_counter()
        if self.setup.save_models:
            saved = save_step_model(model, orig.inputs, step_dir, ctx.artifacts, self.recipe.seed)
            if saved is not None:
                ctx.details["saved_model"] = saved
        return time.perf_counter() - t_save

    def _finished(self, sr: StepResult, details: dict[str, Any]) -> None:
        self.result.steps.append(sr)
        self.emit(
            StepFinished(
                index=sr.index,
                pass_name=sr.pass_name,
                status=sr.status,
                duration_s=sr.duration_s,
                metrics=sr.metrics,
                parity=sr.parity,
                artifacts=sr.artifacts,
                details=details,
                error=sr.error,
                timing=sr.timing,
            )
        )

    def fail(self, exc: BaseException, index: int | None) -> RunResult:
        msg = str(exc) if isinstance(exc, AccelError) else f"{type(exc).__name__}: {exc}"
        self.result.status, self.result.error = "failed", msg
        self.result.duration_s = time.perf_counter() - self.t_run
        self.emit(
            RunFailed(
                error=msg,
                error_type=type(exc).__name__,
                index=index,
                traceback="" if isinstance(exc, AccelError) else traceback.format_exc(),
            )
        )
        return self.result

    def cancelled(self) -> RunResult:
        self.result.status = "cancelled"
        self.result.duration_s = time.perf_counter() - self.t_run
        summary = run_summary(self.result)
        self.emit(
            RunFinished(status="cancelled", duration_s=self.result.duration_s, summary=summary)
        )
        return self.result
