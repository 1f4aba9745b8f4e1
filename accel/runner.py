"""Run a recipe step by step: apply, benchmark, compare with the original, record.

``run_recipe`` never prints; it reports through ``on_event`` (accel.events) and
returns a RunResult. A failing step ends the run with its error and keeps the
results of the steps before it. Cancellation is checked between steps and, via
``PassContext.check_cancelled``, inside long loops.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from accel.errors import AccelError, Cancelled, PassError, RecipeError
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
from accel.recipe import Recipe, load_recipe
from accel.trust import RECIPE_TRUST_PICKLE_IGNORED, code_trust

log = logging.getLogger(__name__)

CancelLike = Callable[[], bool] | Any


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


def _cancel_fn(cancel: CancelLike) -> Callable[[], bool]:
    if cancel is None:
        return lambda: False
    if hasattr(cancel, "is_set"):
        return cancel.is_set
    return cancel


def default_run_dir(recipe: Recipe, root: str | Path | None = None) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in recipe.name)[:40]
    return Path(root or "runs") / f"{stamp}-{safe}"


def file_artifact(path: str | Path, kind: str) -> dict[str, Any]:
    """An artifact record with size and sha256 (directories: total size, no hash)."""
    import hashlib

    p = Path(path)
    rec: dict[str, Any] = {"kind": kind, "path": str(p.resolve()), "sha256": None, "bytes": None}
    if p.is_file():
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        rec["sha256"] = h.hexdigest()
        rec["bytes"] = p.stat().st_size
    elif p.is_dir():
        rec["bytes"] = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return rec


def to_float_outputs(outputs: Any) -> Any:
    """Outputs moved to CPU; low-precision floats cast to float32 for comparison."""
    import torch

    if isinstance(outputs, torch.Tensor):
        t = outputs.detach()
        if t.is_quantized:
            t = t.dequantize()
        t = t.cpu()
        if t.is_floating_point() and t.dtype != torch.float64:
            t = t.float()
        return t
    if isinstance(outputs, (list, tuple)) and not hasattr(outputs, "_fields"):
        return type(outputs)(to_float_outputs(o) for o in outputs)
    if isinstance(outputs, dict):
        return {k: to_float_outputs(v) for k, v in outputs.items()}
    return outputs


def normalize_outputs(outputs: Any) -> Any:
    """ONNX returns a tuple even for one output; unwrap single-element tuples on both sides."""
    outputs = to_float_outputs(outputs)
    if isinstance(outputs, (list, tuple)) and len(outputs) == 1:
        return outputs[0]
    return outputs


def measure(
    model: Any, inputs: dict[str, Any], recipe: Recipe, device: str
) -> dict[str, float | None]:
    """The original model's own latency (the baseline row), with the run's thread count."""
    from accel.bench import benchmark
    from accel.measure import TimingSettings, with_threads

    t = TimingSettings.from_any(recipe.benchmark)
    threads = t.resolved_threads
    res = benchmark(
        with_threads(model, threads),
        inputs,
        device=device,
        warmup=t.warmup,
        iters=t.iters,
        threads=threads,
    )
    metrics = dict(res.metrics())
    metrics["size_bytes"] = (
        float(getattr(model, "size_bytes", 0) or metrics.get("size_bytes") or 0) or None
    )
    metrics["num_params"] = float(getattr(model, "num_params", 0) or 0) or None
    return metrics


def measure_against(
    original: Any,
    model: Any,
    inputs: dict[str, Any],
    recipe: Recipe,
    device: str,
    progress: Callable[[float, str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Time ``model`` against ``original`` in alternating rounds (accel.measure): the step's
    metrics (its latency, speedup with its 95% interval, noisy flag) and timing details."""
    from accel.measure import compare_interleaved

    cmp = compare_interleaved(
        original,
        model,
        inputs,
        recipe.benchmark,
        device=device,
        progress=progress,
        cancel=cancel,
        seed=recipe.seed,
    )
    metrics = cmp.metrics()
    metrics["size_bytes"] = float(getattr(model, "size_bytes", 0) or 0) or None
    metrics["num_params"] = float(getattr(model, "num_params", 0) or 0) or None
    return metrics, cmp.timing_details()


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
    """Execute ``recipe`` and return its results (see module docstring).

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
            return _run_recipe(
                recipe, on_event, cancel, out_dir, model_source, device, save_models, trust_pickle
            )
    finally:
        torch.set_num_threads(old_threads)


def _run_recipe(
    recipe: Recipe | str | Path | dict[str, Any],
    on_event: Callable[[Event], None] | None,
    cancel: CancelLike,
    out_dir: str | Path | None,
    model_source: str | None,
    device: str | None,
    save_models: bool | None,
    trust_pickle: bool,
) -> RunResult:
    import torch

    from accel.bench import environment_info
    from accel.models import load_model
    from accel.parity import Tolerances, compare
    from accel.passes import PassContext, get_pass

    t_run = time.perf_counter()
    if save_models is None:
        save_models = os.environ.get(SAVE_MODELS_ENV, "1").strip() not in ("0", "false", "no")
    emit = on_event or (lambda e: None)
    is_cancelled = _cancel_fn(cancel)
    recipe = load_recipe(recipe)
    if not recipe.enabled_steps():
        raise RecipeError(
            "the recipe has no enabled steps; add at least one step (see `studio passes`)"
        )
    if model_source:
        recipe = recipe.model_copy(
            update={"model": recipe.model.model_copy(update={"source": model_source})}
        )
    if device:
        recipe = recipe.model_copy(update={"device": device})
    device = recipe.device
    run_dir = Path(out_dir) if out_dir else default_run_dir(recipe)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "recipe.json").write_text(__import__("json").dumps(recipe.to_dict(), indent=2))
    env = environment_info(device=device)
    from accel.measure import TimingSettings, physical_cores

    try:
        threads = TimingSettings.from_any(recipe.benchmark).resolved_threads
    except AccelError as exc:
        raise RecipeError(str(exc)) from None
    # One thread count for the whole run (torch here, ONNX Runtime sessions when timed),
    # recorded with it.
    env["threads"] = threads
    env["physical_cores"] = physical_cores()
    result = RunResult("failed", run_dir, recipe, {}, env)

    def fail(exc: BaseException, index: int | None) -> RunResult:
        msg = str(exc) if isinstance(exc, AccelError) else f"{type(exc).__name__}: {exc}"
        result.status, result.error = "failed", msg
        result.duration_s = time.perf_counter() - t_run
        emit(
            RunFailed(
                error=msg,
                error_type=type(exc).__name__,
                index=index,
                traceback="" if isinstance(exc, AccelError) else traceback.format_exc(),
            )
        )
        return result

    def cancelled() -> RunResult:
        result.status = "cancelled"
        result.duration_s = time.perf_counter() - t_run
        emit(
            RunFinished(status="cancelled", duration_s=result.duration_s, summary=_summary(result))
        )
        return result

    torch.manual_seed(recipe.seed)
    torch.set_num_threads(threads)  # restored by run_recipe
    # -- the original model, its reference outputs and baseline benchmark -------------------
    try:
        emit(Progress(index=-1, fraction=0.0, message=f"loading {recipe.model.source}"))
        if recipe.model.trust_pickle and not trust_pickle:
            emit(Log(level="warning", message=RECIPE_TRUST_PICKLE_IGNORED))
        original = load_model(
            recipe.model.source,
            recipe.model.input_spec,
            trust_pickle=trust_pickle,
            device=device,
            trust_code=True if model_source else None,
        )
        inputs = original.input_spec.sample(seed=recipe.seed, dims=recipe.benchmark.dims or None)
        data = _build_data(recipe, original)
        emit(Progress(index=-1, fraction=0.3, message="reference outputs"))
        reference = normalize_outputs(original.forward(inputs))
        torch.save(reference, run_dir / "reference_outputs.pt")
        if is_cancelled():
            return cancelled()
        emit(Progress(index=-1, fraction=0.5, message="benchmarking the original model"))
        baseline = measure(original, inputs, recipe, device)
        baseline_acc = _accuracy(original, data, recipe) if data.get("eval") is not None else None
        if baseline_acc is not None:
            baseline["accuracy"] = baseline_acc
    except Exception as exc:  # noqa: BLE001 - reported as RunFailed with its message
        return fail(exc, None)
    result.baseline = baseline
    enabled = recipe.enabled_steps()
    emit(
        RunStarted(
            run_dir=str(run_dir.resolve()),
            model_source=recipe.model.source,
            model_kind=original.kind,
            device=device,
            recipe=recipe.to_dict(),
            environment=env,
            num_steps=len(enabled),
            baseline=baseline,
            model_hash=original.content_hash,
            input_spec=str(original.input_spec),
        )
    )

    # Passes may change the module they get in place; keep the original intact for passes
    # that need it (sensitivity, QAT) by handing the first step a copy.
    current = _copy_model(original)
    for index, step in enabled:
        if is_cancelled():
            return cancelled()
        emit(StepStarted(index=index, pass_name=step.pass_name, params=step.params))
        t0 = time.perf_counter()
        step_dir = run_dir / f"step_{index:02d}_{step.pass_name}"
        step_dir.mkdir(parents=True, exist_ok=True)
        ctx = PassContext(
            inputs=inputs,
            device=device,
            work_dir=step_dir,
            step_index=index,
            seed=recipe.seed,
            progress_cb=lambda f, m, i=index: emit(Progress(index=i, fraction=f, message=m)),
            cancel_cb=is_cancelled,
            calibration=data.get("calibration"),
            train_data=data.get("train"),
            eval_data=data.get("eval"),
            original=original,
            recipe=recipe,
        )
        try:
            pass_cls = get_pass(step.pass_name)
            p = pass_cls()
            config = pass_cls.parse_config(step.params)
            p.check_requirements(current, device)
            torch.manual_seed(recipe.seed)
            new_model = p.apply(current, config, ctx)
            if new_model is None:
                raise PassError(f"{step.pass_name} returned no model (a bug in the pass)")
            ctx.check_cancelled()
            emit(Progress(index=index, fraction=0.9, message="checking parity"))
            outputs = normalize_outputs(new_model.forward(inputs))
            torch.save(outputs, step_dir / "outputs.pt")
            report = compare(reference, outputs, Tolerances(**_tol(recipe.gates_for(step))))
            (step_dir / "parity.json").write_text(
                __import__("json").dumps(report.to_dict(), indent=2)
            )
            emit(Progress(index=index, fraction=0.92, message="timing against the original"))
            # The original and this step's model, timed in alternating rounds in this process:
            # a change of load during the run hits both alike and cancels in the ratio.
            metrics, timing = measure_against(
                original,
                new_model,
                inputs,
                recipe,
                device,
                progress=lambda f, m, i=index: emit(
                    Progress(index=i, fraction=0.92 + 0.06 * f, message=m)
                ),
                cancel=is_cancelled,
            )
            ctx.details["timing"] = timing
            metrics.update(ctx.metrics)
            status = "succeeded" if report.passed else "gate_failed"
            if data.get("eval") is not None:
                acc = _accuracy(new_model, data, recipe)
                metrics["accuracy"] = acc
                drop = recipe.gates_for(step).max_accuracy_drop
                if acc is not None and baseline_acc is not None:
                    metrics["accuracy_drop"] = baseline_acc - acc
                    if drop is not None and baseline_acc - acc > drop:
                        status = "gate_failed"
                        ctx.warn(
                            f"accuracy dropped {baseline_acc - acc:.4f} > max_accuracy_drop {drop}"
                        )
            # After benchmarking and parity: saving never changes the step's outputs or timings.
            t_save = time.perf_counter()
            saved = (
                save_step_model(new_model, inputs, step_dir, ctx.artifacts, recipe.seed)
                if save_models
                else None
            )
            save_s = time.perf_counter() - t_save  # not part of the step's duration
            if saved is not None:
                ctx.details["saved_model"] = saved
            artifacts = [file_artifact(a["path"], a["kind"]) for a in ctx.artifacts]
            artifacts.append(file_artifact(step_dir / "outputs.pt", "outputs"))
            artifacts.append(file_artifact(step_dir / "parity.json", "parity_report"))
        except Cancelled:
            return cancelled()
        except Exception as exc:  # noqa: BLE001 - a failing step ends the run with its message
            duration = time.perf_counter() - t0
            msg = (
                str(exc)
                if isinstance(exc, AccelError)
                else f"{step.pass_name} failed: {type(exc).__name__}: {exc}"
            )
            if not isinstance(exc, AccelError):
                log.debug("pass %s crashed", step.pass_name, exc_info=True)
            sr = StepResult(
                index,
                step.pass_name,
                step.label,
                step.params,
                "failed",
                duration,
                details=ctx.details,
                error=msg,
            )
            result.steps.append(sr)
            emit(
                StepFinished(
                    index=index,
                    pass_name=step.pass_name,
                    status="failed",
                    duration_s=duration,
                    metrics={},
                    parity=None,
                    artifacts=[],
                    details=_jsonable(ctx.details),
                    error=msg,
                )
            )
            return fail(PassError(f"step {index + 1} ({step.label}): {msg}"), index)
        duration = time.perf_counter() - t0 - save_s
        sr = StepResult(
            index,
            step.pass_name,
            step.label,
            step.params,
            status,
            duration,
            metrics,
            report.to_dict(),
            artifacts,
            _jsonable(ctx.details),
        )
        result.steps.append(sr)
        emit(
            StepFinished(
                index=index,
                pass_name=step.pass_name,
                status=status,
                duration_s=duration,
                metrics=metrics,
                parity=report.to_dict(),
                artifacts=artifacts,
                details=sr.details,
            )
        )
        if status == "gate_failed":
            why = report.first_failure or "accuracy gate"
            emit(
                Log(
                    level="warning",
                    message=f"step {index + 1} ({step.label}) failed its gate: {why}",
                    index=index,
                )
            )
            if recipe.on_gate_fail == "stop":
                result.model = new_model
                return fail(
                    PassError(f"step {index + 1} ({step.label}) failed its parity gate: {why}"),
                    index,
                )
        current = new_model

    result.status = "succeeded"
    result.model = current
    result.duration_s = time.perf_counter() - t_run
    emit(RunFinished(status="succeeded", duration_s=result.duration_s, summary=_summary(result)))
    return result


SAVE_MODELS_ENV = "ACCEL_SAVE_STEP_MODELS"  # "0": steps save no model.pt2 (quick test runs)
MODEL_ARTIFACT_KINDS = ("model", "onnx", "exported_program", "torchscript")
MAX_SAVED_MODEL_BYTES = 2 * 1024**3  # larger step models are not saved (time and disk)


def save_step_model(
    model: Any,
    inputs: dict[str, Any],
    step_dir: Path,
    artifacts: list[dict[str, Any]],
    seed: int = 0,
) -> str | None:
    """Save a torch step's model as ``step_dir/model.pt2`` (torch.export, never a pickle) and
    add it to ``artifacts`` (kind "model"), so bisect and the graph diff can load every step.

    Returns what to put in ``details["saved_model"]``: the file name, ``"not saved: why"``,
    or None when the step already saved its model (ONNX, TorchScript, torch_export) or the
    model is not a torch module. The step's model is left as it was (mode, hooks)."""
    import torch

    if model.kind != "torch" or model.module is None:
        return None
    if any(a.get("kind") in MODEL_ARTIFACT_KINDS for a in artifacts):
        return None
    module = getattr(model.module, "_orig_mod", model.module)  # torch.compile: the eager module
    if isinstance(module, torch.jit.ScriptModule):
        return "not saved: a TorchScript module (save it with the torchscript step)"
    size = int(getattr(model, "size_bytes", 0) or 0)
    if size > MAX_SAVED_MODEL_BYTES:
        return f"not saved: the model is {size / 1024**3:.1f} GB (limit 2 GB)"
    t0 = time.perf_counter()
    try:
        ep = _export_step_module(model, module, inputs, seed)
        path = step_dir / "model.pt2"
        torch.export.save(ep, str(path))
    except Exception as exc:  # noqa: BLE001 - saving is a convenience; the step still succeeded
        log.debug("could not export the model of %s", step_dir.name, exc_info=True)
        text = str(exc).strip().splitlines()
        return f"not saved: torch.export failed: {type(exc).__name__}: {text[0] if text else ''}"[
            :300
        ]
    artifacts.append({"kind": "model", "path": str(path)})
    log.debug("saved %s in %.2f s", path, time.perf_counter() - t0)
    return path.name


