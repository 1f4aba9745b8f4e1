"""Headless jobs: the use cases a worker process runs, each declared once.

Every job kind is declared here with ``@declare_job(SpecClass, ...)`` on its use-case
function (``accel.job_registry``: kind, typed parameters, use case, typed result, warm
worker, run record, box folders). A job's runner (``JOBS[kind]``, made from the
declaration) is ``job(params, emit, cancel) -> dict``: ``params`` and the returned
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel.errors import Cancelled
from accel.events import Log, Progress
from accel.job_registry import (
    JOBS,
    CancelCheck,
    Emit,
    Job,
    JobFolders,
    declare_job,
    declare_runner,
    register_job,
    to_json,
)
from accel.job_results import (
    AnalyzeResult,
    BisectResult,
    InspectResult,
    ProfileResult,
    inputs_text,
    layer_parity_report,
    lazy_result,
    model_facts,
    model_info,
)
from accel.job_specs import (
    AnalyzeJob,
    BisectJob,
    DeployJob,
    ExportOnnxJob,
    GenerateJob,
    GraphDiffJob,
    InspectJob,
    ParityJob,
    ProfileJob,
    RunRecipeJob,
    ServeLMTestJob,
    ServeTestJob,
)

__all__ = ["JOBS", "SEARCH_TRIAL", "CancelCheck", "Emit", "Job", "register_job"]

log = logging.getLogger(__name__)


def _progress(emit: Emit) -> Callable[[float, str], None]:
    """A ``progress(fraction, message)`` callback that emits the typed Progress event."""

    def progress(fraction: float, message: str = "") -> None:
        emit(Progress(-1, fraction, message).to_dict())

    return progress


@declare_job(RunRecipeJob, records_run=True, folders=JobFolders(recipe=True))
def run_recipe_job(job: RunRecipeJob, emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """Run a recipe (``recipe`` dict or file path, optional ``model`` source overriding the
    recipe's, ``generate`` prompt/new tokens overriding a generation recipe's, ``device``, ``out`` run folder, the caller's opt-ins ``trust_pickle`` and
    ``trust_recipe_code``, never taken from the recipe). Returns the run's JSON summary."""
    from accel.runner import run_recipe

    recipe: Any = job.recipe
    if isinstance(recipe, str):
        recipe = Path(recipe)
    if job.generate:  # one length of a prompt-length sweep
        from accel.generate.settings import with_generate_settings
        from accel.recipe import load_recipe

        recipe = with_generate_settings(load_recipe(recipe), job.generate)

    def on_event(event: Any) -> None:
        emit(to_json(event))

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
        "baseline_timing": result.baseline_timing.to_json() if result.baseline_timing else None,
        "steps": [
            {
                "index": st.index,
                "pass_name": st.pass_name,
                "status": st.status,
                "metrics": st.metrics,
                "timing": st.timing.to_json() if st.timing else None,
                "error": st.error,
            }
            for st in result.steps
        ],
    }


@declare_job(
    ProfileJob,
    result=ProfileResult.from_dict,
    warm=True,
    folders=JobFolders(touches=("trace_path",)),
)
def profile(job: ProfileJob, emit: Emit, cancel: CancelCheck) -> ProfileResult:
    """The profile use case (``studio profile`` and the studio's Profile action)."""
    model = job.load(device=job.device or "cpu")
    emit(Log("info", f"loaded {job.model.source}").to_dict())
    inputs = model.example_inputs()
    result = ProfileResult(model_facts(model), inputs_text(inputs))
    if job.benchmark:
        from accel.timing.single import benchmark

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
    if job.generate:
        from accel.profile import profile_generation_layers

        result.profile.generation = profile_generation_layers(
            model, job.generation_settings(), rounds=job.gen_rounds, threads=job.threads,
            progress=_progress(emit), cancel=cancel,
        )  # fmt: skip
    return result


@declare_job(GenerateJob)  # not warm: a decoder may be big; its own worker ends with it
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
    layers = None
    if job.layers:
        from accel.profile import profile_generation_layers

        progress(0.7, "per-layer generation profile")
        layers = profile_generation_layers(
            model, bench, rounds=job.layer_rounds, threads=job.threads, seed=job.seed
        ).to_dict()
    return {
        "model": model_facts(model),
        "workload": prof.settings.to_dict(),
        "kv_cache": prof.figures.kv_cache,
        "rounds": len(prof.figures.tokens_per_s),
        "metrics": prof.metrics(),
        "layers": layers,
    }


