"""One search trial: build a chain of steps (reusing a cached prefix), check parity, and only
if the gate holds, time it against the original in alternating rounds (``accel.measure``:
the speedup with its interval, the noise guard's verdict).

``run_trial(spec, emit, cancel) -> dict`` is a job (accel.jobs): it runs in a worker process
(local pool) or a Ray task, emits runner events (so a trial is recorded as a run like any
other) and returns plain JSON. Unlike ``run_recipe`` it does not benchmark every step: the
search only needs the final model, and a trial that fails its parity gate is never timed.
"""

from __future__ import annotations

import copy
import logging
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel.errors import AccelError, Cancelled, PassError
from accel.events import RunFailed, RunFinished, RunStarted, StepFinished, StepStarted
from accel.jsonable import jsonable

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]


def _copy_model(model: Any) -> Any:
    if model.module is None:  # runtime files (ONNX, OpenVINO IR) are not changed in place
        return model.replace()
    return model.replace(module=copy.deepcopy(model.module))


def _model_bytes(model: Any) -> float | None:
    path = getattr(model, "onnx_path", None)
    if model.module is None and path is not None:
        from accel.search.cache import _companions

        p = Path(path)
        if p.is_file():
            return float(p.stat().st_size + sum(f.stat().st_size for f in _companions(p)))
    size = getattr(model, "size_bytes", 0) or 0
    return float(size) if size else None


def cache_context(spec: dict[str, Any]) -> dict[str, Any]:
    """What besides the steps decides the model a prefix builds."""
    return {
        "source": spec["model"]["source"],
        "input_spec": spec["model"].get("input_spec"),
        "device": spec.get("device", "cpu"),
        "seed": spec.get("seed", 0),
        "data": spec.get("data") or {},
    }