def _export_step_module(model: Any, module: Any, inputs: dict[str, Any], seed: int) -> Any:
    """torch.export ``module`` with the input spec's symbolic dims dynamic (static if that
    fails). The program takes the spec's inputs: the model's input casts (fp16/bf16) are
    exported inside it, so it runs on the same inputs as the original."""
    import torch

    from accel.models.inputs import is_floating, torch_dtype
    from accel.passes.torch_export import (
        TorchExportConfig,
        _identifier,
        dynamic_dims,
        dynamic_shapes_spec,
        example_for_export,
    )

    spec = model.input_spec
    names = list(inputs)
    casts = [
        torch_dtype(c) if c and is_floating(c) else None
        for c in (model.input_casts.get(n) for n in names)
    ]

    def cast_inputs(_m: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            a.to(c)
            if c is not None and isinstance(a, torch.Tensor) and a.is_floating_point()
            else a
            for a, c in zip(args, casts, strict=False)
        )

    dims = dynamic_dims(spec, TorchExportConfig())
    example = example_for_export(spec, inputs, dims, seed) if dims else dict(inputs)
    feed = model.replace(input_casts={}).prepare_inputs(example)  # device, memory format
    dim_objs = {n: torch.export.Dim(_identifier(n), min=lo, max=hi) for n, (lo, hi) in dims.items()}
    shapes = tuple(
        {axis: dim_objs[d] for axis, d in m.items()} for m in dynamic_shapes_spec(spec, dims)
    )
    was_training = module.training
    handle = module.register_forward_pre_hook(cast_inputs) if any(casts) else None
    try:
        module.eval()
        try:
            return torch.export.export(
                module, tuple(feed.values()), dynamic_shapes=shapes if dims else None, strict=False
            )
        except Exception:  # noqa: BLE001 - e.g. a dim the model fixes: export static shapes
            if not dims:
                raise
            feed = model.replace(input_casts={}).prepare_inputs(inputs)
            return torch.export.export(module, tuple(feed.values()), strict=False)
    finally:
        if handle is not None:
            handle.remove()
        module.train(was_training)


