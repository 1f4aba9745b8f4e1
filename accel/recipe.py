"""Recipes: an ordered list of pass steps plus gates, benchmark settings and data.

On disk as YAML or JSON. ``load_recipe`` migrates old schema versions, then
validates every step's params against its pass's pydantic config; a typo gives
one RecipeError naming the step, the field and the closest valid names.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from accel.errors import PassError, RecipeError
from accel.timing.settings import TimingSettings

SCHEMA_VERSION = 2

# Bounds a recipe's numbers must stay within (a file from someone else must not switch a
# gate off with inf, or ask for 1e18 iterations).
MAX_TOLERANCE = 1e6
MAX_DIM = 1_000_000
MAX_BATCHES = 100_000
MAX_CONTEXT = 1 << 20  # tokens: generation's prompt_tokens / new_tokens
MAX_STEPS = 1000
# Recipe files are small; a larger one is refused before parsing.
MAX_RECIPE_BYTES = 1 << 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ModelRef(_Strict):
    source: str = Field(
        description="model source: zoo:NAME, file.onnx, model.pt2, pkg.mod:factory, ..."
    )
    input_spec: str | None = Field(
        None, description="input spec, e.g. 'x:float32[batch,3,224,224]'; default: the model's own"
    )
    trust_pickle: bool = Field(
        False,
        description="ignored (kept so old recipes load): only the person running a recipe "
        "can allow unpickling, with --trust-pickle or the studio's confirmation",
    )


class Gates(_Strict):
    rtol: float = Field(
        1e-3,
        ge=0,
        le=MAX_TOLERANCE,
        allow_inf_nan=False,
        description="relative tolerance of allclose",
    )
    atol: float = Field(
        1e-4,
        ge=0,
        le=MAX_TOLERANCE,
        allow_inf_nan=False,
        description="absolute tolerance of allclose",
    )
    min_cosine: float | None = Field(
        0.999,
        ge=-1,
        le=1,
        allow_inf_nan=False,
        description="an output also passes with cosine similarity at least this",
    )
    min_top1: float | None = Field(
        None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="minimum top-1 agreement for logits outputs",
    )
    max_accuracy_drop: float | None = Field(
        None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="maximum accuracy drop vs the original (needs eval data)",
    )


class BenchSettings(TimingSettings):
    """How each step is timed against the original: the timing engine's settings
    (accel.timing.TimingSettings, defaults stated there once) plus the benchmark's dims."""

    dims: dict[str, Annotated[int, Field(ge=1, le=MAX_DIM)]] = Field(
        default_factory=dict,
        max_length=64,
        description="symbolic dim values for benchmarking, e.g. {batch: 8}; names of the "
        "input spec's dims only",
    )
    # Generation (a decoder language model generating tokens; accel.generate). None means the
    # default, so recipes that never mention generation keep their stored form.
    workload: Literal["forward", "generate"] | None = Field(
        None,
        description="what is timed: forward (one call on the input spec's sample, default) or "
        "generate (a decoder LM: time to first token, time per output token, tokens/s)",
    )
    prompt_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_CONTEXT,
        strict=True,
        description="generate: prompt length in tokens (default 128)",
    )
    new_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_CONTEXT,
        strict=True,
        description="generate: tokens generated (default 64)",
    )
    batch: int | None = Field(
        None,
        ge=1,
        le=4096,
        strict=True,
        description="generate: prompts generated together (default 1)",
    )


class DataConfig(_Strict):
    calibration: str | None = Field(
        None, description="calibration data: 'synthetic', file.npz, file.pt or pkg.mod:function"
    )
    calibration_batches: int = Field(
        8, ge=1, le=MAX_BATCHES, description="calibration batches to use"
    )
    train: str | None = Field(None, description="labelled data for QAT / fine-tuning (same forms)")
    eval: str | None = Field(
        None, description="labelled evaluation data; enables accuracy per step"
    )
    metric: str = Field("top1", description="'top1' or pkg.mod:function(outputs, labels) -> float")


class Step(_Strict):
    pass_name: str = Field(alias="pass", description="registered pass name")
    params: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True
    name: str | None = Field(
        None, max_length=200, description="label shown in tables (default: the pass name)"
    )
    gates: Gates | None = Field(
        None, description="gates for this step only (default: the recipe's)"
    )

    @property
    def label(self) -> str:
        return self.name or self.pass_name


