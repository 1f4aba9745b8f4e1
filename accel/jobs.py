"""Headless jobs: the functions a worker process runs.

Each job is ``job(params, emit, cancel) -> dict``: ``params`` and the returned
dict are plain JSON, ``emit(dict)`` sends one event to whoever started the job
(runner events in their ``to_dict()`` form), ``cancel()`` returns True once
cancellation was requested and the job should stop at the next safe point
(raising ``accel.errors.Cancelled`` or returning ``{"status": "cancelled"}``).
A returned dict with ``"status": "failed"`` or ``"cancelled"`` ends the job so.

Jobs are testable without any process: call them with a list's ``append`` as
``emit`` and ``lambda: False`` as ``cancel``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.errors import Cancelled
from accel.events import Log, Progress
from accel.job_specs import (
    AnalyzeJob,
    BisectJob,
    ExportOnnxJob,
    GenerateJob,
    GraphDiffJob,
    InspectJob,
    ParityJob,
    ProfileJob,
    RunRecipeJob,
)

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]
CancelCheck = Callable[[], bool]
Job = Callable[[dict[str, Any], Emit, CancelCheck], dict[str, Any]]


def _to_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return {"value": repr(obj)}


def _progress(emit: Emit) -> Callable[[float, str], None]:
    """A ``progress(fraction, message)`` callback that emits the typed Progress event."""

    def progress(fraction: float, message: str = "") -> None:
        emit(Progress(-1, fraction, message).to_dict())

    return progress


def run_recipe_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``RunRecipeJob`` (``recipe`` dict or file path, optional ``model`` source
    overriding the recipe's, ``device``, ``out`` run folder, the caller's opt-ins
    ``trust_pickle`` and ``trust_recipe_code``, never taken from the recipe). Returns the
    run's JSON summary."""
    from accel.runner import run_recipe

    job = RunRecipeJob.from_params(params)
    recipe: Any = job.recipe
    if isinstance(recipe, str):
        recipe = Path(recipe)

    def on_event(event: Any) -> None:
        emit(_to_dict(event))

    result = run_recipe(
        recipe,
        on_event,
        cancel,
        out_dir=job.out,
        model_source=job.model,
        device=job.device,
        trust_pickle=job.trust_pickle,
        trust_recipe_code=job.trust_recipe_code,
    )
    return {
        "status": result.status,
        "error": result.error or "",
        "run_dir": str(result.run_dir),
        "duration_s": result.duration_s,
        "baseline": result.baseline,
        "steps": [
            {
                "index": st.index,
                "pass_name": st.pass_name,
                "status": st.status,
                "metrics": st.metrics,
                "error": st.error,
            }
            for st in result.steps
        ],
    }


def _inputs_text(inputs: Mapping[str, Any]) -> str:
    """``x:float32[8,1024]; ...`` of the example inputs actually fed."""
    parts = []
    for name, x in inputs.items():
        shape = ",".join(str(d) for d in getattr(x, "shape", ()))
        dtype = str(getattr(x, "dtype", type(x).__name__)).removeprefix("torch.")
        parts.append(f"{name}:{dtype}[{shape}]")
    return "; ".join(parts)


def model_facts(model: Any) -> dict[str, Any]:
    """What a stored profile names the model by (the store's model row) and the CLI prints."""
    return {
        "source": model.source,
        "kind": model.kind,
        "content_hash": model.content_hash,
        "input_spec": str(model.input_spec),
        "num_params": int(model.num_params),
        "size_bytes": int(model.size_bytes),
        "device": model.device,
    }


@dataclass
class ProfileResult:
    """What ``profile`` measured: the model's facts, the inputs fed, the benchmark and the
    per-layer profile (each None when the job did not ask for it)."""

    model: dict[str, Any]
    inputs: str
    benchmark: Any = None  # accel.bench.BenchResult
    profile: Any = None  # accel.profile.ModelProfile

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "inputs": self.inputs,
            "benchmark": self.benchmark.to_dict() if self.benchmark is not None else None,
            "profile": self.profile.to_dict() if self.profile is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProfileResult:
        from accel.bench import BenchResult
        from accel.profile import ModelProfile

        bench, prof = d.get("benchmark"), d.get("profile")
        return cls(
            model=dict(d.get("model") or {}),
            inputs=str(d.get("inputs") or ""),
            benchmark=BenchResult.from_dict(bench) if bench else None,
            profile=ModelProfile.from_dict(prof) if prof else None,
        )


