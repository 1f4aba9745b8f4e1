"""Deploying and serve-testing stored runs, shared by the CLI and the GUI (no Qt, no CLI).

``servable_run`` finds a run's model file Triton can serve, ``deploy_spec`` is the
``deploy`` job (``accel.job_specs.DeployJob``) that writes its Triton repository (`studio
deploy` and the GUI's Deploy action run it in a worker),
``unavailable_reason`` says why a run cannot be serve-tested (PyTriton missing, no servable
model file — the CLI's own checks), ``job_params`` is what the GUI's worker job
(``accel.jobs`` kind ``serve_test``, spec ``accel.job_specs.ServeTestJob``) gets, and ``store_result`` keeps a finished test with its
run: the store rows and ``serve_test.json`` in the run folder.

A generation run (its recipe's benchmark says ``workload: generate``) is served token by token
instead: ``generation_target`` finds its stateful OpenVINO LM (or says why it has none) and
``lm_job`` is its ``serve_lm_test`` job (``accel.job_specs.ServeLMTestJob``), run by the CLI
and the GUI's Serve test dialog alike; ``lm_summary`` is the line both say of its result.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_CLIENTS = (1, 4, 16)


@functools.cache
def pytriton_missing() -> str | None:
    """Why PyTriton cannot serve here, or None. Looks the packages up without importing them
    (the GUI asks on every selection; the worker imports them for real)."""
    if not sys.platform.startswith("linux"):
        return (
            "PyTriton (the Triton server it ships) runs on Linux only; on this platform use "
            "Deploy run to Triton and a Triton server on a Linux machine"
        )
    for mod, pkg in (("pytriton", "nvidia-pytriton"), ("tritonclient", "tritonclient[grpc]")):
        if importlib.util.find_spec(mod) is None:
            return f"serving needs {pkg}, which is not installed: pip install 'accel-studio[serve]'"
    return None


def servable_run(repo: Any, run_id: str) -> tuple[Any, dict[str, Any], Any]:
    """(run detail, servable artifact, input spec) of a finished run; UserError otherwise."""
    from accel.deploy.triton import servable_artifact
    from accel.models import InputSpec
    from studio.errors import UserError

    detail = _finished(repo, run_id)
    steps = sorted((s for s in detail.steps if s.index >= 0), key=lambda s: s.index)
    artifacts = [
        {"kind": a.kind, "path": a.path, "step": s.index, "pass": s.pass_name}
        for s in steps
        for a in s.artifacts
    ]
    art = servable_artifact(artifacts)
    if art is None:
        last = steps[-1].pass_name if steps else "none"
        raise UserError(
            f"run {detail.id[:12]} has no model file Triton can serve (its last step: {last}; "
            "a torch.compile'd or eager module is not a file). Add an export_onnx step (or "
            "torchscript) at the end of the recipe and run it again."
        )
    if not detail.model_input_spec:
        raise UserError(f"run {detail.id[:12]} has no input spec recorded")
    spec = InputSpec.parse(detail.model_input_spec)
    return detail, art, spec


# The pass whose IR keeps the KV cache in its state: what OpenVINO GenAI's pipelines serve.
STATEFUL_PASS = "openvino_stateful"


def _run(repo: Any, run_id: str) -> Any:
    from studio.errors import UserError
    from studio.store import RunNotFound

    try:
        return repo.get_run(run_id)
    except RunNotFound as exc:
        raise UserError(str(exc)) from None


def _finished(repo: Any, run_id: str) -> Any:
    from studio.errors import UserError

    detail = _run(repo, run_id)
    if detail.run.status != "succeeded":
        raise UserError(
            f"run {detail.id[:12]} is {detail.run.status}: only a succeeded run can be deployed "
            "or serve-tested"
        )
    return detail


def is_generation_run(detail: Any) -> bool:
    """Whether the run's recipe benchmarks generation (``workload: generate``)."""
    from accel.generate.settings import is_generate

    return bool(detail.recipe) and is_generate(detail.recipe.get("benchmark") or {})


