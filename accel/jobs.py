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

import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def _call_with_supported(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` passing only the keyword arguments it accepts (None ones dropped)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kw = {k: v for k, v in kwargs.items() if v is not None and (takes_any or k in params)}
    dropped = sorted(k for k, v in kwargs.items() if v is not None and k not in kw)
    if dropped:
        log.warning("%s does not take %s; ignored", getattr(fn, "__name__", fn), dropped)
    return fn(*args, **kw)


def run_recipe_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``recipe`` (dict or file path), optional ``model`` (source overriding the
    recipe's), ``device``, ``out`` (run folder), the caller's opt-ins ``trust_pickle`` and
    ``trust_recipe_code`` (never taken from the recipe). Returns the run's JSON summary."""
    from accel.runner import run_recipe

    recipe = params["recipe"]
    if isinstance(recipe, str):
        recipe = Path(recipe)

    def on_event(event: Any) -> None:
        emit(_to_dict(event))

    result = run_recipe(
        recipe,
        on_event,
        cancel,
        out_dir=params.get("out"),
        model_source=params.get("model"),
        device=params.get("device"),
        trust_pickle=bool(params.get("trust_pickle")),
        trust_recipe_code=bool(params.get("trust_recipe_code")),
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


def profile_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``model`` (source), optional ``input_spec``, ``device`` and the keyword
    arguments of ``accel.profile.profile_model``."""
    from accel.models import load_model
    from accel.profile import profile_model

    kwargs = dict(params)
    source = kwargs.pop("model")
    spec = kwargs.pop("input_spec", None)
    trust = bool(kwargs.pop("trust_pickle", False))
    if spec is not None:
        from accel.models import InputSpec

        spec = InputSpec.parse(spec) if isinstance(spec, str) else InputSpec.from_dict(spec)
    model = load_model(source, spec, trust_pickle=trust)
    emit({"event": "log", "level": "info", "message": f"loaded {source}", "index": None})

    def progress(fraction: float, message: str = "") -> None:
        emit({"event": "progress", "index": -1, "fraction": fraction, "message": message})

    result = _call_with_supported(profile_model, model, progress=progress, cancel=cancel, **kwargs)
    return _to_dict(result)


def analyze_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """Per-layer sensitivity analysis (``accel.sensitivity.analyze_sensitivity``)."""
    from accel.models import load_model
    from accel.sensitivity import analyze_sensitivity  # type: ignore[import-not-found]

    kwargs = dict(params)
    model = load_model(kwargs.pop("model"), kwargs.pop("input_spec", None))

    def progress(fraction: float, message: str = "") -> None:
        emit({"event": "progress", "index": -1, "fraction": fraction, "message": message})

    result = _call_with_supported(
        analyze_sensitivity, model, progress=progress, cancel=cancel, **kwargs
    )
    return _to_dict(result)


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
    # What the model's handler says about it and what the GUI can show for its kind.
    backend = model.backend
    netron = backend.netron_file(model)
    info.update(backend.info(model))
    info.update(
        {
            "runtime": backend.label,
            "capabilities": sorted(backend.capabilities),
            "profile_rows": backend.profile_rows,
            "netron_file": str(netron) if netron else None,
        }
    )
    return info


def inspect_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``model`` (source), optional ``input_spec``, ``trust_pickle``, ``graph``
    (default True). Returns ``{"info": model_info, "graph": Graph.to_dict() | None,
    "graph_error": str | None}``: a model whose graph cannot be built still opens."""
    from accel.models import InputSpec, load_model

    spec = params.get("input_spec")
    if spec is not None:
        spec = InputSpec.parse(spec) if isinstance(spec, str) else InputSpec.from_dict(spec)
    emit({"event": "progress", "index": -1, "fraction": 0.1, "message": "loading the model"})
    model = load_model(params["model"], spec, trust_pickle=bool(params.get("trust_pickle")))
    out: dict[str, Any] = {"info": model_info(model), "graph": None, "graph_error": None}
    if params.get("graph", True) and not cancel():
        emit({"event": "progress", "index": -1, "fraction": 0.5, "message": "building the graph"})
        try:
            from accel.graph import graph_from_model

            out["graph"] = graph_from_model(model).to_dict()
        except Exception as exc:  # the model still opens; the view says why there is no graph
            log.warning("no graph for %s: %s", params["model"], exc)
            out["graph_error"] = f"{type(exc).__name__}: {exc}"
    return out


def export_onnx_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """params: ``model``, optional ``input_spec``, ``out`` (the .onnx path; its folder holds
    any external data), ``exporter`` (default dynamo, falling back to torchscript). Uses the
    ``export_onnx`` pass, so the file is checked and keeps the spec's dynamic dims. An ONNX
    model returns its own file. Returns ``{"path": str, "warnings": [...]}``."""
    from accel.errors import PassError
    from accel.models import InputSpec, load_model
    from accel.passes import PassContext, get_pass

    spec = params.get("input_spec")
    if spec is not None:
        spec = InputSpec.parse(spec) if isinstance(spec, str) else InputSpec.from_dict(spec)
    model = load_model(params["model"], spec, trust_pickle=bool(params.get("trust_pickle")))
    backend = model.backend
    if "export_onnx" not in backend.capabilities:  # a runtime file already: show it as it is
        shown = backend.netron_file(model)
        if shown is None:
            raise PassError(f"{backend.label} models cannot be exported for Netron")
        return {"path": str(shown), "warnings": []}
    out = Path(params["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    export = get_pass("export_onnx")
    exporters = [params.get("exporter") or "dynamo"]
    if exporters[0] == "dynamo":
        exporters.append("torchscript")
    error: PassError | None = None
    for exporter in exporters:
        ctx = PassContext(
            inputs=model.example_inputs(),
            work_dir=out.parent,
            progress_cb=lambda f, m: emit(
                {"event": "progress", "index": -1, "fraction": f, "message": m}
            ),
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
    from accel.models import InputSpec, load_model

    spec = params.get("input_spec")
    if spec is not None:
        spec = InputSpec.parse(spec) if isinstance(spec, str) else InputSpec.from_dict(spec)
    saved = saved_step_models(params["run_dir"])
    if not saved:
        raise AccelError(
            "no step of this run saved a model file to compare with; run a recipe with a "
            "torch step (bf16, fold_batchnorm, quantize ...) or an export step"
        )
    steps = saved
    if params.get("step_index") is not None:
        steps = [s for s in saved if s[0] == int(params["step_index"])]
    elif params.get("step"):
        steps = [s for s in saved if f"step_{s[0]:02d}_{s[1]}" == params["step"]]
    if not steps:
        which = ", ".join(f"{i + 1}. {name}" for i, name, _ in saved)
        raise AccelError(
            f"step {params.get('step_index', params.get('step'))} of this run saved no model; "
            f"pick one that did: {which}"
        )
    index, name, artifact = steps[-1]
    step = f"step_{index:02d}_{name}"
    emit({"event": "progress", "index": -1, "fraction": 0.2, "message": "original graph"})
    original = load_model(params["model"], spec, trust_pickle=bool(params.get("trust_pickle")))
    graph_a = graph_from_model(original)
    emit({"event": "progress", "index": -1, "fraction": 0.6, "message": f"graph of {step}"})
    candidate = load_model(str(artifact), spec or original.input_spec)
    graph_b = graph_from_model(candidate)
    return {
        "graph": graph_b.to_dict(),
        "diff": diff_graphs(graph_a, graph_b).to_dict(),
        "step": step,
        "step_index": index,
        "artifact": str(artifact),
    }


def search_trial_job(params: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
    """One trial of a recipe search (``accel.search.trial.run_trial``; params: its spec)."""
    from accel.search.trial import run_trial

    return run_trial(params, emit, cancel)


JOBS: dict[str, Job] = {
    "run_recipe": run_recipe_job,
    "profile": profile_job,
    "analyze": analyze_job,
    "inspect": inspect_job,
    "export_onnx": export_onnx_job,
    "graph_diff": graph_diff_job,
    "search_trial": search_trial_job,
}


def register_job(name: str, fn: Job) -> Job:
    """Add a job kind (plugins and tests use this); returns ``fn``."""
    JOBS[name] = fn
    return fn
