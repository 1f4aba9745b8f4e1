"""Job declarations: every job kind is declared once, here in one record.

A ``JobDeclaration`` says everything the rest of the studio needs to know about a job kind:
its ``kind`` (the worker protocol's name), its typed parameters (``params``, a
``accel.job_specs.JobParams`` class), its use case (``use_case(spec, emit, cancel) -> typed
result``), the worker's entry (``run(params JSON, emit, cancel) -> JSON``, made from the use
case), how its JSON result becomes the typed result again (``result``), whether a warm worker
may serve it, whether the pool records it as a run, and what its box reads and writes
(``folders``). The worker entry, the pool, the job box, the CLI (``studio.usecases``) and the
GUI's controllers look a job up here (``declaration(kind)``, ``declaration_for(spec)``);
nothing else compares job-kind strings.

Engine jobs are declared in ``accel.jobs`` with ``@declare_job(SpecClass, ...)`` on their
use-case function; test and plugin jobs with ``register_job(kind, fn)``, which keeps the
rest of a declaration when it replaces a declared kind's runner (a test's fake serve test
keeps the real one's box).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel.job_specs import JobParams

Emit = Callable[[dict[str, Any]], None]
CancelCheck = Callable[[], bool]
Job = Callable[[dict[str, Any], Emit, CancelCheck], dict[str, Any]]
UseCase = Callable[[Any, Emit, CancelCheck], Any]


@dataclass(frozen=True)
class JobFolders:
    """What a job's box may read and write, named by the parameters that hold the paths.

    ``reads``: a file (its folder) or folder the job reads; ``writes``: folders it writes
    (made before the box closes); ``writes_beside``: files it writes, whose folder it may
    fill (an ONNX export's external data); ``touches``: single files it writes (created
    before the box, so the box names the file, not its folder); ``recipe``: it runs a recipe
    (reads what the recipe names, writes its run folder ``out`` and any ``cache.dir``);
    ``network``: it serves on loopback ports (a serve test)."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    writes_beside: tuple[str, ...] = ()
    touches: tuple[str, ...] = ()
    recipe: bool = False
    network: bool = False


# A job nobody declared (a plugin's): it may write its own run folder, nothing else.
PLUGIN_FOLDERS = JobFolders(writes=("run_dir",))


def to_json(obj: Any) -> dict[str, Any]:
    """A use case's typed result as the JSON dict the worker protocol carries."""
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return {"value": repr(obj)}


@dataclass(frozen=True)
class JobDeclaration:
    """One job kind (see the module docstring)."""

    kind: str
    run: Job
    params: type[JobParams] | None = None
    use_case: UseCase | None = None
    result: Callable[[Mapping[str, Any]], Any] | None = None
    warm: bool = False
    records_run: bool = False
    folders: JobFolders = field(default_factory=lambda: PLUGIN_FOLDERS)

    def typed_result(self, result: Mapping[str, Any]) -> Any:
        """The worker's JSON result as the use case's typed result (the JSON as it is when
        the kind has no result type)."""
        return self.result(result) if self.result is not None else dict(result)


_DECLARED: dict[str, JobDeclaration] = {}


def declare_job(
    params: type[JobParams],
    *,
    result: Callable[[Mapping[str, Any]], Any] | None = None,
    warm: bool = False,
    records_run: bool = False,
    folders: JobFolders | None = None,
) -> Callable[[UseCase], UseCase]:
    """Declare the job of spec class ``params`` (its ``kind``) with the decorated use case
    ``fn(spec, emit, cancel) -> typed result``; the worker's runner validates the JSON
    params into the spec and sends the result's JSON back."""

    def decorate(fn: UseCase) -> UseCase:
        kind = params.kind

        def run(raw: dict[str, Any], emit: Emit, cancel: CancelCheck) -> dict[str, Any]:
            # The use case is read from the declaration at call time (a test may wrap it).
            use_case = _DECLARED[kind].use_case or fn
            return to_json(use_case(params.from_params(raw), emit, cancel))

        run.__name__ = f"{params.kind}_job"
        run.__doc__ = f"The worker's entry of the {params.kind!r} job (``{fn.__name__}``)."
        _add(
            JobDeclaration(
                kind=params.kind,
                run=run,
                params=params,
                use_case=fn,
                result=result,
                warm=warm,
                records_run=records_run,
                folders=folders or JobFolders(),
            )
        )
        return fn

    return decorate


def declare_runner(
    kind: str,
    fn: Job,
    *,
    warm: bool = False,
    records_run: bool = False,
    folders: JobFolders | None = None,
) -> JobDeclaration:
    """Declare a job whose runner validates its own JSON parameters (a search trial);
    returns the declaration (callers submit ``its.kind``)."""
    decl = JobDeclaration(
        kind=kind, run=fn, warm=warm, records_run=records_run, folders=folders or JobFolders()
    )
    _add(decl)
    return decl


def register_job(name: str, fn: Job, *, folders: JobFolders | None = None) -> Job:
    """Declare a job by its runner alone (plugins, tests, jobs that validate their own
    JSON). Replacing a declared kind's runner keeps the rest of its declaration; returns
    ``fn``."""
    old = _DECLARED.get(name)
    if old is not None:
        changes: dict[str, Any] = {"run": fn, "use_case": None}
        if folders is not None:
            changes["folders"] = folders
        _add(dataclasses.replace(old, **changes))
    else:
        _add(JobDeclaration(kind=name, run=fn, folders=folders or PLUGIN_FOLDERS))
    return fn


def _add(decl: JobDeclaration) -> None:
    _DECLARED[decl.kind] = decl


def declaration(kind: str) -> JobDeclaration:
    """The declaration of job ``kind``; KeyError naming the known kinds."""
    try:
        return _DECLARED[kind]
    except KeyError:
        raise KeyError(f"unknown job kind {kind!r}; known: {sorted(_DECLARED)}") from None


def find_declaration(kind: str) -> JobDeclaration | None:
    """The declaration of ``kind``, or None (a plugin job declared only in its worker)."""
    return _DECLARED.get(kind)


def declaration_for(spec: JobParams) -> JobDeclaration:
    """The declaration of the job whose parameters ``spec`` is."""
    return declaration(type(spec).kind)


def declared() -> dict[str, JobDeclaration]:
    """Every declared job, by kind (a copy)."""
    return dict(_DECLARED)


class _Runners(Mapping[str, Job]):
    """``JOBS``: the declared jobs' runners by kind, read live from the declarations."""

    def __getitem__(self, kind: str) -> Job:
        return _DECLARED[kind].run

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(dict(_DECLARED))

    def __len__(self) -> int:
        return len(_DECLARED)


JOBS: Mapping[str, Job] = _Runners()
