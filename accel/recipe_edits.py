"""Edits of a recipe that the studio makes on the user's behalf (plain logic, no Qt).

``keep_in_float``: add layers to the ``exclude`` list of the recipe's quantization step.
Which steps qualify comes from the pass registry (category "quantize", accepts the
model's kind, has an ``exclude`` parameter), not from a list of names in a widget.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel.passes.base import get_pass, list_passes
from accel.recipe import Recipe, Step

# The step added when the recipe has no quantization step taking an exclude list yet:
# static int8 of the model's kind (calibrated, the common case for keeping layers in float).
KEEP_FLOAT_DEFAULT = {
    "torch": "quantize_static_int8",
    "onnx": "quantize_onnx_static",
    "openvino": "quantize_openvino",
}


@dataclass(frozen=True)
class RecipeEdit:
    recipe: Recipe
    index: int  # the step that was changed or added
    message: str


def takes_exclude_list(pass_name: str, model_kind: str) -> bool:
    """A quantization pass for ``model_kind`` models with an ``exclude`` parameter."""
    try:
        cls = get_pass(pass_name)
    except Exception:
        return False
    return (
        cls.category == "quantize"
        and model_kind in cls.requires.model_kinds
        and "exclude" in cls.Config.model_fields
    )


def keep_in_float(recipe: Recipe, model_kind: str, names: list[str], where: str = "") -> RecipeEdit:
    """Add ``names`` (module paths for torch, node names for ONNX) to the exclude list of
    the first fitting quantization step, or add a step that excludes them.

    Raises ValueError when ``names`` is empty (the whole model cannot be kept in float
    by a quantization step: remove the step instead).
    """
    if not names:
        raise ValueError("nothing to keep in float: pick a layer, not the whole model")
    label = where or ", ".join(names)
    steps = list(recipe.steps)
    for i, step in enumerate(steps):
        if not takes_exclude_list(step.pass_name, model_kind):
            continue  # module paths mean nothing to an ONNX quantizer and vice versa
        params = dict(step.params)
        exclude = list(params.get("exclude") or [])
        exclude += [n for n in names if n not in exclude]
        params["exclude"] = exclude
        steps[i] = step.model_copy(update={"params": params})
        msg = f"{label} kept in float (step {i + 1}: {step.pass_name})"
        return RecipeEdit(recipe.model_copy(update={"steps": steps}), i, msg)
    pass_name = KEEP_FLOAT_DEFAULT.get(model_kind)
    if pass_name is None or not takes_exclude_list(pass_name, model_kind):
        fitting = [p.name for p in list_passes() if takes_exclude_list(p.name, model_kind)]
        if not fitting:
            raise ValueError(f"no quantization pass for {model_kind} models takes an exclude list")
        pass_name = fitting[0]
    steps.append(Step.model_validate({"pass": pass_name, "params": {"exclude": list(names)}}))
    msg = f"added {pass_name} with {label} kept in float"
    return RecipeEdit(recipe.model_copy(update={"steps": steps}), len(steps) - 1, msg)
