"""The pre-flight plan of a recipe: which model form each step receives and produces, and
why a step cannot run where it is, found without loading the model.

``plan(recipe)`` reads the recipe (names and params checked by accel.recipe), takes the
model's form from its source (accel.models.forms.source_form) and walks the enabled steps
with each pass's declared ``Requirements.accepts`` / ``produces``, its device and library
needs. The runner calls it before any work (an impossible order fails the run at once),
``studio run --dry-run`` prints it, the search asks ``passes_after(form)`` which passes can
follow a model of some form, and the GUI's recipe editor asks ``step_problems`` (each step's
problem, never raising) and ``palette`` (which pass can be added where, or why not).

Given the loaded torch model's layers (``layers``: (module name, type name) pairs), the plan
also checks the passes' declared layer lists (``Requirements.layer_lists``: exclude, keep,
ignore) of the steps that receive the model's original layer names: a pattern that selects
no layer (a typo) is that step's problem, with the close names."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from accel.errors import RecipeError
from accel.models.forms import EAGER, default_form, describe, kind_of, source_form
from accel.recipe import Recipe, load_recipe


@dataclass(frozen=True)
class PlannedStep:
    index: int  # position in recipe.steps (disabled steps are skipped, not renumbered)
    pass_name: str
    label: str
    receives: str | None  # model form (None: unknown until the model is loaded)
    produces: str | None
    problem: str | None = None  # why the step cannot run here; None: it can

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class Plan:
    recipe: str  # the recipe's name
    model_source: str
    device: str
    start_form: str | None
    steps: tuple[PlannedStep, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps)

    @property
    def errors(self) -> list[str]:
        return [f"step {s.index + 1} ({s.label}): {s.problem}" for s in self.steps if s.problem]

    @property
    def final_form(self) -> str | None:
        return self.steps[-1].produces if self.steps else self.start_form

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"], d["errors"], d["final_form"] = self.ok, self.errors, self.final_form
        return d

    def lines(self) -> list[str]:
        """The plan as text, one line per step (for the CLI)."""
        start = describe(self.start_form) if self.start_form else "a model of unknown form"
        out = [f"{self.model_source} ({start}) on {self.device}"]
        for s in self.steps:
            arrow = f"{s.receives or '?'} -> {s.produces or '?'}"
            mark = "ok" if s.ok else f"CANNOT RUN: {s.problem}"
            out.append(f"  {s.index + 1}. {s.label:<24} {arrow:<24} {mark}")
        out += [f"  warning: {w}" for w in self.warnings]
        return out


class PlanError(RecipeError):
    """A recipe whose steps cannot run in their order; ``plan`` holds every reason."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        super().__init__("; ".join(plan.errors))


def plan(
    recipe: Recipe | str | Path | Mapping[str, Any],
    *,
    start_form: str | None = None,
    device: str | None = None,
    layers: Sequence[tuple[str, str]] | None = None,
) -> Plan:
    """The plan of ``recipe`` (never loads the model). ``start_form``: the model's form when
    the caller knows it (a loaded model: accel.models.forms.model_form), else read from the
    source; ``device`` overrides the recipe's; ``layers``: the loaded torch model's
    (module name, type name) pairs (accel.layer_patterns.module_layers), to check the steps'
    layer patterns (``layer_problems``); without them, a warning says they are checked when
    the model loads. Order problems are in the Plan (``ok``, ``errors``); an unreadable
    recipe raises RecipeError."""
    from accel.passes import get_pass

    recipe = load_recipe(recipe)
    device = device or recipe.device
    form = start = start_form or source_form(recipe.model.source)
    bad_layers = layer_problems(recipe.steps, start, layers) if layers is not None else {}
    steps: list[PlannedStep] = []
    for index, step in recipe.enabled_steps():
        cls = get_pass(step.pass_name)
        problem = step_problem(cls, form, device) or bad_layers.get(index)
        produces = cls.produced_form(form) if form is not None else _known_output(cls)
        steps.append(PlannedStep(index, step.pass_name, step.label, form, produces, problem))
        form = produces
    from accel.recipe_checks import step_warnings

    warnings = [
        f"step {i + 1}: {w}" for i, w in sorted(step_warnings(recipe.steps, device).items())
    ]
    if not steps:
        warnings.append("the recipe has no enabled steps")
    lists = checkable_lists(recipe.steps, start) if layers is None else []
    checked = [f"step {i + 1} {', '.join(params)}" for i, _, params in lists if params]
    if checked:
        warnings.append(
            f"layer patterns ({'; '.join(checked)}) are checked against the model's layers "
            "when it loads"
        )
    if start is None:
        warnings.append(
            "the model's form cannot be told from its source; the first step is checked "
            "against it when the model loads"
        )
    return Plan(recipe.name, recipe.model.source, device, start, tuple(steps), tuple(warnings))