def generation_target(detail: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the stateful LM artifact of generation run ``detail``, the ``ServeLMTestJob`` fields
    it implies: compile options, prompt and new tokens); UserError saying why the run's final
    model cannot be served token by token and what to do."""
    from accel.generate.settings import GenerateSettings
    from accel.models.runtime import runtime_for_file
    from accel.passes import get_pass
    from studio.errors import UserError

    steps = sorted((s for s in detail.steps if s.index >= 0), key=lambda s: s.index)
    models = [(s, a) for s in steps for a in s.artifacts if a.kind == "model"]
    stateful = [s for s in steps if s.pass_name == STATEFUL_PASS]
    last = models[-1] if models else None
    runtime = runtime_for_file(last[1].path) if last else None
    if not stateful or runtime is None or "serve_lm" not in runtime.capabilities:
        final = steps[-1].pass_name if steps else "no step"
        raise UserError(
            f"run {detail.id[:12]} is a generation run, but its final model (after "
            f"{final}) is not a stateful OpenVINO LM, which is what the generation serve test "
            f"serves (OpenVINO GenAI's pipelines, with and without continuous batching). Add an "
            f"{STATEFUL_PASS} step at the end of the recipe (weight compression may follow it) "
            "and run it again."
        )
    step = stateful[-1]
    config = get_pass(STATEFUL_PASS).parse_config(step.params)
    ran = str(step.details.get("precision_ran") or "")
    bench = detail.recipe.get("benchmark") or {}
    settings = GenerateSettings.from_bench(bench)
    options = {
        "precision": ran if ran in ("f32", "bf16") else "f32",
        "precision_auto": config.precision == "auto",
        "kv_cache_precision": config.kv_cache_precision,
        "threads": bench.get("threads"),
    }
    art = {"kind": last[1].kind, "path": last[1].path, "step": last[0].index,
           "pass": last[0].pass_name}  # fmt: skip
    return art, {
        "model_path": last[1].path,
        "options": options,
        "prompt_tokens": settings.prompt_tokens,
        "new_tokens": settings.new_tokens,
    }


def lm_job(repo: Any, run_id: str, **fields: Any) -> tuple[Any, dict[str, Any]] | None:
    """(the ``serve_lm_test`` job of generation run ``run_id``, the artifact it serves), None
    for a run that does not generate; UserError where it cannot be served, JobParamsError for
    bad numbers. ``fields``: clients, requests, duration_s, port."""
    from accel.job_specs import ServeLMTestJob

    if not is_generation_run(_run(repo, run_id)):
        return None
    detail = _finished(repo, run_id)
    missing = pytriton_missing()
    if missing:
        from studio.errors import UserError

        raise UserError(missing)
    art, implied = generation_target(detail)
    given = {k: v for k, v in fields.items() if v is not None}
    job = ServeLMTestJob.from_params({**implied, **given, "run_id": detail.id})
    return job, art


def unavailable_reason(repo: Any, run_id: str | None) -> str | None:
    """None when run ``run_id`` can be serve-tested here; else the reason, saying what to do."""
    if not run_id:
        return "select one finished run"
    if repo is None:
        return "no database: the run cannot be looked up"
    missing = pytriton_missing()
    if missing:
        return missing
    try:
        detail = _finished(repo, run_id)
        if is_generation_run(detail):
            generation_target(detail)  # a stateful OpenVINO LM to serve, or why there is none
        else:
            servable_run(repo, run_id)
    except Exception as exc:  # noqa: BLE001 - UserError / store errors: their text is the reason
        return str(exc)
    return None


def generation_run(repo: Any, run_id: str | None) -> bool:
    """Whether ``run_id`` names a stored generation run (False when it cannot be looked up)."""
    if not run_id or repo is None:
        return False
    try:
        return is_generation_run(repo.get_run(run_id))
    except Exception:  # noqa: BLE001 - a missing run or a closed store: not one
        return False


def lm_summary(report: dict[str, Any]) -> str:
    """One line on a finished generation serve test: tokens/s and TTFT p99 with and without
    continuous batching at the most clients."""
    from accel.deploy.serve_lm import CB, NO_CB

    load = report.get("load") or []
    most = max((p["clients"] for p in load), default=0)
    on = next((p for p in load if p["clients"] == most and p["mode"] == CB), None)
    off = next((p for p in load if p["clients"] == most and p["mode"] == NO_CB), None)
    if not (on and off and off["tokens_per_s"]):
        return "Done."

    def ms(v: Any) -> str:
        return "-" if v is None or v != v else f"{v:.0f} ms"

    return (
        f"{most} client(s): {on['tokens_per_s']:.1f} tokens/s with continuous batching vs "
        f"{off['tokens_per_s']:.1f} without ({on['tokens_per_s'] / off['tokens_per_s']:.2f}x); "
        f"TTFT p99 {ms(on.get('ttft_p99_ms'))} vs {ms(off.get('ttft_p99_ms'))}."
    )


def deploy_unavailable_reason(repo: Any, run_id: str | None) -> str | None:
    """None when run ``run_id`` can be deployed to a Triton repository; else the reason (the
    same checks as ``studio deploy``, without the serve test's PyTriton)."""
    if not run_id:
        return "select one succeeded run in History or Runs"
    if repo is None:
        return "no database: the run cannot be looked up"
    try:
        servable_run(repo, run_id)
    except Exception as exc:  # noqa: BLE001 - CliError / store errors: their text is the reason
        return str(exc)
    return None


def parse_counts(text: str, what: str) -> list[int]:
    """``"1,4,16"`` -> [1, 4, 16]; ValueError saying what to type otherwise."""
    try:
        out = sorted({int(x) for x in text.replace(" ", "").split(",") if x})
    except ValueError:
        raise ValueError(f"{what} {text!r}: give whole numbers separated by commas") from None
    if not out or out[0] < 1:
        raise ValueError(f"{what} {text!r}: give numbers >= 1, e.g. 1,4,16")
    return out


def job_params(
    repo: Any,
    run_id: str,
    *,
    clients: list[int],
    batches: list[int] | None = None,
    duration_s: float = 5.0,
    max_requests: int = 2000,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the ``serve_test`` job's params (``accel.job_specs.ServeTestJob``), the artifact it
    serves) for run ``run_id``; UserError when the run cannot be served, JobParamsError for bad
    numbers."""
    from accel.job_specs import ServeTestJob

    detail, art, spec = servable_run(repo, run_id)
    job = ServeTestJob.from_params(
        {
            "artifact_kind": art["kind"],
            "artifact_path": art["path"],
            "input_spec": str(spec),
            "clients": list(clients),
            "batches": list(batches) if batches else None,
            "duration_s": duration_s,
            "max_requests": max_requests,
            "run_id": detail.id,
        }
    )
    return job.to_params(), art


def deploy_spec(repo: Any, run_id: str, out: str, **options: Any) -> tuple[Any, dict[str, Any]]:
    """(the ``deploy`` job spec for run ``run_id``'s model file, its artifact record);
    UserError when the run has no servable model file. ``options``: the spec's name, force,
    batches."""
    from accel.job_specs import DeployJob

    detail, art, spec = servable_run(repo, run_id)
    device = detail.run.device if detail.run.device.startswith("cuda") else "cpu"
    job = DeployJob(
        artifact_kind=art["kind"],
        artifact_path=art["path"],
        input_spec=str(spec),
        out=str(Path(out).resolve()),
        device=device,
        run_id=detail.id,
        **options,
    )
    return job, art


def store_result(repo: Any, run_id: str, report: dict[str, Any], art: dict[str, Any]) -> dict:
    """Keep a serve test with its run: the store (``add_serve_test``) and ``serve_test.json``
    in the run folder. Returns ``{"serve_test_id", "saved_to"?}``."""
    from studio.store.serve_tests import add_serve_test

    detail = repo.get_run(run_id)
    out: dict[str, Any] = {}
    if detail.run_dir and Path(detail.run_dir).is_dir():
        path = Path(detail.run_dir) / "serve_test.json"
        data = {**report, "run_id": detail.id, "artifact": art}
        path.write_text(json.dumps(data, indent=1, default=str))
        out["saved_to"] = str(path)
    out["serve_test_id"] = add_serve_test(repo, detail.id, report, art)
    return out
