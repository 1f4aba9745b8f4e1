"""The studio's use cases without Qt: one path for the CLI and the GUI.

A use case is a typed job spec (``accel.job_specs``) and the engine function that runs it,
declared together once (``accel.job_registry``, the declarations in ``accel.jobs``). The GUI
(``studio.controllers``) builds the spec here and sends its ``to_params()`` JSON to a worker,
which runs the declared job: that validates the JSON back into the spec and calls the
use-case function. The CLI commands build the same spec here and run it in a confined worker
(``run_boxed``) or in process (``run_in_process``, after the same JSON round trip); both
give back the declared typed result. What happens with a result afterwards (a profile stored in the experiment
store) is defined here once too, and so is ``Session``: what the person allowed in the
studio (files to unpickle, code to run) and the specs that follow from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import accel.jobs  # noqa: F401 - declares the engine's jobs
from accel.job_registry import declaration_for
from accel.job_specs import JobParams, ModelJob, RunRecipeJob

if TYPE_CHECKING:
    from studio.store.api import ProfileStore
    from studio.store.records import ProfileRecord

Spec = TypeVar("Spec", bound=ModelJob)


def model_job(
    cls: type[Spec],
    source: str,
    input_spec: str | None = None,
    *,
    trust_pickle: bool = False,
    **fields: Any,
) -> Spec:
    """The spec of a job on one model; None-valued fields keep their defaults. Bad values
    raise ``accel.job_specs.JobParamsError`` (an AccelError) saying what to change."""
    model = {"source": source, "input_spec": input_spec or None, "trust_pickle": trust_pickle}
    return cls.from_params({"model": model, **{k: v for k, v in fields.items() if v is not None}})


def run_in_process(
    spec: JobParams,
    emit: Callable[[dict[str, Any]], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> Any:
    """Run ``spec``'s use case here (the CLI): the spec goes through the same JSON a worker
    receives, then the same function the worker's job calls. Returns its typed result
    (its declaration's: ``accel.job_results.ProfileResult``, ``AnalyzeResult``, ...)."""
    same = type(spec).from_params(spec.to_params())
    use_case = declaration_for(same).use_case
    if use_case is None:
        raise TypeError(f"no in-process use case for {type(spec).__name__}")
    return use_case(same, emit or (lambda event: None), cancel or (lambda: False))


def run_boxed(spec: JobParams, emit: Callable[[dict[str, Any]], None] | None = None) -> Any:
    """Run ``spec``'s use case in a worker process (confined to the job's folders, under the
    worker memory cap) and return its typed result, rebuilt from the JSON the worker sent:
    the command's own process never loads the model. A failed job raises its error again
    (``accel.errors`` class by name, else AccelError); Ctrl-C cancels the worker."""
    from accel import errors
    from studio.workers import WorkerPool

    decl = declaration_for(spec)
    device = str(getattr(spec, "device", None) or "cpu")
    with WorkerPool(None, cpu_workers=1, devices=[] if device == "cpu" else None) as pool:
        if emit is not None:
            pool.subscribe(lambda u: emit(dict(u.data)) if u.what == "event" else None)
        outcome = pool.submit(decl.kind, spec.to_params(), device=device).wait()
    if outcome.status != "succeeded":
        cls = getattr(errors, outcome.error_type, None)
        if not (isinstance(cls, type) and issubclass(cls, errors.AccelError)):
            cls = errors.AccelError
        message = outcome.error or f"the worker ended as {outcome.status}"
        try:
            error = cls(message)
        except TypeError:  # a class with more arguments: keep the message
            error = errors.AccelError(message)
        raise error
    return decl.typed_result(outcome.result)


def typed_event(event: Any) -> Any:
    """A job's event dict as its ``accel.events`` object (``Progress``, ``Log``, runner
    events), or None for a kind that module does not define (a plugin's own events).
    An event that is already typed is returned as it is."""
    from accel.events import Event, event_from_dict

    if isinstance(event, Event):
        return event
    try:
        return event_from_dict(dict(event))
    except (ValueError, TypeError):
        return None


def profile_rows(prof: Any) -> list[dict[str, Any]]:
    """A ModelProfile's layer rows as the store keeps them."""
    return [
        {
            "name": r.name,
            "op_type": r.type,
            "time_ms": r.self_ms,
            "percent": 100.0 * r.share,
            "flops": r.flops,
            "params": r.params,
            "memory_bytes": r.output_bytes,
            "inclusive_ms": r.inclusive_ms,
        }
        for r in prof.rows
    ]


def store_profile(repo: ProfileStore, result: Any) -> ProfileRecord:
    """Store a profile use case's result (``accel.job_results.ProfileResult`` with a per-layer
    profile) through ``repo.record_profile``; the same for the GUI and ``studio profile
    --store``. Returns the store's ProfileRecord."""
    prof = result.profile
    if prof is None:
        raise ValueError("nothing to store: the profile job ran without its per-layer profile")
    model: Mapping[str, Any] = result.model
    summary: dict[str, Any] = {"total_ms": prof.total_ms, "total_flops": prof.total_flops}
    if getattr(prof, "generation", None) is not None:  # a decoder profiled generating
        summary["generation"] = prof.generation.to_dict()  # GenerationLayers.from_dict reads it
    if result.benchmark is not None:
        b = result.benchmark
        summary["benchmark"] = {
            "p50_ms": b.p50_ms,
            "p90_ms": b.p90_ms,
            "throughput": b.throughput,
            "iters": b.iters,
        }
    return repo.record_profile(
        profile_rows(prof),
        model_source=model.get("source"),
        model_kind=model.get("kind", prof.kind),
        model_hash=model.get("content_hash", ""),
        input_spec=model.get("input_spec") or "",
        device=prof.device,
        summary=summary,
    )


class UnconfirmedCode(Exception):
    """A recipe names code (a factory, data or metric function) the person did not confirm."""

    def __init__(self, refs: list[str]) -> None:
        super().__init__(
            "not run: the recipe names code to import and call "
            f"({', '.join(refs)}), which was not confirmed"
        )
        self.refs = refs


class Session:
    """What the person allowed in this studio session, and the job specs that follow (no Qt).

    ``trusted``: model sources they allowed to unpickle (the Open dialog's choice);
    ``named_code``: code references (``pkg.mod:factory``, ``file.py:fn``) they named by
    opening them as the model or confirmed for a recipe. A recipe's own ``trust_pickle``
    grants nothing."""

    def __init__(self) -> None:
        self.trusted: set[str] = set()
        self.named_code: set[str] = set()

    def opened(self, source: str, *, trust_pickle: bool = False) -> None:
        """The person opened ``source``: its code is theirs to run; unpickled if they said so."""
        self.named_code.add(source)
        if trust_pickle:
            self.trusted.add(source)

    def model_spec(
        self, cls: type[Spec], source: str, input_spec: str | None = None, **fields: Any
    ) -> Spec:
        """``model_job`` with this session's unpickling choice for ``source``."""
        return model_job(cls, source, input_spec, trust_pickle=source in self.trusted, **fields)

    def unconfirmed_code(self, recipe: Mapping[str, Any]) -> list[str]:
        """The recipe's code references not named or confirmed yet (ask before running)."""
        from accel.trust import recipe_code_refs

        return [r for r in recipe_code_refs(recipe) if r not in self.named_code]

    def confirm(self, refs: list[str]) -> None:
        self.named_code.update(refs)

    def run_spec(
        self, recipe: Mapping[str, Any], *, out: str, source: str | None = None
    ) -> RunRecipeJob:
        """The run job for ``recipe`` (its model ``source``, default the recipe's): code it
        names may run (all of it confirmed, else ``UnconfirmedCode``); unpickling only if the
        person allowed it for that source."""
        from accel.trust import recipe_code_refs

        unconfirmed = self.unconfirmed_code(recipe)
        if unconfirmed:
            raise UnconfirmedCode(unconfirmed)
        source = source or (recipe.get("model") or {}).get("source")
        params: dict[str, Any] = {"recipe": dict(recipe), "out": out}
        params["trust_recipe_code"] = bool(recipe_code_refs(recipe))
        params["trust_pickle"] = bool(source) and source in self.trusted
        return RunRecipeJob.from_params(params)