def profile(job: ProfileJob, emit: Emit, cancel: CancelCheck) -> ProfileResult:
    """The profile use case (``studio profile`` and the studio's Profile action)."""
    model = job.load(device=job.device or "cpu")
    emit(Log("info", f"loaded {job.model.source}").to_dict())
    inputs = model.example_inputs()
    result = ProfileResult(model_facts(model), _inputs_text(inputs))
    if job.benchmark:
        from accel.bench import benchmark

        result.benchmark = benchmark(
            model,
            inputs,
            device=job.device or "cpu",
            warmup=job.warmup,
            iters=job.bench_iters,
            threads=job.threads,
        )
    if job.layers:
        if cancel():
            raise Cancelled("profile cancelled")
        from accel.profile import profile_model

        result.profile = profile_model(
            model,
            inputs,
            iters=job.iters,
            warmup=job.warmup,
            ops=job.ops,
            trace_path=job.trace_path,
            device=job.device,
            threads=job.threads,
            progress=_progress(emit),
            cancel=cancel,
        )
    return result


def profile_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``ProfileJob``. Returns ``ProfileResult.to_dict()``."""
    return profile(ProfileJob.from_params(params), emit, cancel).to_dict()


def generate(job: GenerateJob, emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """A decoder LM generating alone (``accel.generate``): TTFT, TPOT, tokens/s with
    intervals, weights and KV-cache memory; JSON."""
    from accel.generate.evaluate import profile_generation

    progress = _progress(emit)
    progress(0.05, "loading the model")
    model = job.load()
    progress(0.3, "generating")
    bench = job.model_dump(include={"prompt_tokens", "new_tokens", "batch", "rounds", "threads"})
    prof = profile_generation(model, bench, seed=job.seed)
    return {
        "model": model_facts(model),
        "workload": prof.settings.to_dict(),
        "kv_cache": prof.figures.kv_cache,
        "rounds": len(prof.figures.tokens_per_s),
        "metrics": prof.metrics(),
    }


def generate_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``GenerateJob``. Returns ``generate``'s JSON."""
    return generate(GenerateJob.from_params(params), emit, cancel)


@dataclass
class AnalyzeResult:
    """The sensitivity report and, when the job had a gate, the layers to keep in float."""

    report: Any  # accel.sensitivity.SensitivityReport
    auto: Any = None  # accel.sensitivity.AutoExcludeResult

    def to_dict(self) -> dict[str, Any]:
        out = self.report.to_dict()
        if self.auto is not None:
            out["auto_exclude"] = self.auto.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AnalyzeResult:
        from accel.sensitivity import AutoExcludeResult, SensitivityReport

        d = dict(d)
        auto = d.pop("auto_exclude", None)
        return cls(SensitivityReport.from_dict(d), AutoExcludeResult(**auto) if auto else None)


def analyze(job: AnalyzeJob, emit: Emit, cancel: CancelCheck) -> AnalyzeResult:
    """Per-layer sensitivity (``accel.sensitivity``); with a gate, ``auto_exclude`` too.
    The model is analysed on the CPU."""
    from accel.sensitivity import analyze_sensitivity, auto_exclude

    model = job.load()
    progress = _progress(emit)
    report = analyze_sensitivity(
        model,
        job.pass_name,
        data=job.data,
        params=dict(job.params),
        progress=progress,
        cancel=cancel,
        max_layers=job.max_layers,
        method=job.method,
    )
    auto = None
    if job.gated:
        auto = auto_exclude(
            report,
            job.max_error,
            min_cosine=job.min_cosine,
            max_accuracy_drop=job.max_accuracy_drop,
            model=model,
            progress=progress,
            cancel=cancel,
        )
    return AnalyzeResult(report, auto)


def analyze_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``AnalyzeJob``. Returns the report's JSON (plus ``auto_exclude`` with a gate)."""
    return analyze(AnalyzeJob.from_params(params), emit, cancel).to_dict()


def model_info(model: Any) -> dict[str, Any]:
    """JSON facts about a ``LoadedModel`` for people (the studio's Model panel)."""
    info: dict[str, Any] = {
        "source": model.source,
        "kind": model.kind,
        "format": model.format,
        "input_spec": str(model.input_spec),
        "inputs": [
            {"name": t.name, "shape": list(t.shape), "dtype": t.dtype}
            for t in model.input_spec.inputs
        ],
        "num_params": int(model.num_params),
        "size_bytes": int(model.size_bytes),
        "content_hash": model.content_hash,
        "device": model.device,
        "onnx_path": str(model.onnx_path) if model.onnx_path else None,
        "class_name": "",
    }
    # What the model's runtime says about it and what the GUI can show for its kind.
    runtime = model.runtime
    netron = runtime.netron_file(model)
    info.update(runtime.info(model))
    info.update(
        {
            "runtime": runtime.label,
            "capabilities": sorted(runtime.capabilities),
            "profile_rows": runtime.profile_rows,
            "netron_file": str(netron) if netron else None,
        }
    )
    return info


