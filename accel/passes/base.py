"""The pass contract and the pass registry.

A pass is a class with a frozen pydantic ``Config`` (``extra="forbid"``, every
field described, so the GUI builds its form from the JSON schema), a ``name``,
a ``summary``, a ``category``, its ``requires`` (model kinds, CUDA, libraries),
``apply(model, config, ctx) -> LoadedModel`` and ``to_script(config) ->
ScriptStep`` (its own step as plain Python for script export).

Pass modules live in ``accel/passes/`` and are found by scanning the package,
so adding a pass means adding a module. Pass modules import only pydantic and
this file at module level; heavy libraries (torchao, onnxruntime,
torch_pruning, even torch) are imported inside ``apply`` so listing passes is
cheap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from accel.errors import Cancelled, PassError
from accel.jsonable import jsonable
from accel.models.forms import describe, forms_of, made_by, model_form

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)

CATEGORIES = ("precision", "layout", "compile", "quantize", "prune", "export", "runtime", "test")

# Roles of a pass's layer lists (Requirements.layer_lists): what the listed layers get.
KEEP_FLOAT = "keep_float"  # they stay in float32 (quantizers' exclude, fp16/bf16 keep)
SKIP = "skip"  # the pass leaves them alone (prune's ignore: left unpruned)
LAYER_ROLES = (KEEP_FLOAT, SKIP)


class PassConfig(BaseModel):
    """Base of every pass config: frozen, unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class Requirements:
    """What a pass needs. ``accepts``: the model forms it takes (accel.models.forms; empty:
    every form of ``model_kinds``); ``produces``: the form it returns (None: the form it
    received, or the pass's ``output_kind``). accel.plan checks step orders with them.
    ``layer_lists``: its parameters that are layer lists (accel.layer_patterns) -> their role
    (KEEP_FLOAT or SKIP), so the plan checks their patterns against the model's layers and
    recipe edits ("keep in float") find them without guessing from field names.
    ``keeps_layer_names``: the torch module it returns names its layers as the one it got,
    types unchanged (layers may go: fold_batchnorm), so later steps' patterns can be checked
    against the original model's layers."""

    model_kinds: tuple[str, ...] = ("torch",)
    cuda: bool = False
    libraries: tuple[str, ...] = ()
    note: str = ""
    accepts: tuple[str, ...] = ()
    produces: str | None = None
    layer_lists: dict[str, str] = field(default_factory=dict, hash=False)
    keeps_layer_names: bool = False

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.layer_lists.items() if v not in LAYER_ROLES}
        if bad:
            raise ValueError(f"layer_lists roles {bad} not in {LAYER_ROLES}")

    def lists_of(self, role: str) -> list[str]:
        """The names of the layer-list parameters of ``role``."""
        return [name for name, r in self.layer_lists.items() if r == role]

    def accepted_forms(self) -> tuple[str, ...]:
        return self.accepts or forms_of(self.model_kinds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_kinds": list(self.model_kinds),
            "cuda": self.cuda,
            "libraries": list(self.libraries),
            "note": self.note,
            "accepts": list(self.accepted_forms()),
            "produces": self.produces,
            "layer_lists": dict(self.layer_lists),
            "keeps_layer_names": self.keeps_layer_names,
        }


@dataclass(frozen=True)
class Choice:
    """A search domain: one of ``values`` (JSON values: str, int, float, bool, None)."""

    values: tuple[Any, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"type": "choice", "values": list(self.values)}


@dataclass(frozen=True)
class IntRange:
    """A search domain: an integer in [low, high] (``log``: sampled on a log scale)."""

    low: int
    high: int
    log: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"type": "int", "low": self.low, "high": self.high, "log": self.log}


@dataclass(frozen=True)
class FloatRange:
    """A search domain: a float in [low, high] (``log``: sampled on a log scale)."""

    low: float
    high: float
    log: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"type": "float", "low": self.low, "high": self.high, "log": self.log}