def _copy_model(model: Any) -> Any:
    import copy

    if model.kind != "torch":
        return model.replace()
    try:
        return model.replace(module=copy.deepcopy(model.module))
    except Exception:  # noqa: BLE001 - some scripted modules cannot be copied; reload instead
        from accel.models import load_model

        return load_model(model.source, model.input_spec, device=model.device, validate=False)


def _tol(g: Any) -> dict[str, Any]:
    return {"rtol": g.rtol, "atol": g.atol, "min_cosine": g.min_cosine, "min_top1": g.min_top1}


def _summary(result: RunResult) -> dict[str, Any]:
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


def _jsonable(v: Any) -> Any:
    import json

    try:
        json.dumps(v)
        return v
    except TypeError:
        return json.loads(json.dumps(v, default=str))


def _build_data(recipe: Recipe, model: Any) -> dict[str, Any]:
    """Data sources named by the recipe (validated before any work starts)."""
    d = recipe.data
    if not (d.calibration or d.train or d.eval):
        return {}
    from accel.data import make_data_source

    out: dict[str, Any] = {}
    for key in ("calibration", "train", "eval"):
        spec = getattr(d, key)
        if spec:
            out[key] = make_data_source(
                spec,
                model.input_spec,
                seed=recipe.seed,
                require_labels=key != "calibration",
                teacher=model,
            )
    return out


def _accuracy(model: Any, data: dict[str, Any], recipe: Recipe) -> float | None:
    from accel.data import evaluate_accuracy

    return evaluate_accuracy(model, data["eval"], recipe.data.metric)