@dataclass
class InspectResult:
    """An opened model: the LoadedModel, its facts for people, its graph (or why none)."""

    model: Any  # accel.models.LoadedModel (not sent: to_dict leaves it out)
    info: dict[str, Any]
    graph: Any = None  # accel.graph.Graph
    graph_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        graph = self.graph.to_dict() if self.graph is not None else None
        return {"info": self.info, "graph": graph, "graph_error": self.graph_error}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InspectResult:
        """What a worker sent back: the facts and the graph (the model stays there)."""
        from accel.graph import Graph

        graph = d.get("graph")
        return cls(
            None,
            dict(d.get("info") or {}),
            Graph.from_dict(graph) if graph else None,
            d.get("graph_error"),
        )


def inspect(job: InspectJob, emit: Emit, cancel: CancelCheck) -> InspectResult:
    """Open a model (on the CPU): its facts and, with ``job.graph``, its graph. A model whose
    graph cannot be built still opens (``graph_error`` says why)."""
    progress = _progress(emit)
    progress(0.1, "loading the model")
    model = job.load()
    out = InspectResult(model, model_info(model))
    if job.graph and not cancel():
        progress(0.5, "building the graph")
        try:
            from accel.graph import graph_from_model

            out.graph = graph_from_model(model)
        except Exception as exc:  # the model still opens; the view says why there is no graph
            log.warning("no graph for %s: %s", job.model.source, exc)
            out.graph_error = f"{type(exc).__name__}: {exc}"
    return out


