"""One search trial: build a chain of steps (reusing a cached prefix), check parity, and only
if the gate holds, time it against the original in alternating rounds (``accel.timing``:
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
from accel.generate.settings import is_generate
from accel.jsonable import jsonable
from accel.search import generation
from accel.timing.result import StepTiming

# A trial whose model ran below this speedup in each of its first rounds stops timing there
# (accel.timing.run_round_robin's give_up_below): it cannot be a search's best, and on HF
# EfficientNet-B0 (1 thread, AVX2) two torch.compile trials at 0.04-0.09x took 110-145 s.
GIVE_UP_BELOW = 0.25

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]


def _copy_model(model: Any) -> Any:
    if model.module is None:  # runtime files (ONNX, OpenVINO IR) are not changed in place
        return model.replace()
    return model.replace(module=copy.deepcopy(model.module))


def _model_bytes(model: Any) -> float | None:
    from accel.search.cache import PrefixCache, _companions

    found = PrefixCache.model_file(model)
    if found is not None:
        p = found[1]
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
    round-robin themselves). The search's final re-timing is another job
    (``accel.search.job.run_search_job`` chooses)."""
    trial = TrialBuild(spec, emit, cancel)
    try:
        trial.load()
    except Exception as exc:  # noqa: BLE001 - reported as the trial's failure
        return trial.failed(exc)
    trial.emit_started()
    trial.restore_cached_prefix()
    trial.replay_reused_steps()
    stopped = trial.build()
    if stopped is not None:
        return stopped
    return trial.gate_time_and_record(hold)