def run_trial(
    spec: dict[str, Any],
    emit: Emit,
    cancel: Callable[[], bool],
    *,
    hold: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one trial (see module docstring). ``spec``: ``model`` {source, input_spec,
    trust_pickle}, ``device``, ``seed``, ``steps`` [{pass, params}], ``gates`` {rtol, atol,
    max_cosine_drop, max_accuracy_drop}, ``benchmark`` {warmup, iters, rounds, threads,
    dims}, ``data`` (recipe data section), ``cache`` {dir, max_entries, max_bytes} or None,
    ``out`` (the trial's run folder), ``trial`` (its number). ``benchmark.skip``: build and
    check only (no timing). In-process callers may pass ``hold`` (a dict) to get the built
    ``model``, the ``original`` and the ``inputs`` back (benchmarks that time contenders
    round-robin themselves)."""
    import torch

    from accel.bench import _batch_size, environment_info
    from accel.measure import TimingSettings, compare_interleaved
    from accel.models import load_model
    from accel.parity import Tolerances, compare, normalize_outputs
    from accel.passes import PassContext, get_pass
    from accel.runner import file_artifact
    from accel.search.cache import PrefixCache
    from accel.search.space import prefix_key

    t_start = time.perf_counter()
    device = spec.get("device", "cpu")
    seed = int(spec.get("seed", 0))
    steps = list(spec.get("steps", []))
    gates = spec.get("gates", {})
    bench = spec.get("benchmark", {})
    run_dir = Path(spec["out"])
    run_dir.mkdir(parents=True, exist_ok=True)
    recipe = {
        "name": f"trial {spec.get('trial', 0)}",
        "model": spec["model"],
        "device": device,
        "seed": seed,
        "steps": steps,
    }
    state: dict[str, Any] = {"index": None}

    def failed(exc: BaseException) -> dict[str, Any]:
        msg = str(exc) if isinstance(exc, AccelError) else f"{type(exc).__name__}: {exc}"
        emit(
            RunFailed(
                error=msg,
                error_type=type(exc).__name__,
                index=state["index"],
                traceback="" if isinstance(exc, AccelError) else traceback.format_exc(),
            ).to_dict()
        )
        return {
            "status": "failed",
            "trial_status": "failed",
            "error": msg,
            "run_dir": str(run_dir),
            "duration_s": time.perf_counter() - t_start,
        }

    try:
        torch.manual_seed(seed)
        m = spec["model"]
        original = load_model(
            m["source"],
            m.get("input_spec"),
            trust_pickle=bool(m.get("trust_pickle")),
            device=device,
        )
        inputs = original.input_spec.sample(seed=seed, dims=bench.get("dims") or None)
        reference = normalize_outputs(original.forward(inputs))
        data = _data_sources(spec.get("data") or {}, original, seed)
    except Exception as exc:  # noqa: BLE001 - reported as the trial's failure
        return failed(exc)
    emit(
        RunStarted(
            run_dir=str(run_dir.resolve()),
            model_source=original.source,
            model_kind=original.kind,
            device=device,
            recipe=recipe,
            environment=environment_info(device=device),
            num_steps=len(steps),
            baseline={},
            model_hash=original.content_hash,
            input_spec=str(original.input_spec),
        ).to_dict()
    )
    cache = None
    if spec.get("cache"):
        c = spec["cache"]
        cache = PrefixCache(
            c["dir"],
            max_entries=int(c.get("max_entries", 32)),
            max_bytes=int(c.get("max_bytes", 8 * 1024**3)),
        )
    context = cache_context(spec)
    keys = [prefix_key(original.content_hash, context, steps[: i + 1]) for i in range(len(steps))]
    current = None
    start = 0
    if cache is not None:
        for k in range(len(steps), 0, -1):
            current = cache.get(keys[k - 1], original)
            if current is not None:
                start = k
                cache.stats.hits += 1
                cache.stats.reused_steps += k
                break
        else:
            cache.stats.misses += 1
    if current is None:
        current = _copy_model(original)
    last_details: dict[str, Any] = {}
    for i in range(start):
        emit(StepStarted(index=i, pass_name=steps[i]["pass"], params=steps[i]["params"]).to_dict())
        reused = {"reused": f"built by an earlier trial (cache {keys[i][:12]})"}
        if i == len(steps) - 1:  # the last step's StepFinished carries parity and timing
            last_details = reused
            continue
        emit(
            StepFinished(
                index=i,
                pass_name=steps[i]["pass"],
                status="succeeded",
                duration_s=0.0,
                metrics={},
                parity=None,
                artifacts=[],
                details=reused,
            ).to_dict()
        )
    last_artifacts: list[dict[str, Any]] = []
    t_last = time.perf_counter()
    for i in range(start, len(steps)):
        step = steps[i]
        state["index"] = i
        if cancel():
            return _cancelled(emit, run_dir, t_start)
        emit(StepStarted(index=i, pass_name=step["pass"], params=step["params"]).to_dict())
        t0 = time.perf_counter()
        step_dir = run_dir / f"step_{i:02d}_{step['pass']}"
        step_dir.mkdir(parents=True, exist_ok=True)
        ctx = PassContext(
            inputs=inputs,
            device=device,
            work_dir=step_dir,
            step_index=i,
            seed=seed,
            cancel_cb=cancel,
            calibration=data.get("calibration"),
            train_data=data.get("train"),
            eval_data=data.get("eval"),
            original=original,
        )
        try:
            cls = get_pass(step["pass"])
            p = cls()
            config = cls.parse_config(step["params"])
            p.check_requirements(current, device)
            torch.manual_seed(seed)
            new_model = p.apply(current, config, ctx)
            if new_model is None:
                raise PassError(f"{step['pass']} returned no model (a bug in the pass)")
        except Cancelled:
            return _cancelled(emit, run_dir, t_start)
        except Exception as exc:  # noqa: BLE001 - the trial fails, the search goes on
            msg = str(exc) if isinstance(exc, AccelError) else f"{type(exc).__name__}: {exc}"
            emit(
                StepFinished(
                    index=i,
                    pass_name=step["pass"],
                    status="failed",
                    duration_s=time.perf_counter() - t0,
                    metrics={},
                    parity=None,
                    artifacts=[],
                    details=jsonable(ctx.details),
                    error=msg,
                ).to_dict()
            )
            return failed(PassError(f"step {i + 1} ({step['pass']}): {msg}"))
        if cache is not None and cache.put(keys[i], new_model):
            log.debug("cached the model of steps 1..%d", i + 1)
        current = new_model
        if i < len(steps) - 1:
            emit(
                StepFinished(
                    index=i,
                    pass_name=step["pass"],
                    status="succeeded",
                    duration_s=time.perf_counter() - t0,
                    metrics=dict(ctx.metrics),
                    parity=None,
                    artifacts=[file_artifact(a["path"], a["kind"]) for a in ctx.artifacts],
                    details=jsonable(ctx.details),
                ).to_dict()
            )
        else:
            last_details = jsonable(ctx.details)
            last_artifacts = [file_artifact(a["path"], a["kind"]) for a in ctx.artifacts]
            t_last = t0
    # -- the gate, before any timing ------------------------------------------------------
    last = len(steps) - 1
    state["index"] = last if last >= 0 else None
    try:
        outputs = normalize_outputs(current.forward(inputs))
        max_drop = gates.get("max_cosine_drop")
        tol = Tolerances(
            rtol=float(gates.get("rtol", 1e-3)),
            atol=float(gates.get("atol", 1e-4)),
            min_cosine=None if max_drop is None else 1.0 - float(max_drop),
        )
        report = compare(reference, outputs, tol)
        worst = report.worst()
        cos = worst.get("min_cosine")
        cosine_drop = None if cos is None else max(0.0, 1.0 - float(cos))
        metrics: dict[str, float | None] = {
            "cosine_drop": cosine_drop,
            "max_abs": worst.get("max_abs"),
            "size_bytes": _model_bytes(current),
        }
        gate_reason = None if report.passed else f"parity: {report.first_failure}"
        if data.get("eval") is not None:
            from accel.data import evaluate_accuracy

            metric = (spec.get("data") or {}).get("metric", "top1")
            base_acc = evaluate_accuracy(original, data["eval"], metric)
            acc = evaluate_accuracy(current, data["eval"], metric)
            metrics["accuracy"] = acc
            metrics["accuracy_drop"] = base_acc - acc
            max_acc = gates.get("max_accuracy_drop")
            if gate_reason is None and max_acc is not None and base_acc - acc > max_acc:
                gate_reason = f"accuracy dropped {base_acc - acc:.4f} > {max_acc}"
        trial_status = "ok"
        if hold is not None:
            hold.update(model=current, original=original, inputs=inputs)
        if gate_reason is None and not bench.get("skip"):
            if cancel():
                return _cancelled(emit, run_dir, t_start)
            comparison = compare_interleaved(
                original,
                current,
                inputs,
                TimingSettings(
                    rounds=int(bench.get("rounds", 5)),
                    iters=int(bench.get("iters", 30)),
                    warmup=int(bench.get("warmup", 3)),
                    threads=bench.get("threads"),
                    min_time_s=float(bench.get("min_time_s", 0.5)),
                ),
                device=device,
                cancel=cancel,
                seed=seed,
            )
            metrics.update(comparison.metrics())
            p50 = metrics.get("latency_p50_ms")
            metrics["throughput"] = _batch_size(inputs) * 1000.0 / p50 if p50 else None
            last_details["timing"] = comparison.timing_details()
            metrics["size_bytes"] = _model_bytes(current) or metrics.get("size_bytes")
        elif gate_reason is not None:
            trial_status = "gate_failed"
    except Exception as exc:  # noqa: BLE001
        return failed(exc)
    if steps:
        emit(
            StepFinished(
                index=last,
                pass_name=steps[last]["pass"],
                status="succeeded" if trial_status == "ok" else "gate_failed",
                duration_s=time.perf_counter() - t_last,
                metrics=metrics,
                parity=report.to_dict(),
                artifacts=last_artifacts,
                details=last_details,
            ).to_dict()
        )
    duration = time.perf_counter() - t_start
    summary = {
        "steps": len(steps),
        "final_speedup": metrics.get("speedup"),
        "final_latency_p50_ms": metrics.get("latency_p50_ms"),
        "baseline_latency_p50_ms": metrics.get("baseline_latency_p50_ms"),
    }
    emit(RunFinished(status="succeeded", duration_s=duration, summary=summary).to_dict())
    return {
        "status": "succeeded",
        "trial_status": trial_status,
        "gate": gate_reason,
        "metrics": metrics,
        "parity_summary": report.summary(),
        "cache": cache.stats.to_dict() if cache is not None else None,
        "reused_steps": start,
        "run_dir": str(run_dir),
        "duration_s": duration,
    }


def _cancelled(emit: Emit, run_dir: Path, t_start: float) -> dict[str, Any]:
    d = time.perf_counter() - t_start
    emit(RunFinished(status="cancelled", duration_s=d, summary={}).to_dict())
    return {"status": "cancelled", "trial_status": "cancelled", "run_dir": str(run_dir)}


def _data_sources(d: dict[str, Any], model: Any, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not any(d.get(k) for k in ("calibration", "train", "eval")):
        return out
    from accel.data import make_data_source

    for key in ("calibration", "train", "eval"):
        if d.get(key):
            out[key] = make_data_source(
                d[key],
                model.input_spec,
                seed=seed,
                require_labels=key != "calibration",
                teacher=model,
            )
    return out