def inspect_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``InspectJob``. Returns ``{"info": model_info, "graph": Graph.to_dict() |
    None, "graph_error": str | None}``."""
    return inspect(InspectJob.from_params(params), emit, cancel).to_dict()


def export_onnx_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``model``, optional ``input_spec``, ``out`` (the .onnx path; its folder holds
    any external data), ``exporter`` (default dynamo, falling back to torchscript). Uses the
    ``export_onnx`` pass, so the file is checked and keeps the spec's dynamic dims. An ONNX
    model returns its own file. Returns ``{"path": str, "warnings": [...]}``."""
    from accel.errors import PassError
    from accel.passes import PassContext, get_pass

    job = ExportOnnxJob.from_params(params)
    model = job.load()
    runtime = model.runtime
    if "export_onnx" not in runtime.capabilities:  # a runtime file already: show it as it is
        shown = runtime.netron_file(model)
        if shown is None:
            raise PassError(f"{runtime.label} models cannot be exported for Netron")
        return {"path": str(shown), "warnings": []}
    out = Path(job.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    export = get_pass("export_onnx")
    exporters: list[str] = [job.exporter or "dynamo"]
    if exporters[0] == "dynamo":
        exporters.append("torchscript")
    error: PassError | None = None
    for exporter in exporters:
        ctx = PassContext(
            inputs=model.example_inputs(),
            work_dir=out.parent,
            progress_cb=_progress(emit),
            cancel_cb=cancel,
        )
        try:
            exported = export().apply(model, export.parse_config({"exporter": exporter}), ctx)
        except PassError as exc:
            error = exc
            continue
        path = Path(exported.onnx_path)
        if path.resolve() != out.resolve():
            path.replace(out)  # same folder: external data names stay valid
            path = out
        return {
            "path": str(path),
            "exporter": exporter,
            "warnings": ctx.details.get("warnings", []),
        }
    assert error is not None
    raise error


def graph_diff_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``model`` (original source), optional ``input_spec``, ``run_dir`` (a run
    folder) and ``step_index`` (the recipe step's index) or ``step`` (step folder name);
    default: the last step that saved a model. Returns ``{"graph": the step's
    Graph.to_dict(), "diff": GraphDiff.to_dict(), "step", "step_index", "artifact"}``: what
    the recipe did to the original graph up to that step."""
    from accel.errors import AccelError
    from accel.graph import graph_from_model
    from accel.graph.diff import diff_graphs
    from accel.graph.layer_parity import saved_step_models
    from accel.models import load_model

    job = GraphDiffJob.from_params(params)
    saved = saved_step_models(job.run_dir)
    if not saved:
        raise AccelError(
            "no step of this run saved a model file to compare with; run a recipe with a "
            "torch step (bf16, fold_batchnorm, quantize ...) or an export step"
        )
    steps = saved
    if job.step_index is not None:
        steps = [s for s in saved if s[0] == job.step_index]
    elif job.step:
        steps = [s for s in saved if f"step_{s[0]:02d}_{s[1]}" == job.step]
    if not steps:
        which = ", ".join(f"{i + 1}. {name}" for i, name, _ in saved)
        asked = job.step_index if job.step_index is not None else job.step
        raise AccelError(f"step {asked} of this run saved no model; pick one that did: {which}")
    index, name, artifact = steps[-1]
    step = f"step_{index:02d}_{name}"
    progress = _progress(emit)
    progress(0.2, "original graph")
    original = job.load()
    graph_a = graph_from_model(original)
    progress(0.6, f"graph of {step}")
    candidate = load_model(str(artifact), job.model.input_spec or original.input_spec)
    graph_b = graph_from_model(candidate)
    return {
        "graph": graph_b.to_dict(),
        "diff": diff_graphs(graph_a, graph_b).to_dict(),
        "step": step,
        "step_index": index,
        "artifact": str(artifact),
    }


def parity(job: ParityJob, emit: Emit, cancel: CancelCheck) -> Any:
    """Layer-by-layer comparison of two models (``accel.graph.layer_parity``); B keeps its
    own input names (an ONNX export may call ``x`` ``input.1``)."""
    from accel.graph.layer_parity import compare_layers
    from accel.models import load_model

    a = job.load()
    spec = job.model.input_spec
    b = load_model(job.model_b, spec, trust_pickle=job.model.trust_pickle)
    return compare_layers(
        a, b, a.example_inputs(), atol=job.atol, rtol=job.rtol, min_cosine=job.min_cosine
    )


def parity_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``ParityJob``. Returns ``LayerParityReport.to_dict()``."""
    return parity(ParityJob.from_params(params), emit, cancel).to_dict()


def bisect(job: BisectJob, emit: Emit, cancel: CancelCheck) -> list[Any]:
    """Every step of a run folder against its original (``bisect_run``)."""
    from accel.graph.layer_parity import bisect_run

    return bisect_run(
        job.run_dir,
        atol=job.atol,
        rtol=job.rtol,
        trust_pickle=job.trust_pickle,
        trust_code=job.trust_code,
    )


def bisect_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``BisectJob``. Returns ``{"steps": [BisectStep as JSON]}``."""
    steps = bisect(BisectJob.from_params(params), emit, cancel)
    return {
        "steps": [
            {
                "step": s.step,
                "artifact": s.artifact,
                "report": s.report.to_dict() if s.report is not None else None,
                "error": s.error,
            }
            for s in steps
        ]
    }


def search_trial_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """One trial of a recipe search (``accel.search.trial.run_trial``; params: its spec)."""
    from accel.search.trial import run_trial

    return run_trial(params, emit, cancel)


def serve_test_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """A served load test of a run's model file (``accel.deploy.serve.serve_run``)."""
    from accel.deploy.serve import serve_run
    from accel.job_specs import ServeTestJob

    return serve_run(ServeTestJob.from_params(params), emit, cancel).to_dict()


def deploy_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """A Triton model repository for a run's model file (``accel.deploy.triton``): loads the
    model, checks it runs on the spec, measures the batch sweep, writes the repository."""
    from accel.deploy.triton import write_repository
    from accel.job_specs import DeployJob
    from accel.models.inputs import InputSpec

    job = DeployJob.from_params(params)
    artifact = {"kind": job.artifact_kind, "path": job.artifact_path}
    result = write_repository(
        artifact,
        InputSpec.parse(job.input_spec),
        job.out,
        name=job.name,
        device=job.device or "cpu",
        force=job.force,
        batches=job.batches,
    )
    return result.to_dict()


JOBS: dict[str, Job] = {
    "run_recipe": run_recipe_job,
    "profile": profile_job,
    "generate": generate_job,
    "analyze": analyze_job,
    "inspect": inspect_job,
    "export_onnx": export_onnx_job,
    "graph_diff": graph_diff_job,
    "search_trial": search_trial_job,
    "serve_test": serve_test_job,
    "deploy": deploy_job,
    "parity": parity_job,
    "bisect": bisect_job,
}


def register_job(name: str, fn: Job) -> Job:
    """Add a job kind (plugins and tests use this); returns ``fn``."""
    JOBS[name] = fn
    return fn