def check(recipe: Recipe | str | Path | Mapping[str, Any], **kwargs: Any) -> Plan:
    """``plan(recipe)``, raising PlanError when a step cannot run where it is."""
    p = plan(recipe, **kwargs)
    if not p.ok:
        raise PlanError(p)
    return p


def step_problem(cls: Any, form: str | None, device: str) -> str | None:
    """Why pass class ``cls`` cannot run on a model of ``form`` on ``device`` (None: it can).
    ``form`` None (unknown) checks only the device and the libraries."""
    req = cls.requires
    if form is not None and kind_of(form) not in req.model_kinds:
        kinds = " or ".join(req.model_kinds)
        from accel.models.runtime import reach_hint

        hint = reach_hint(req.model_kinds, kind_of(form))
        a = "an" if kinds[0] in "aeiou" else "a"
        return f"{cls.name} needs {a} {kinds} model, but the model is {kind_of(form)} here.{hint}"
    if form is not None:
        problem = cls.form_problem(form)
        if problem:
            return problem
    if req.cuda and not str(device).startswith("cuda"):
        return f"{cls.name} needs a CUDA GPU; set the recipe's device to cuda:0."
    missing = [lib for lib in req.libraries if not _installed(lib)]
    if missing:
        return f"{cls.name} needs {', '.join(missing)}, which is not installed here."
    return None


def forms_along(steps: Any, start_form: str | None) -> list[str | None]:
    """The form each of ``steps`` (accel.recipe.Step, disabled ones included) receives, and
    last the form after them; no validation (an unknown pass leaves the form as it was)."""
    from accel.errors import PassError
    from accel.passes import get_pass

    forms, form = [], start_form
    for step in steps:
        forms.append(form)
        if not step.enabled:
            continue
        try:
            cls = get_pass(step.pass_name)
        except PassError:
            continue
        form = cls.produced_form(form) if form is not None else _known_output(cls)
    forms.append(form)
    return forms


def checkable_lists(
    steps: Any, start_form: str | None
) -> list[tuple[int, Any, dict[str, list[str]]]]:
    """(index, pass class, {param: patterns}) of the enabled ``steps`` whose layer lists
    (``Requirements.layer_lists``, non-empty ones) select from the original torch model's
    layers: the steps from a plain (eager) torch start up to the first step that changes the
    model's form or its layer names (``Requirements.keeps_layer_names`` false: quantizers
    swap modules, compile and exports wrap or rename them). Later steps' patterns may name
    what those steps made (or ONNX ops): the passes check them when they run."""
    from accel.errors import PassError
    from accel.passes import get_pass

    out: list[tuple[int, Any, dict[str, list[str]]]] = []
    if start_form != EAGER:
        return out
    for index, step in enumerate(steps):
        if not step.enabled:
            continue
        try:
            cls = get_pass(step.pass_name)
        except PassError:
            break
        req = cls.requires
        if cls.form_problem(EAGER) is not None:
            break  # a step that cannot take the model: its own problem, names unknown after
        lists = {
            param: [str(p) for p in patterns]
            for param in req.layer_lists
            if isinstance(patterns := step.params.get(param), list) and patterns
        }
        out.append((index, cls, lists))
        if not req.keeps_layer_names or cls.produced_form(EAGER) != EAGER:
            break
    return out


def layer_problems(
    steps: Any, start_form: str | None, layers: Sequence[tuple[str, str]]
) -> dict[int, str]:
    """Index (in ``steps``) -> why its layer patterns select nothing in ``layers`` (the
    loaded torch model's (module name, type name) pairs), for the steps ``checkable_lists``
    names; a pattern is fine when it selects any layer by name, prefix, glob or type name
    (accel.layer_patterns). The text is the passes' own (close names, what names look like)."""
    from accel.layer_patterns import match, unmatched_message

    layers = [(n, t) for n, t in layers if n]
    names = [n for n, _ in layers]
    out: dict[int, str] = {}
    for index, cls, lists in checkable_lists(steps, start_form):
        found = []
        for param, patterns in lists.items():
            _, unmatched = match(layers, patterns)
            if unmatched:
                found.append(unmatched_message(unmatched, names, f"{param} pattern(s)"))
        if found:
            out[index] = f"{cls.name}: " + " ".join(found)
    return out