class Recipe(_Strict):
    schema_version: int = Field(SCHEMA_VERSION, ge=0, le=SCHEMA_VERSION, strict=True)
    name: str = Field("recipe", max_length=200)
    description: str = Field("", max_length=20000)
    model: ModelRef
    device: str = Field("cpu", description="cpu or cuda[:N]")
    seed: int = Field(0, ge=0, le=2**63 - 1)
    steps: list[Step] = Field(default_factory=list, max_length=MAX_STEPS)
    gates: Gates = Field(default_factory=Gates)
    benchmark: BenchSettings = Field(default_factory=BenchSettings)
    on_gate_fail: Literal["stop", "warn"] = "warn"
    # skip: a step that cannot apply (pre-flight) or fails is recorded as skipped and the
    # run goes on with the model from before that step.
    on_step_error: Literal["stop", "skip"] = "stop"
    data: DataConfig = Field(default_factory=DataConfig)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v != "cpu" and not (v == "cuda" or (v.startswith("cuda:") and v[5:].isdigit())):
            raise ValueError("device must be 'cpu', 'cuda' or 'cuda:N'")
        return v

    # -- convenience ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def content_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    def enabled_steps(self) -> list[tuple[int, Step]]:
        return [(i, s) for i, s in enumerate(self.steps) if s.enabled]

    def gates_for(self, step: Step) -> Gates:
        return step.gates or self.gates


# -- migrations -----------------------------------------------------------------------------


def _v0_to_v1(d: dict[str, Any]) -> dict[str, Any]:
    """v0 (no schema_version): ``model`` was a string and steps lived under ``passes``
    as ``{type, options}``."""
    d = dict(d)
    if isinstance(d.get("model"), str):
        d["model"] = {"source": d.pop("model")}
        if "input" in d:
            d["model"]["input_spec"] = d.pop("input")
    if "passes" in d and "steps" not in d:
        passes = d.pop("passes")
        if not isinstance(passes, list) or not all(isinstance(p, Mapping) for p in passes):
            raise RecipeError("'passes' (schema 0) must be a list of {type, options} mappings")
        d["steps"] = [
            {"pass": p.get("type", p.get("pass")), "params": p.get("options", p.get("params", {}))}
            for p in passes
        ]
    d["schema_version"] = 1
    return d


def _v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    """v1 kept parity thresholds flat under ``parity``; v2 calls them ``gates``."""
    d = dict(d)
    if "parity" in d and "gates" not in d:
        d["gates"] = d.pop("parity")
    d["schema_version"] = 2
    return d


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _v0_to_v1, 1: _v1_to_v2}


def migrate(d: Mapping[str, Any]) -> dict[str, Any]:
    """Bring an older recipe mapping to the current schema; RecipeError if it cannot be."""
    if not isinstance(d, Mapping):
        raise RecipeError(
            f"a recipe is a mapping with model, steps, gates...; got {type(d).__name__}"
        )
    d = copy.deepcopy(dict(d))
    version = d.get("schema_version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise RecipeError(
            f"schema_version must be a whole number 0..{SCHEMA_VERSION}, got {_short(version)}"
        )
    if version > SCHEMA_VERSION:
        raise RecipeError(
            f"recipe schema_version {version} is newer than this studio understands ({SCHEMA_VERSION}); update Accel Studio"
        )
    while version < SCHEMA_VERSION:
        try:
            d = MIGRATIONS[version](d)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise RecipeError(
                f"cannot read this schema_version {version} recipe ({type(exc).__name__}: "
                f"{_short(exc)}); check its model and passes entries"
            ) from None
        version = int(d["schema_version"])
    return d


def _short(value: Any, limit: int = 200) -> str:
    """A bounded repr for messages (a huge value must not make a huge message)."""
    import reprlib

    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxdict = 8
    text = r.repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# -- load / save / validate -----------------------------------------------------------------


def read_recipe_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise RecipeError(f"recipe file {p} not found")
    try:
        raw = p.read_bytes() if p.stat().st_size <= MAX_RECIPE_BYTES else None
    except OSError as exc:
        raise RecipeError(f"cannot read recipe file {p}: {exc.strerror or exc}") from None
    if raw is None:
        raise RecipeError(
            f"{p} is larger than {MAX_RECIPE_BYTES // 1024} KiB; a recipe is a small text file"
        )
    return parse_recipe_text(raw, p.name, json_format=p.suffix.lower() == ".json")


def parse_recipe_text(raw: bytes | str, where: str = "recipe", *, json_format: bool = False):
    """Parse recipe text (YAML or JSON) into a mapping; every failure is a RecipeError.

    YAML is read with the safe loader, with anchors and aliases refused (an alias bomb
    expands a few hundred bytes into gigabytes) and nesting bounded."""
    if isinstance(raw, bytes):
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise RecipeError(f"{where} is UTF-16 text; save it as UTF-8")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise RecipeError(
                f"{where} is not UTF-8 text (bad byte at offset {exc.start}); save it as UTF-8"
            ) from None
    else:
        text = raw
    if len(text) > MAX_RECIPE_BYTES:
        raise RecipeError(f"{where} is larger than {MAX_RECIPE_BYTES // 1024} KiB")
    kind = "JSON" if json_format else "YAML"
    try:
        data = json.loads(text) if json_format else _safe_yaml(text)
    except RecipeError as exc:
        raise RecipeError(f"{where}: {exc}") from None
    except RecursionError:
        raise RecipeError(f"{where}: nested too deeply to be a recipe") from None
    except Exception as exc:  # noqa: BLE001 - any parser error is the file's fault
        raise RecipeError(f"{where}: not valid {kind}: {_short(str(exc), 500)}") from None
    if not isinstance(data, Mapping):
        raise RecipeError(
            f"{where}: a recipe is a mapping with model, steps, gates...; got {type(data).__name__}"
        )
    return dict(data)


