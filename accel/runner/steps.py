"""Executing one step: the pass context, the pass applied to the current model, and the
copy of the original the first step gets. Evaluation is accel.runner.evaluate's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel.errors import AccelError, PassError
from accel.recipe import Recipe, Step

log = logging.getLogger(__name__)


def make_context(
    index: int,
    step_dir: Path,
    recipe: Recipe,
    orig: Any,
    device: str,
    progress: Callable[[float, str], None],
    cancel: Callable[[], bool],
) -> Any:
    """The PassContext of step ``index``: its folder, the original model (``orig``:
    accel.runner.prepare.Original) with its inputs and data sources, the callbacks."""
    from accel.passes import PassContext

    return PassContext(
        inputs=orig.inputs,
        device=device,
        work_dir=step_dir,
        step_index=index,
        seed=recipe.seed,
        progress_cb=progress,
        cancel_cb=cancel,
        calibration=orig.data.get("calibration"),
        train_data=orig.data.get("train"),
        eval_data=orig.data.get("eval"),
        original=orig.model,
        recipe=recipe,
    )


def apply_step(step: Step, model: Any, ctx: Any, seed: int) -> Any:
    """Parse the step's config, check the model fits the pass, apply it; the new model."""
    import torch

    from accel.passes import get_pass

    pass_cls = get_pass(step.pass_name)
    p = pass_cls()
    config = pass_cls.parse_config(step.params)
    p.check_requirements(model, ctx.device)
    torch.manual_seed(seed)
    new_model = p.apply(model, config, ctx)
    if new_model is None:
        raise PassError(f"{step.pass_name} returned no model (a bug in the pass)")
    ctx.check_cancelled()
    return new_model


def preflight(enabled: list[tuple[int, Step]], original: Any) -> dict[int, str]:
    """Steps whose pass says before any work that it cannot apply: index -> reason.

    Checked on the original while the chain still has its kind (later kinds differ)."""
    from accel.errors import NotApplicable
    from accel.passes import get_pass

    reasons: dict[int, str] = {}
    kind = original.kind
    for index, step in enabled:
        try:
            cls = get_pass(step.pass_name)
            if kind == original.kind and kind in cls.requires.model_kinds:
                cls().preflight(original, cls.parse_config(step.params))
        except NotApplicable as exc:
            reasons[index] = str(exc)
        except Exception:  # noqa: BLE001 - anything else is reported when the step runs
            log.debug("pre-flight of %s", step.pass_name, exc_info=True)
        else:
            kind = cls.output_kind or kind
    return reasons


def step_error(step: Step, exc: BaseException) -> str:
    """The message of a step that raised: AccelError's own text, else what crashed."""
    if isinstance(exc, AccelError):
        return str(exc)
    log.debug("pass %s crashed", step.pass_name, exc_info=exc)
    return f"{step.pass_name} failed: {type(exc).__name__}: {exc}"


def copy_model(model: Any) -> Any:
    """A copy passes may change in place (the original stays intact for sensitivity, QAT);
    the model kind's handler makes it (torch: a deep copy of the module)."""
    return model.runtime.copy(model)