@declare_job(AnalyzeJob, result=AnalyzeResult.from_dict, warm=True)
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


@declare_job(InspectJob, result=InspectResult.from_dict, warm=True)
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


@declare_job(ExportOnnxJob, warm=True, folders=JobFolders(writes_beside=("out",)))
def export_onnx(job: ExportOnnxJob, emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """``model``, optional ``input_spec``, ``out`` (the .onnx path; its folder holds
    any external data), ``exporter`` (default dynamo, falling back to torchscript). Uses the
    ``export_onnx`` pass, so the file is checked and keeps the spec's dynamic dims. An ONNX
    model returns its own file. Returns ``{"path": str, "warnings": [...]}``."""
    from accel.errors import PassError
    from accel.passes import PassContext, get_pass

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


@declare_job(GraphDiffJob, warm=True, folders=JobFolders(reads=("run_dir",)))
def graph_diff(job: GraphDiffJob, emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """``model`` (original source), optional ``input_spec``, ``run_dir`` (a run
    folder) and ``step_index`` (the recipe step's index) or ``step`` (step folder name);
    default: the last step that saved a model. Returns ``{"graph": the step's
    Graph.to_dict(), "diff": GraphDiff.to_dict(), "step", "step_index", "artifact"}``: what
    the recipe did to the original graph up to that step."""
    from accel.errors import AccelError
    from accel.graph import graph_from_model
    from accel.graph.diff import diff_graphs
    from accel.graph.layer_parity import saved_step_models
    from accel.models import load_model

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


@declare_job(ParityJob, result=layer_parity_report)
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


@declare_job(BisectJob, result=BisectResult.from_dict, folders=JobFolders(reads=("run_dir",)))
def bisect(job: BisectJob, emit: Emit, cancel: CancelCheck) -> BisectResult:
    """Every step of a run folder against its original (``bisect_run``)."""
    from accel.graph.layer_parity import bisect_run

    steps = bisect_run(
        job.run_dir,
        atol=job.atol,
        rtol=job.rtol,
        trust_pickle=job.trust_pickle,
        trust_code=job.trust_code,
    )
    return BisectResult(list(steps))


def search_trial_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """One trial of a recipe search, or its final re-timing (``accel.search.job``)."""
    from accel.search.job import run_search_job

    return run_search_job(params, emit, cancel)


# A trial is a recipe run: the search's pool executor records it as a run itself.
SEARCH_TRIAL = declare_runner(
    "search_trial", search_trial_job, records_run=True, folders=JobFolders(recipe=True)
)


@declare_job(
    ServeTestJob,
    result=lazy_result("accel.deploy.serve", "ServeReport.from_dict"),
    folders=JobFolders(reads=("artifact_path",), network=True),
)
def serve_test(job: ServeTestJob, emit: Emit, cancel: CancelCheck) -> Any:
    """A served load test of a run's model file (``accel.deploy.serve.serve_run``)."""
    from accel.deploy.serve import serve_run

    return serve_run(job, emit, cancel)


@declare_job(
    ServeLMTestJob,
    result=lazy_result("accel.deploy.serve_lm", "LMServeReport.from_dict"),
    folders=JobFolders(reads=("model_path",), network=True),
)
def serve_lm_test(job: ServeLMTestJob, emit: Emit, cancel: CancelCheck) -> Any:
    """A served generation load test of a stateful LM (``accel.deploy.serve_lm``)."""
    from accel.deploy.serve_lm import serve_lm_run

    return serve_lm_run(job, emit, cancel)


@declare_job(
    DeployJob,
    result=lazy_result("accel.deploy.triton", "DeployReport.from_dict"),
    folders=JobFolders(reads=("artifact_path",), writes=("out",)),
)
def deploy(job: DeployJob, emit: Emit, cancel: CancelCheck) -> Any:
    """A Triton model repository for a run's model file (``accel.deploy.triton``): loads the
    model, checks it runs on the spec, measures the batch sweep, writes the repository."""
    from accel.deploy.triton import write_repository
    from accel.models.inputs import InputSpec

    artifact = {"kind": job.artifact_kind, "path": job.artifact_path}
    return write_repository(
        artifact,
        InputSpec.parse(job.input_spec),
        job.out,
        name=job.name,
        device=job.device or "cpu",
        force=job.force,
        batches=job.batches,
    )