_MAX_DEPTH = 50


def _safe_yaml(text: str) -> Any:
    import yaml

    class _Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise RecipeError(
                    f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not "
                    "allowed in recipes; write the value out"
                )
            self.depth += 1
            if self.depth > _MAX_DEPTH:
                raise RecipeError(f"nested deeper than {_MAX_DEPTH} levels")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def load_recipe(
    source: str | Path | Mapping[str, Any] | Recipe, *, check_passes: bool = True
) -> Recipe:
    """Read (path or dict), migrate and validate a recipe."""
    if isinstance(source, Recipe):
        data = source.to_dict()
    elif isinstance(source, Mapping):
        data = dict(source)
    elif isinstance(source, (str, Path)):
        data = read_recipe_file(source)
    else:
        raise RecipeError(f"cannot read a recipe from {type(source).__name__}")
    _check_text(data)
    data = migrate(data)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(_explain(exc, Recipe)) from None
    except RecursionError:
        raise RecipeError("the recipe is nested too deeply") from None
    _check_dims(recipe)
    if check_passes:
        validate_steps(recipe)
    return recipe


def _check_text(value: Any, where: str = "recipe", depth: int = 0) -> None:
    """Every string must be valid Unicode text (a lone surrogate cannot be stored or printed)."""
    if depth > _MAX_DEPTH:
        raise RecipeError(f"the recipe is nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise RecipeError(
                f"{where}: text {_short(value, 80)} has an invalid character (a lone surrogate)"
            ) from None
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _check_text(k, where, depth + 1)
            _check_text(v, f"{where}.{k}" if isinstance(k, str) else where, depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_text(v, f"{where}[{i}]", depth + 1)


def _check_dims(recipe: Recipe) -> None:
    """benchmark.dims may only name dims of the recipe's input spec (when it gives one)."""
    from accel.errors import InputSpecError
    from accel.models.inputs import InputSpec

    if recipe.model.input_spec is None:
        return
    try:
        spec = InputSpec.parse(recipe.model.input_spec)
    except InputSpecError as exc:
        raise RecipeError(f"model.input_spec: {exc}") from None
    unknown = sorted(set(recipe.benchmark.dims) - set(spec.dims))
    if unknown:
        raise RecipeError(
            f"benchmark.dims names {', '.join(map(repr, unknown))}, which the input spec does "
            f"not have; its dims: {', '.join(spec.dims) or 'none (all shapes fixed)'}"
        )


def validate_steps(recipe: Recipe) -> None:
    """Check each step's pass name and params; one error naming step, field and close names."""
    from accel.passes import get_pass, pass_names

    for i, step in enumerate(recipe.steps):
        where = f"step {i + 1} ({step.pass_name})"
        try:
            cls = get_pass(step.pass_name)
        except PassError:
            close = difflib.get_close_matches(step.pass_name, pass_names(), n=3, cutoff=0.5)
            hint = (
                f" Did you mean: {', '.join(close)}?"
                if close
                else f" Known passes: {', '.join(pass_names())}"
            )
            raise RecipeError(f"{where}: unknown pass {step.pass_name!r}.{hint}") from None
        try:
            cls.parse_config(step.params)
        except ValidationError as exc:
            raise RecipeError(f"{where}: {_explain(exc, cls.Config)}") from None


def _explain(exc: ValidationError, model: type[BaseModel]) -> str:
    msgs = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            field = str(err["loc"][-1])
            valid = _fields_at(model, err["loc"][:-1])
            close = difflib.get_close_matches(field, valid, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            msgs.append(f"unknown field {loc!r}{hint} (valid: {', '.join(valid)})")
        elif err["type"] == "missing":
            msgs.append(f"missing required field {loc!r}")
        else:
            msgs.append(f"field {loc!r}: {err['msg']} (got {_short(err.get('input'))})")
    return "; ".join(msgs)


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        f = getattr(current, "model_fields", {}).get(part)
        if f is None:
            return []
        ann = f.annotation
        args = getattr(ann, "__args__", None)
        candidates = [ann, *(args or [])]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if current is None:
            return []
    return [f.alias or n for n, f in current.model_fields.items()]


def save_recipe(recipe: Recipe, path: str | Path) -> Path:
    p = Path(path)
    data = recipe.to_dict()
    if p.suffix.lower() == ".json":
        p.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    else:
        import yaml

        p.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return p
