"""Before any work: the recipe with the caller's overrides, the run folder, the environment
and thread count, then the original model, its inputs and the recipe's data sources."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.errors import AccelError, RecipeError
from accel.recipe import Recipe, load_recipe
from accel.runner.artifacts import SAVE_MODELS_ENV, default_run_dir, write_json


@dataclass
class RunSetup:
    recipe: Recipe
    run_dir: Path
    environment: dict[str, Any]
    threads: int
    save_models: bool


@dataclass
class Original:
    model: Any  # LoadedModel
    inputs: dict[str, Any]
    data: dict[str, Any]  # calibration / train / eval data sources the recipe names


def prepare_run(
    recipe: Recipe | str | Path | dict[str, Any],
    out_dir: str | Path | None,
    model_source: str | None,
    device: str | None,
    save_models: bool | None,
) -> RunSetup:
    """Validate the recipe, apply the overrides, create the run folder (recipe.json)."""
    from accel.timing import TimingSettings, physical_cores
    from accel.timing.environment import environment_info

    if save_models is None:
        save_models = os.environ.get(SAVE_MODELS_ENV, "1").strip() not in ("0", "false", "no")
    recipe = load_recipe(recipe)
    if not recipe.enabled_steps():
        raise RecipeError(
            "the recipe has no enabled steps; add at least one step (see `studio passes`)"
        )
    if model_source:
        recipe = recipe.model_copy(
            update={"model": recipe.model.model_copy(update={"source": model_source})}
        )
    if device:
        recipe = recipe.model_copy(update={"device": device})
    run_dir = Path(out_dir) if out_dir else default_run_dir(recipe)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "recipe.json", recipe.to_dict())
    env = environment_info(device=recipe.device)
    try:
        threads = TimingSettings.from_any(recipe.benchmark).resolved_threads
    except AccelError as exc:
        raise RecipeError(str(exc)) from None
    # One thread count for the whole run (torch here, ONNX Runtime sessions when timed),
    # recorded with it.
    env["threads"] = threads
    env["physical_cores"] = physical_cores()
    return RunSetup(recipe, run_dir, env, threads, save_models)


def load_original(recipe: Recipe, trust_pickle: bool, trusted_source: bool) -> Original:
    """Load the recipe's model, sample its inputs, build its data sources.
    ``trusted_source``: the source is the caller's own (may run its code)."""
    from accel.models import load_model

    original = load_model(
        recipe.model.source,
        recipe.model.input_spec,
        trust_pickle=trust_pickle,
        device=recipe.device,
        trust_code=True if trusted_source else None,
    )
    inputs = original.input_spec.sample(seed=recipe.seed, dims=recipe.benchmark.dims or None)
    return Original(original, inputs, build_data(recipe, original))


def build_data(recipe: Recipe, model: Any) -> dict[str, Any]:
    """Data sources named by the recipe (validated before any work starts)."""
    d = recipe.data
    if not (d.calibration or d.train or d.eval):
        return {}
    from accel.data import make_data_source

    out: dict[str, Any] = {}
    for key in ("calibration", "train", "eval"):
        spec = getattr(d, key)
        if spec:
            out[key] = make_data_source(
                spec,
                model.input_spec,
                seed=recipe.seed,
                require_labels=key != "calibration",
                teacher=model,
            )
    return out