Domain = Choice | IntRange | FloatRange


@dataclass(frozen=True)
class SearchSpec:
    """What the recipe search (accel.search) may do with a pass.

    ``stage`` orders a chain (steps appear in increasing stage, at most one pass per stage,
    so passes of one stage are alternatives); ``params`` are the parameters worth tuning with
    their domains, ``fixed`` parameters set in every trial (e.g. no slow diagnostics);
    ``devices`` where the pass is worth trying; ``opt_in`` names what the user must allow
    (``--allow prune``) because the pass changes the weights beyond rounding; ``when`` limits
    it to models that have a layer type (``conv2d``, ``batchnorm``, ``linear``, ``lstm``,
    ``attention``, or ``linear_heavy``: Linear layers hold more weights than convolutions);
    ``exportable``: whether a later pass may move the model to another runtime; ``after``:
    passes one of which must come earlier in the chain. A pass that refuses what an earlier
    one makes says so with model forms (``Requirements.accepts``), which the plan, the dry
    run and the search's chain check all read."""

    stage: int
    params: dict[str, Domain] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)
    devices: tuple[str, ...] = ("cpu", "cuda")
    opt_in: str = ""
    when: tuple[str, ...] = ()
    # False: a chain does not export the model this pass made to another runtime (int8
    # torch modules and bf16 weights do not export, or export to ops the runtime lacks).
    exportable: bool = True
    # Only in chains where one of these passes comes earlier (distill after a pruning step).
    after: tuple[str, ...] = ()
    # Fixed values that replace ``fixed``'s on models with a layer type (``when``'s names),
    # e.g. no channel rounding where attention heads are pruned.
    fixed_for_layers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fixed_for(self, layer_types: Any) -> dict[str, Any]:
        """``fixed`` for a model with these layer types (None: assume none of them)."""
        out = dict(self.fixed)
        for layer, values in self.fixed_for_layers.items():
            if layer in (layer_types or ()):
                out.update(values)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "after": list(self.after),
            "stage": self.stage,
            "params": {k: d.to_dict() for k, d in self.params.items()},
            "fixed": dict(self.fixed),
            "fixed_for_layers": {k: dict(v) for k, v in self.fixed_for_layers.items()},
            "devices": list(self.devices),
            "opt_in": self.opt_in,
            "when": list(self.when),
            "exportable": self.exportable,
        }


# Search stages (SearchSpec.stage): a chain goes through them in this order.
STAGE_PRUNE = 10  # weights removed (opt-in)
STAGE_RECOVER = 15  # accuracy recovered after pruning (distillation, opt-in)
STAGE_FOLD = 20  # exact graph rewrites on the torch model
STAGE_LAYOUT = 30  # memory format
STAGE_NUMERIC = 40  # torch precision / quantization (alternatives)
STAGE_LOWER = 50  # compile, or leave torch: export to another runtime
STAGE_RUNTIME_NUMERIC = 60  # precision / quantization in the exported model's runtime
STAGE_SESSION = 70  # runtime session settings (threads, optimization level)


@dataclass
class ScriptStep:
    """A pass's step as plain Python for the exported script.

    ``code`` is a block of statements run at module level of the script. It reads and
    rebinds the script's variables: ``model`` (torch module, when ``kind == "torch"``),
    ``onnx_path`` and ``session`` (when ``kind == "onnx"``), ``kind``, ``inputs`` (dict
    name -> tensor, the reference inputs), ``input_casts`` (dict name -> torch dtype
    applied to floating inputs), ``device``, ``step_dir`` (Path of this step's output
    folder, created), ``calibration_batches()`` (iterable of input dicts) and
    ``make_session(path)`` (ORT session with the script's providers).
    ``imports`` are import lines; ``helpers`` are top-level function definitions
    (deduplicated by text across steps).
    """

    code: str
    imports: list[str] = field(default_factory=list)
    helpers: list[str] = field(default_factory=list)