class TrialBuild:
    """The state of one trial between its phases: load, build (cached prefix, then the
    remaining steps), gate (parity, accuracy), time (interleaved against the original) and
    record (the last StepFinished, RunFinished and the returned summary)."""

    def __init__(self, spec: dict[str, Any], emit: Emit, cancel: Callable[[], bool]) -> None:
        self.t_start = time.perf_counter()
        self.spec = spec
        self.emit = emit
        self.cancel = cancel
        self.device = spec.get("device", "cpu")
        self.seed = int(spec.get("seed", 0))
        self.steps: list[dict[str, Any]] = list(spec.get("steps", []))
        self.gates: dict[str, Any] = spec.get("gates", {})
        self.bench: dict[str, Any] = spec.get("benchmark", {})
        self.run_dir = Path(spec["out"])
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.index: int | None = None  # the step a failure is reported against
        self.cache: Any = None
        self.keys: list[str] = []
        self.start = 0  # steps reused from the cache
        self.current: Any = None
        self.last_details: dict[str, Any] = {}
        self.timing: StepTiming | None = None  # the last step against the original
        self.last_artifacts: list[dict[str, Any]] = []
        self.t_last = time.perf_counter()
        self.generation: Any = None  # accel.generate baseline of a generation objective

    # -- outcomes ----------------------------------------------------------------------------
    def failed(self, exc: BaseException) -> dict[str, Any]:
        msg = str(exc) if isinstance(exc, AccelError) else f"{type(exc).__name__}: {exc}"
        self.emit(
            RunFailed(
                error=msg,
                error_type=type(exc).__name__,
                index=self.index,
                traceback="" if isinstance(exc, AccelError) else traceback.format_exc(),
            ).to_dict()
        )
        return {
            "status": "failed",
            "trial_status": "failed",
            "error": msg,
            "run_dir": str(self.run_dir),
            "duration_s": time.perf_counter() - self.t_start,
        }

    def cancelled(self) -> dict[str, Any]:
        return _cancelled(self.emit, self.run_dir, self.t_start)

    # -- load --------------------------------------------------------------------------------
    def load(self, shared: TrialBuild | None = None) -> None:
        """The original model, the inputs, its reference outputs and the data sources; those
        of ``shared`` (another build of the same spec's model) when given."""
        if shared is not None:
            self.original, self.inputs = shared.original, shared.inputs
            self.reference, self.data = shared.reference, shared.data
            return
        import torch

        torch.manual_seed(self.seed)
        self.original, self.inputs, self.reference = _loaded_original(
            self.spec["model"], self.device, self.seed, self.bench.get("dims") or None
        )
        torch.manual_seed(self.seed)
        self.data = _data_sources(self.spec.get("data") or {}, self.original, self.seed)

    def emit_started(self) -> None:
        from accel.timing.environment import environment_info

        recipe = {
            "name": f"trial {self.spec.get('trial', 0)}",
            "model": self.spec["model"],
            "device": self.device,
            "seed": self.seed,
            "steps": self.steps,
        }
        self.emit(
            RunStarted(
                run_dir=str(self.run_dir.resolve()),
                model_source=self.original.source,
                model_kind=self.original.kind,
                device=self.device,
                recipe=recipe,
                environment=environment_info(device=self.device),
                num_steps=len(self.steps),
                baseline={},
                model_hash=self.original.content_hash,
                input_spec=str(self.original.input_spec),
            ).to_dict()
        )

    # -- build -------------------------------------------------------------------------------
    def restore_cached_prefix(self) -> None:
        """Start from the longest prefix of the chain an earlier trial cached (if any)."""
        from accel.search.cache import PrefixCache
        from accel.search.space import prefix_key

        steps = self.steps
        if self.spec.get("cache"):
            c = self.spec["cache"]
            self.cache = PrefixCache(
                c["dir"],
                max_entries=int(c.get("max_entries", 32)),
                max_bytes=int(c.get("max_bytes", 8 * 1024**3)),
            )
        context = cache_context(self.spec)
        content_hash = self.original.content_hash
        self.keys = [prefix_key(content_hash, context, steps[: i + 1]) for i in range(len(steps))]
        if self.cache is not None:
            for k in range(len(steps), 0, -1):
                self.current = self.cache.get(self.keys[k - 1], self.original)
                if self.current is not None:
                    self.start = k
                    self.cache.stats.hits += 1
                    self.cache.stats.reused_steps += k
                    break
            else:
                self.cache.stats.misses += 1
        if self.current is None:
            self.current = _copy_model(self.original)

    def replay_reused_steps(self) -> None:
        """Events for the cached steps, so the trial's run lists every step."""
        steps = self.steps
        for i in range(self.start):
            step = steps[i]
            self.emit(StepStarted(index=i, pass_name=step["pass"], params=step["params"]).to_dict())
            reused = {"reused": f"built by an earlier trial (cache {self.keys[i][:12]})"}
            if i == len(steps) - 1:  # the last step's StepFinished carries parity and timing
                self.last_details = reused
                continue
            self.emit(
                StepFinished(
                    index=i,
                    pass_name=step["pass"],
                    status="succeeded",
                    duration_s=0.0,
                    metrics={},
                    parity=None,
                    artifacts=[],
                    details=reused,
                ).to_dict()
            )

    def build(self) -> dict[str, Any] | None:
        """Apply the steps after the cached prefix; a result dict if the trial stops here."""
        for i in range(self.start, len(self.steps)):
            self.index = i
            if self.cancel():
                return self.cancelled()
            stopped = self._apply_step(i)
            if stopped is not None:
                return stopped
        return None

    def _apply_step(self, i: int) -> dict[str, Any] | None:
        import torch

        from accel.passes import PassContext, get_pass

        step = self.steps[i]
        self.emit(StepStarted(index=i, pass_name=step["pass"], params=step["params"]).to_dict())
        t0 = time.perf_counter()
        step_dir = self.run_dir / f"step_{i:02d}_{step['pass']}"
        step_dir.mkdir(parents=True, exist_ok=True)
        ctx = PassContext(
            inputs=self.inputs,
            device=self.device,
            work_dir=step_dir,
            step_index=i,
            seed=self.seed,
            cancel_cb=self.cancel,
            calibration=self.data.get("calibration"),
            train_data=self.data.get("train"),
            eval_data=self.data.get("eval"),
            original=self.original,
        )
        try:
            cls = get_pass(step["pass"])
            p = cls()
            config = cls.parse_config(step["params"])
            p.check_requirements(self.current, self.device)
            torch.manual_seed(self.seed)
            new_model = p.apply(self.current, config, ctx)
            if new_model is None:
                raise PassError(f"{step['pass']} returned no model (a bug in the pass)")
        except Cancelled:
            return self.cancelled()
        except Exception as exc:  # noqa: BLE001 - the trial fails, the search goes on
            msg = str(exc) if isinstance(exc, AccelError) else f"{type(exc).__name__}: {exc}"
            self.emit(
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
            return self.failed(PassError(f"step {i + 1} ({step['pass']}): {msg}"))
        self._keep(i, new_model, ctx, t0)
        return None

    def _keep(self, i: int, new_model: Any, ctx: Any, t0: float) -> None:
        """Cache the step's model and report it (the last step's report waits for the gate)."""
        from accel.runner import file_artifact

        if self.cache is not None and self.cache.put(self.keys[i], new_model):
            log.debug("cached the model of steps 1..%d", i + 1)
        self.current = new_model
        artifacts = [file_artifact(a["path"], a["kind"]) for a in ctx.artifacts]
        if i < len(self.steps) - 1:
            self.emit(
                StepFinished(
                    index=i,
                    pass_name=self.steps[i]["pass"],
                    status="succeeded",
                    duration_s=time.perf_counter() - t0,
                    metrics=dict(ctx.metrics),
                    parity=None,
                    artifacts=artifacts,
                    details=jsonable(ctx.details),
                ).to_dict()
            )
        else:
            self.last_details = jsonable(ctx.details)
            self.last_artifacts = artifacts
            self.t_last = t0

    # -- gate, time, record ------------------------------------------------------------------
    def gate_time_and_record(self, hold: dict[str, Any] | None) -> dict[str, Any]:
        """The gate, before any timing; time only a model that passed it."""
        last = len(self.steps) - 1
        self.index = last if last >= 0 else None
        try:
            report, metrics, gate_reason = self.gate()
            trial_status = "ok"
            if hold is not None:
                hold.update(model=self.current, original=self.original, inputs=self.inputs)
            if gate_reason is None and not self.bench.get("skip"):
                if self.cancel():
                    return self.cancelled()
                self._time(metrics)
            elif gate_reason is not None:
                trial_status = "gate_failed"
        except Exception as exc:  # noqa: BLE001
            return self.failed(exc)
        return self._record(report, metrics, gate_reason, trial_status)

    def gate(self) -> tuple[Any, dict[str, float | None], str | None]:
        """Parity against the original's outputs, then the accuracy drop (with eval data)."""
        from accel.parity import Tolerances, compare, normalize_outputs

        gates = self.gates
        if is_generate(self.bench):  # teacher-forced logits of a generation (accel.generate)
            store = None
            if self.cache is not None:
                store = generation.continuation_file(
                    self.cache.root, self.original.content_hash, self.bench, self.seed
                )
            report, metrics, reason, self.generation = generation.gate(
                self.original, self.current, self.bench, gates, self.seed, store
            )
            return report, metrics, reason
        outputs = normalize_outputs(self.current.forward(self.inputs))
        max_drop = gates.get("max_cosine_drop")
        tol = Tolerances(
            rtol=float(gates.get("rtol", 1e-3)),
            atol=float(gates.get("atol", 1e-4)),
            min_cosine=None if max_drop is None else 1.0 - float(max_drop),
        )
        report = compare(self.reference, outputs, tol)
        worst = report.worst()
        cos = worst.get("min_cosine")
        metrics: dict[str, float | None] = {
            "cosine_drop": None if cos is None else max(0.0, 1.0 - float(cos)),
            "max_abs": worst.get("max_abs"),
            "size_bytes": _model_bytes(self.current),
        }
        gate_reason = None if report.passed else f"parity: {report.first_failure}"
        if self.data.get("eval") is not None:
            from accel.data import evaluate_accuracy

            metric = (self.spec.get("data") or {}).get("metric", "top1")
            base_acc = evaluate_accuracy(self.original, self.data["eval"], metric)
            acc = evaluate_accuracy(self.current, self.data["eval"], metric)
            metrics["accuracy"] = acc
            metrics["accuracy_drop"] = base_acc - acc
            max_acc = gates.get("max_accuracy_drop")
            if gate_reason is None and max_acc is not None and base_acc - acc > max_acc:
                gate_reason = f"accuracy dropped {base_acc - acc:.4f} > {max_acc}"
        return report, metrics, gate_reason

    def _time(self, metrics: dict[str, float | None]) -> None:
        """Time the built model against the original in alternating rounds: the trial's
        StepTiming, and the objectives derived from it (speedup, throughput)."""
        from accel.timing import TimingSettings, batch_size, compare_interleaved

        if is_generate(self.bench):
            found, self.timing = generation.time_against(
                self.generation, self.current, self.bench, self.cancel
            )
            metrics.update(found)
            metrics["speedup"] = self.timing.speedup
            return
        comparison = compare_interleaved(
            self.original,
            self.current,
            self.inputs,
            TimingSettings.from_any(self.bench),
            device=self.device,
            cancel=self.cancel,
            seed=self.seed,
            give_up_below=GIVE_UP_BELOW,
        )
        self.timing = comparison.timing()
        metrics["speedup"] = self.timing.speedup
        p50 = self.timing.p50_step_ms
        metrics["throughput"] = batch_size(self.inputs) * 1000.0 / p50 if p50 else None
        if self.bench.get("concurrent"):  # the throughput objective: requests in flight together
            self._concurrent(metrics, batch_size(self.inputs), self.bench.get("threads"))
        metrics["size_bytes"] = _model_bytes(self.current) or metrics.get("size_bytes")

    def _concurrent(self, metrics: dict[str, float | None], batch: int, threads: Any) -> None:
        """Throughput with concurrent requests (the runtime's own queue, or two callers);
        the one-at-a-time figure stays as ``throughput_sync``, the latency as measured."""
        from accel.models.runtime import runtime_of

        model = self.current
        runtime = runtime_of(model)
        if threads:
            model = runtime.with_threads(model, int(threads))
        seconds = max(0.5, float(self.bench.get("min_time_s", 0.5)))
        calls = runtime.concurrent_throughput(model, self.inputs, seconds=seconds)
        if calls:
            metrics["throughput_sync"] = metrics.get("throughput")
            metrics["throughput"] = batch * calls

    def _record(
        self,
        report: Any,
        metrics: dict[str, float | None],
        gate_reason: str | None,
        trial_status: str,
    ) -> dict[str, Any]:
        """The last step's StepFinished (parity, timing), RunFinished and the trial's result."""
        steps = self.steps
        if steps:
            last = len(steps) - 1
            self.emit(
                StepFinished(
                    index=last,
                    pass_name=steps[last]["pass"],
                    status="succeeded" if trial_status == "ok" else "gate_failed",
                    duration_s=time.perf_counter() - self.t_last,
                    metrics=metrics,
                    parity=report.to_dict(),
                    artifacts=self.last_artifacts,
                    details=self.last_details,
                    timing=self.timing,
                ).to_dict()
            )
        duration = time.perf_counter() - self.t_start
        t = self.timing
        summary = {
            "steps": len(steps),
            # the interval and both latencies too, so History shows the trial as the
            # runner's runs (accel.runner.results.run_summary)
            "final_speedup": t.speedup if t else None,
            "final_speedup_low": t.speedup_low if t else None,
            "final_speedup_high": t.speedup_high if t else None,
            "final_timing": t.to_json() if t else None,
        }
        self.emit(RunFinished(status="succeeded", duration_s=duration, summary=summary).to_dict())
        return {
            "status": "succeeded",
            "trial_status": trial_status,
            "gate": gate_reason,
            "metrics": metrics,
            "timing": t.to_json() if t else None,
            "parity_summary": report.summary(),
            "cache": self.cache.stats.to_dict() if self.cache is not None else None,
            "reused_steps": self.start,
            "run_dir": str(self.run_dir),
            "duration_s": duration,
        }


# The last original this process loaded, with its inputs and reference outputs: the trials
# of a search in one process (in-process, a warm worker) load the same model with the same
# seed, 13 s each for a ResNet-50 from transformers on a loaded machine. Trials never change
# it (they build on a deep copy); one entry, so a process holds one original at most.
_LAST_ORIGINAL: list[tuple[Any, tuple[Any, Any, Any]]] = []


def _loaded_original(
    model: dict[str, Any], device: str, seed: int, dims: dict[str, int] | None
) -> tuple[Any, Any, Any]:
    """The original model (``load_model``), the spec's sample inputs at ``seed`` and its
    outputs on them; the same objects again for the same key (a file source's size and
    modification time are part of it)."""
    from accel.models import load_model
    from accel.parity import normalize_outputs

    source = str(model["source"])
    path = Path(source.split(":", 1)[0]) if ":" in source else Path(source)
    stamp = None
    try:
        if path.is_file():
            st = path.stat()
            stamp = (st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = None
    key = repr(
        (
            source,
            stamp,
            model.get("input_spec"),
            bool(model.get("trust_pickle")),
            device,
            seed,
            sorted((dims or {}).items()),
        )
    )
    if _LAST_ORIGINAL and _LAST_ORIGINAL[0][0] == key:
        return _LAST_ORIGINAL[0][1]
    _LAST_ORIGINAL.clear()  # free the previous model before loading the next
    original = load_model(
        source, model.get("input_spec"), trust_pickle=bool(model.get("trust_pickle")), device=device
    )
    inputs = original.input_spec.sample(seed=seed, dims=dims)
    reference = normalize_outputs(original.forward(inputs))
    _LAST_ORIGINAL.append((key, (original, inputs, reference)))
    return original, inputs, reference


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
