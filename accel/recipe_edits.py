"""Edits of a recipe that the studio makes on the user's behalf (plain logic, no Qt).

``keep_in_float``: add layers to the keep-in-float lists of the recipe's steps. Which steps
and which parameters come from the passes' declarations (``Requirements.layer_lists`` with
the role KEEP_FLOAT: quantizers' ``exclude``, fp16/bf16 ``keep``) and the model form each
step receives (accel.plan.forms_along), not from a list of names in a widget.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel.models.forms import default_form, kind_of, source_form
from accel.passes.base import KEEP_FLOAT
from accel.passes.registry import get_pass, list_passes
from accel.recipe import Recipe, Step

# The step added when the recipe has no step taking a keep-in-float list yet: static int8
# of the model's kind (calibrated, the common case for keeping layers in float).
KEEP_FLOAT_DEFAULT = {
    "torch": "quantize_static_int8",
    "onnx": "quantize_onnx_static",
    "openvino": "quantize_openvino",
}


@dataclass(frozen=True)
class RecipeEdit:
    recipe: Recipe
    index: int  # the (first) step that was changed or added
    message: str
    indices: tuple[int, ...] = ()  # every step changed or added


def keep_float_lists(pass_name: str, model_kind: str) -> list[str]:
    """The keep-in-float parameters of ``pass_name`` when it takes ``model_kind`` models
    (empty: none, or an unknown pass)."""
    try:
        cls = get_pass(pass_name)
    except Exception:  # noqa: BLE001 - an unknown pass in an edited recipe takes nothing
        return []
    if model_kind not in cls.requires.model_kinds:
        return []
    return cls.requires.lists_of(KEEP_FLOAT)


def takes_exclude_list(pass_name: str, model_kind: str) -> bool:
    """A quantization pass for ``model_kind`` models with a keep-in-float list."""
    try:
        quantizer = get_pass(pass_name).category == "quantize"
    except Exception:  # noqa: BLE001 - unknown pass
        return False
    return quantizer and bool(keep_float_lists(pass_name, model_kind))


def _start_form(recipe: Recipe, model_kind: str) -> str:
    """The form the recipe's model starts in, when it is of ``model_kind`` (the names the
    user picked belong to that model), else the kind's default form."""
    form = source_form(recipe.model.source)
    return form if form is not None and kind_of(form) == model_kind else default_form(model_kind)


def keep_in_float(recipe: Recipe, model_kind: str, names: list[str], where: str = "") -> RecipeEdit:
    """Add ``names`` (module paths for torch, node names for ONNX) to the keep-in-float list
    of every step that takes a ``model_kind`` model where it is (a quantizer's ``exclude``,
    fp16/bf16 ``keep``; steps after an export to another kind are left alone), or add a
    quantization step that keeps them in float when no step fits.

    Raises ValueError when ``names`` is empty (the whole model cannot be kept in float
    by a quantization step: remove the step instead).
    """
    from accel.plan import forms_along

    if not names:
        raise ValueError("nothing to keep in float: pick a layer, not the whole model")
    label = where or ", ".join(names)
    steps = list(recipe.steps)
    changed: list[int] = []
    forms = forms_along(steps, _start_form(recipe, model_kind))
    for i, (step, form) in enumerate(zip(steps, forms, strict=False)):
        params_of = keep_float_lists(step.pass_name, model_kind)
        if not params_of or form is None or kind_of(form) != model_kind:
            continue  # module paths mean nothing to an ONNX quantizer and vice versa
        params = dict(step.params)
        for param in params_of:
            current = list(params.get(param) or [])
            params[param] = current + [n for n in names if n not in current]
        steps[i] = step.model_copy(update={"params": params})
        changed.append(i)
    if changed:
        where_ = ", ".join(f"step {i + 1}: {steps[i].pass_name}" for i in changed)
        msg = f"{label} kept in float ({where_})"
        return RecipeEdit(
            recipe.model_copy(update={"steps": steps}), changed[0], msg, tuple(changed)
        )
    pass_name = _default_pass(model_kind)
    param = keep_float_lists(pass_name, model_kind)[0]
    steps.append(Step.model_validate({"pass": pass_name, "params": {param: list(names)}}))
    msg = f"added {pass_name} with {label} kept in float"
    index = len(steps) - 1
    return RecipeEdit(recipe.model_copy(update={"steps": steps}), index, msg, (index,))


def _default_pass(model_kind: str) -> str:
    """The quantization pass added to keep layers of a ``model_kind`` model in float."""
    pass_name = KEEP_FLOAT_DEFAULT.get(model_kind)
    if pass_name is not None and takes_exclude_list(pass_name, model_kind):
        return pass_name
    fitting = [p.name for p in list_passes() if takes_exclude_list(p.name, model_kind)]
    if not fitting:
        raise ValueError(f"no quantization pass for {model_kind} models takes an exclude list")
    return fitting[0]