@dataclass
class PassContext:
    """What a pass gets besides the model and its config."""

    inputs: dict[str, Any]
    device: str = "cpu"
    work_dir: Path = Path(".")
    step_index: int = 0
    seed: int = 0
    progress_cb: Callable[[float, str], None] | None = None
    cancel_cb: Callable[[], bool] | None = None
    # Data sources (accel.data.DataSource or None): calibration batches, labelled training
    # data (QAT, fine-tuning), evaluation data. The runner builds them from the recipe.
    calibration: Any = None
    train_data: Any = None
    eval_data: Any = None
    original: LoadedModel | None = None
    recipe: Any = None
    details: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float | None] = field(default_factory=dict)
    artifacts: list[dict[str, Any]] = field(default_factory=list)

    def progress(self, fraction: float, message: str = "") -> None:
        if self.progress_cb is not None:
            self.progress_cb(max(0.0, min(1.0, float(fraction))), message)

    def check_cancelled(self) -> None:
        if self.cancel_cb is not None and self.cancel_cb():
            raise Cancelled("cancelled by the user")

    def add_artifact(self, path: str | Path, kind: str) -> None:
        self.artifacts.append({"kind": kind, "path": str(path)})

    def warn(self, message: str) -> None:
        log.warning(message)
        self.details.setdefault("warnings", []).append(message)

    def calibration_batches(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Calibration input dicts: the recipe's data source, else synthetic from the spec."""
        if self.calibration is not None:
            batches = []
            for i, b in enumerate(self.calibration.batches()):
                if limit is not None and i >= limit:
                    break
                batches.append(b.inputs if hasattr(b, "inputs") else b)
            return batches
        if self.original is None:
            return [self.inputs]
        n = limit or 8
        return [self.original.input_spec.sample(seed=1000 + i) for i in range(n)]


def recipe_threads(ctx: PassContext) -> int | None:
    """The recipe's benchmark thread count: ORT sessions use it too, so eager and ORT
    are timed with the same number of threads."""
    bench = getattr(ctx.recipe, "benchmark", None)
    return getattr(bench, "threads", None)


class Pass:
    """Base class of all passes (see module docstring)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    category: ClassVar[str] = ""
    Config: ClassVar[type[PassConfig]] = PassConfig
    requires: ClassVar[Requirements] = Requirements()
    # Kind of the model the pass produces; None means the same kind it received.
    output_kind: ClassVar[str | None] = None
    # How the recipe search may use the pass; None: never part of a searched chain.
    search: ClassVar[SearchSpec | None] = None
    # A pass with an output_kind whose model still decodes through a KV cache (a stateful
    # OpenVINO LM): generation objectives search it (accel.search.generation).
    keeps_kv_cache: ClassVar[bool] = False
    # A pass whose gain is in generation only (the decode step with a KV cache): forward
    # objectives do not search it (accel.search.generation.objective_exclusions).
    speeds_generation_only: ClassVar[bool] = False

    def apply(self, model: LoadedModel, config: PassConfig, ctx: PassContext) -> LoadedModel:
        raise NotImplementedError

    def to_script(self, config: PassConfig) -> ScriptStep:
        raise NotImplementedError

    def preflight(self, model: LoadedModel, config: PassConfig) -> None:
        """Raise NotApplicable (with the reason) when the pass has nothing to do on ``model``.

        Cheap checks only (module types, no forward); runs before any step starts work."""

    # -- helpers shared by all passes ----------------------------------------------------
    @classmethod
    def parse_config(cls, params: dict[str, Any] | None) -> PassConfig:
        return cls.Config.model_validate(params or {})

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Name, summary, category, requirements and parameters (JSON schema) for UIs."""
        schema = cls.Config.model_json_schema()
        params = []
        for fname, f in cls.Config.model_fields.items():
            prop = schema.get("properties", {}).get(fname, {})
            params.append(
                {
                    "name": fname,
                    "type": _type_name(prop),
                    "default": None
                    if f.is_required()
                    else jsonable(f.get_default(call_default_factory=True)),
                    "required": f.is_required(),
                    "description": f.description or "",
                    "choices": prop.get("enum") or _enum_choices(prop, schema),
                }
            )
        return {
            "name": cls.name,
            "summary": cls.summary,
            "category": cls.category,
            "requires": cls.requires.to_dict(),
            "output_kind": cls.output_kind,
            "search": cls.search.to_dict() if cls.search is not None else None,
            "params": params,
            "schema": schema,
        }

    @classmethod
    def produced_form(cls, received: str) -> str:
        """The form of the model the pass returns when it gets a ``received`` model."""
        return cls.requires.produces or cls.output_kind or received

    @classmethod
    def form_problem(cls, form: str) -> str | None:
        """Why the pass cannot take a model of ``form`` (None: it can). A kind the pass does
        not take at all is check_requirements' message; this one names the form."""
        accepted = cls.requires.accepted_forms()
        if form in accepted:
            return None
        need = " or ".join(describe(f) for f in accepted)
        maker = made_by(form)
        hint = f" Put this step before the {maker} step." if maker else ""
        return f"{cls.name} needs {need}, but the model is {describe(form)} here.{hint}"

    @classmethod
    def unavailable_reason(cls, device: str = "cpu") -> str | None:
        """Why this pass cannot run here on ``device`` (a library or CUDA missing), or None.
        The GUI shows it on the disabled palette entry (accel.plan checks the same before
        a run)."""
        from accel.models.runtime import library_problem

        req = cls.requires
        for lib in req.libraries:
            problem = library_problem(lib)
            if problem:
                return f"{cls.name} cannot run here: {problem}"
        if req.cuda and not str(device).startswith("cuda"):
            return (
                f"{cls.name} needs a CUDA GPU; set the recipe's device to cuda:0 on a machine "
                "with a GPU"
            )
        if req.cuda:
            import torch

            if not torch.cuda.is_available():
                return f"{cls.name} needs CUDA, and no CUDA GPU is available on this machine"
        return None

    def check_requirements(self, model: LoadedModel, device: str) -> None:
        """Raise PassError when the model kind or the device does not fit."""
        from accel.models.runtime import reach_hint

        req = self.requires
        if model.kind not in req.model_kinds:
            kinds = " or ".join(req.model_kinds)
            hint = reach_hint(req.model_kinds, model.kind)
            raise PassError(
                f"{self.name} needs a {kinds} model, but the current model is {model.kind}.{hint}"
            )
        form = model_form(model)
        problem = self.form_problem(form)
        if problem:
            raise PassError(problem)


def _type_name(prop: dict[str, Any]) -> str:
    if "type" in prop:
        t = prop["type"]
        if t == "array":
            return f"list[{_type_name(prop.get('items', {}))}]"
        return str(t)
    if "anyOf" in prop:
        return " | ".join(_type_name(p) for p in prop["anyOf"])
    if "enum" in prop:
        return "enum"
    if "$ref" in prop:
        return "enum"
    return "any"


def _enum_choices(prop: dict[str, Any], schema: dict[str, Any]) -> list[Any] | None:
    refs = [prop] + list(prop.get("anyOf", []))
    for p in refs:
        if "enum" in p:
            return list(p["enum"])
        ref = p.get("$ref")
        if ref:
            target = schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {})
            if "enum" in target:
                return list(target["enum"])
    return None


# -- registry -------------------------------------------------------------------------------

# Filled by @register_pass; accel.passes.registry imports the pass modules and reads it.
REGISTERED: dict[str, type[Pass]] = {}


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: add a pass to the registry (also used by plugins and tests)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.category not in CATEGORIES:
        raise ValueError(f"{cls.__name__}: category {cls.category!r} not in {CATEGORIES}")
    REGISTERED[cls.name] = cls
    return cls