def passes_after(form: str | None, device: str = "cpu") -> list[tuple[str, str | None]]:
    """Every listed pass as (name, why it cannot follow a model of ``form`` on ``device``
    or None when it can), sorted like ``accel.passes.list_passes``. For the GUI palette and
    the search: no pass names needed by the caller."""
    from accel.passes import list_passes

    return [(cls.name, step_problem(cls, form, device)) for cls in list_passes()]


def start_form(source: str, kind: str | None = None) -> str:
    """The form a model starts in for an editor: read from its ``source``, else the default
    form of ``kind`` (the loaded model's kind; None: torch, what the studio opens by
    default)."""
    form = source_form(source)
    return form if form is not None else default_form(kind or "torch")


def step_problems(
    steps: Any,
    start_form: str | None,
    device: str,
    layers: Sequence[tuple[str, str]] | None = None,
) -> list[str | None]:
    """Why each of ``steps`` (accel.recipe.Step, disabled ones included) cannot run where it
    is on ``device`` (None: it can), never raising: an unknown pass or invalid parameters is
    that step's problem, and with ``layers`` (the model's (module name, type name) pairs)
    layer patterns that select nothing (``layer_problems``). For editors that show every
    step's problem at once (the GUI's step list); ``plan`` is the same check for a whole,
    valid recipe."""
    from accel.errors import PassError
    from accel.passes import get_pass

    bad_layers = layer_problems(steps, start_form, layers) if layers is not None else {}
    out: list[str | None] = []
    for i, (step, form) in enumerate(zip(steps, forms_along(steps, start_form), strict=False)):
        try:
            cls = get_pass(step.pass_name)
        except PassError:
            out.append(f"unknown pass {step.pass_name!r}")
            continue
        problem = step_problem(cls, form, device)
        if problem is None:
            try:
                cls.parse_config(step.params)
            except Exception as exc:  # noqa: BLE001 - the validation message is the problem
                problem = f"invalid parameters: {_first_error(exc)}"
        out.append(problem or bad_layers.get(i))
    return out


@dataclass(frozen=True)
class Placement:
    """Where a new step of ``pass_name`` can go in a recipe."""

    pass_name: str
    index: int | None  # insert before this step; None: append (or nowhere, see problem)
    problem: str | None  # why it can go nowhere: it cannot follow the last step's form

    @property
    def ok(self) -> bool:
        return self.problem is None


def placement(steps: Any, pass_name: str, start_form: str | None, device: str) -> Placement:
    """Where a new ``pass_name`` step goes in ``steps``: at the end when it can follow the
    last form; else before the latest step where it can run and the steps after it still
    can (a torch pass clicked after an ONNX export goes before the export); else nowhere,
    with the reason it cannot follow the last form (``step_problem``)."""
    from accel.passes import get_pass
    from accel.recipe import Step

    cls = get_pass(pass_name)
    forms = forms_along(steps, start_form)
    at_end = step_problem(cls, forms[-1], device)
    if at_end is None:
        return Placement(pass_name, None, None)
    before = step_problems(steps, start_form, device)
    new = Step.model_validate({"pass": pass_name})
    for i in range(len(steps) - 1, -1, -1):
        if step_problem(cls, forms[i], device) is not None:
            continue
        after = step_problems([*steps[:i], new, *steps[i:]], start_form, device)[i + 1 :]
        if all(now is None or was is not None for now, was in zip(after, before[i:])):
            return Placement(pass_name, i, None)
    return Placement(pass_name, None, at_end)


def palette(steps: Any, start_form: str | None, device: str) -> list[Placement]:
    """``placement`` of every listed pass (sorted like ``accel.passes.list_passes``): what
    the GUI's pass palette enables, where a click inserts, and why a pass is disabled."""
    from accel.passes import list_passes

    return [placement(steps, cls.name, start_form, device) for cls in list_passes()]


def _first_error(exc: Exception) -> str:
    """'ratio: Input should be less than 1' from a pydantic ValidationError, else the
    exception's first line."""
    errors = getattr(exc, "errors", None)
    try:
        first = errors()[0] if callable(errors) else None
    except Exception:  # noqa: BLE001 - not a pydantic error after all
        first = None
    if first:
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"{where}: {first.get('msg', '')}" if where else str(first.get("msg", ""))
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _known_output(cls: Any) -> str | None:
    """The form a pass produces whatever it receives (exports), else None (unknown)."""
    return cls.requires.produces or cls.output_kind


@functools.lru_cache(maxsize=64)
def _installed(lib: str) -> bool:
    from accel.models.runtime import library_problem

    return library_problem(lib) is None
