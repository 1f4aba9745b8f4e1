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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from accel.errors import PassError, RecipeError

SCHEMA_VERSION = 2


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
        False, description="allow full unpickling of .pt files (runs code in the file)"
    )


class Gates(_Strict):
    rtol: float = Field(1e-3, ge=0, description="relative tolerance of allclose")
    atol: float = Field(1e-4, ge=0, description="absolute tolerance of allclose")
    min_cosine: float | None = Field(
        0.999, ge=-1, le=1, description="an output also passes with cosine similarity at least this"
    )
    min_top1: float | None = Field(
        None, ge=0, le=1, description="minimum top-1 agreement for logits outputs"
    )
    max_accuracy_drop: float | None = Field(
        None, ge=0, le=1, description="maximum accuracy drop vs the original (needs eval data)"
    )


class BenchSettings(_Strict):
    """How each step is timed against the original (accel.measure.TimingSettings)."""

    rounds: int = Field(
        8, ge=1, description="alternating rounds original/step (at least; see min_time_s)"
    )
    warmup: int = Field(3, ge=0, description="untimed calls of each model before the rounds")
    iters: int = Field(24, ge=1, description="timed calls of each model, spread over the rounds")
    threads: int | None = Field(
        None,
        ge=1,
        description="intra-op threads of torch and every runtime (default: physical cores)",
    )
    min_time_s: float = Field(
        0.5, ge=0, description="add rounds until both models were timed this long (seconds)"
    )
    dims: dict[str, int] = Field(
        default_factory=dict, description="symbolic dim values for benchmarking, e.g. {batch: 8}"
    )


class DataConfig(_Strict):
    calibration: str | None = Field(
        None, description="calibration data: 'synthetic', file.npz, file.pt or pkg.mod:function"
    )
    calibration_batches: int = Field(8, ge=1, description="calibration batches to use")
    train: str | None = Field(None, description="labelled data for QAT / fine-tuning (same forms)")
    eval: str | None = Field(
        None, description="labelled evaluation data; enables accuracy per step"
    )
    metric: str = Field("top1", description="'top1' or pkg.mod:function(outputs, labels) -> float")


class Step(_Strict):
    pass_name: str = Field(alias="pass", description="registered pass name")
    params: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True
    name: str | None = Field(None, description="label shown in tables (default: the pass name)")
    gates: Gates | None = Field(
        None, description="gates for this step only (default: the recipe's)"
    )

    @property
    def label(self) -> str:
        return self.name or self.pass_name


class Recipe(_Strict):
    schema_version: int = SCHEMA_VERSION
    name: str = "recipe"
    description: str = ""
    model: ModelRef
    device: str = Field("cpu", description="cpu or cuda[:N]")
    seed: int = 0
    steps: list[Step] = Field(default_factory=list)
    gates: Gates = Field(default_factory=Gates)
    benchmark: BenchSettings = Field(default_factory=BenchSettings)
    on_gate_fail: Literal["stop", "warn"] = "warn"
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
        d["steps"] = [
            {"pass": p.get("type", p.get("pass")), "params": p.get("options", p.get("params", {}))}
            for p in d.pop("passes")
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
    d = copy.deepcopy(dict(d))
    version = int(d.get("schema_version", 0))
    if version > SCHEMA_VERSION:
        raise RecipeError(
            f"recipe schema_version {version} is newer than this studio understands ({SCHEMA_VERSION}); update Accel Studio"
        )
    while version < SCHEMA_VERSION:
        d = MIGRATIONS[version](d)
        version = int(d["schema_version"])
    return d


# -- load / save / validate -----------------------------------------------------------------


def read_recipe_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise RecipeError(f"recipe file {p} not found")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:
        raise RecipeError(
            f"{p}: not valid {'JSON' if p.suffix.lower() == '.json' else 'YAML'}: {exc}"
        ) from None
    if not isinstance(data, Mapping):
        raise RecipeError(
            f"{p}: a recipe is a mapping with model, steps, gates...; got {type(data).__name__}"
        )
    return dict(data)


def load_recipe(
    source: str | Path | Mapping[str, Any] | Recipe, *, check_passes: bool = True
) -> Recipe:
    """Read (path or dict), migrate and validate a recipe."""
    if isinstance(source, Recipe):
        data = source.to_dict()
    elif isinstance(source, Mapping):
        data = dict(source)
    else:
        data = read_recipe_file(source)
    data = migrate(data)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(_explain(exc, Recipe)) from None
    if check_passes:
        validate_steps(recipe)
    return recipe


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
            msgs.append(f"field {loc!r}: {err['msg']} (got {err.get('input')!r})")
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
