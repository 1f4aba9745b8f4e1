"""TorchScript pass: trace or script, save, and run the saved file from then on."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.models.forms import EAGER, EXPORTED, SCRIPTED
from accel.models.shapes import current_dims, other_dims
from accel.passes.base import Pass, PassConfig, PassContext, Requirements, ScriptStep, register_pass

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)


class TorchScriptConfig(PassConfig):
    method: Literal["trace", "script"] = Field(
        "trace",
        description="trace (records the ops run on example inputs) or script (compiles the Python code)",
    )
    check: bool = Field(
        True, description="check the traced model on a second input (other seed and shapes)"
    )
    freeze: bool = Field(
        False,
        description="torch.jit.freeze: weights and attributes inlined as constants, conv+bn folded (optimize_for_inference is not applied: its files do not reload)",
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _tracer_messages(caught: list[Any]) -> list[str]:
    """The tracer's warnings, once each, pointing at the user's line (not torch's)."""
    import torch

    tracer_msgs: list[str] = []
    for w in caught:
        if issubclass(w.category, torch.jit.TracerWarning):
            msg = str(w.message).splitlines()[0]
            if "/torch/" not in str(w.filename):
                msg += f" ({w.filename}:{w.lineno})"
            if msg not in tracer_msgs:
                tracer_msgs.append(msg)
    return tracer_msgs


@register_pass
class TorchScript(Pass):
    name = "torchscript"
    summary = "Trace or script the model to TorchScript, save it (.ts) and run the saved file."
    category = "export"
    Config = TorchScriptConfig
    requires = Requirements(model_kinds=("torch",), accepts=(EAGER, EXPORTED), produces=SCRIPTED)

    def apply(self, model: LoadedModel, config: TorchScriptConfig, ctx: PassContext) -> LoadedModel:
        import warnings

        import torch

        from accel.errors import PassError

        module = model.module
        if type(module).__name__ == "OptimizedModule":
            raise PassError(
                "torchscript cannot save a torch.compile'd model; put torchscript before compile."
            )
        module.eval()
        args = tuple(model.prepare_inputs(ctx.inputs).values())
        ctx.details["method"] = config.method
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if config.method == "trace":
                    # strict=False: models returning a dict (Hugging Face ModelOutput) trace
                    # too; the saved model returns a plain dict with the same keys.
                    with torch.no_grad():
                        jit = torch.jit.trace(module, args, check_trace=False, strict=False)
                else:
                    jit = torch.jit.script(module)
            except Exception as exc:
                other = "script" if config.method == "trace" else "trace"
                raise PassError(
                    f"torch.jit.{config.method} failed: {type(exc).__name__}: {_first_line(exc)}. "
                    f"Try method: {other}, or use torch_export."
                ) from None
        for msg in _tracer_messages(caught):
            ctx.warn(
                f"tracer: {msg} -- the trace may only be valid for these inputs (data-dependent control flow); "
                "check the result or use method: script."
            )
        if config.freeze:
            jit = torch.jit.freeze(jit.eval())
        path = ctx.work_dir / "model.ts"
        torch.jit.save(jit, str(path))
        ctx.add_artifact(path, "torchscript")
        loaded = torch.jit.load(str(path), map_location=model.device).eval()
        new = model.replace(
            module=loaded,
            format="torchscript",
            size_bytes=path.stat().st_size,
            metadata={**model.metadata, "torchscript_path": str(path)},
        )
        if config.check:
            self._check_second_input(model, new, ctx)
        return new

    def _check_second_input(self, model: LoadedModel, new: LoadedModel, ctx: PassContext) -> None:
        """Run the saved model and the source model on another input: other seed, other shapes.
        When they disagree, each changed dimension is tried alone to name the ones the trace
        fixed."""
        from accel.errors import PassError

        spec = model.input_spec
        traced = current_dims(spec, ctx.inputs)
        dims = other_dims(spec, traced)
        second = spec.sample(seed=ctx.seed + 1, dims=dims or None)
        ctx.details["checked_on"] = {k: list(v.shape) for k, v in second.items()}
        problem = _disagreement(model, new, second)
        if problem is None:
            return
        on_example = _disagreement(model, new, ctx.inputs)
        if on_example is not None:  # not a matter of shapes
            raise PassError(
                f"the saved TorchScript model {on_example} on the example inputs it was made "
                f"from (method: {ctx.details['method']}). Use "
                f"method: {'script' if ctx.details['method'] == 'trace' else 'trace'}, or "
                "torch_export."
            )
        fixed = []
        for name, value in dims.items():
            if value == traced[name]:
                continue
            alone = spec.sample(seed=ctx.seed + 1, dims={**traced, name: value})
            if _disagreement(model, new, alone) is not None:
                fixed.append(f"{name} (made at {traced[name]}; wrong at {value})")
        ctx.details["trace_fixed_dims"] = fixed
        cause = (
            f"the saved model fixed {', '.join(fixed)}"
            if fixed
            else "no dimension alone makes it fail (same shapes, other values: the trace "
            "recorded one path of data-dependent control flow; or only a combination of shapes "
            "fails)"
        )
        raise PassError(
            f"the saved TorchScript model {problem} on a second input of other shapes "
            f"{ctx.details['checked_on']}; tried one dimension at a time: {cause}. "
            "Use method: script, or torch_export (dynamic shapes)."
        )

    def to_script(self, config: TorchScriptConfig) -> ScriptStep:
        from accel.passes._torch_helpers import prepared_args, source_of

        if config.method == "trace":
            make = (
                "with torch.no_grad():\n"
                "    scripted = torch.jit.trace(model.eval(), tuple(prepared_args(inputs, input_casts, device)), check_trace=False, strict=False)\n"
            )
        else:
            make = "scripted = torch.jit.script(model.eval())\n"
        if config.freeze:
            make += "scripted = torch.jit.freeze(scripted.eval())\n"
        code = (
            make + "torch.jit.save(scripted, str(step_dir / 'model.ts'))\n"
            "# From here on the script runs the saved file, as the studio does.\n"
            "model = torch.jit.load(str(step_dir / 'model.ts'), map_location=device).eval()\n"
        )
        return ScriptStep(code=code, helpers=source_of(prepared_args))


def _disagreement(model: LoadedModel, new: LoadedModel, inputs: dict[str, Any]) -> str | None:
    """How the saved model disagrees with the source model on ``inputs`` ("fails (error)" or
    "gives different outputs"), or None when it agrees."""
    import torch

    from accel.parity import normalize_outputs

    with torch.no_grad():
        want = normalize_outputs(model.forward(inputs))  # the source model's error is not ours
        try:
            got = normalize_outputs(new.forward(inputs))
        except Exception as exc:  # noqa: BLE001 - the finding, reported by the caller
            return f"fails ({type(exc).__name__}: {_last_line(exc)})"
    want_l = list(torch.utils._pytree.tree_leaves(want))
    got_l = list(torch.utils._pytree.tree_leaves(got))
    # A low-precision model's two runs may round differently (other kernels after freezing).
    low = any(c in ("float16", "bfloat16") for c in model.input_casts.values())
    low = low or any(p.dtype in (torch.float16, torch.bfloat16) for p in model.module.parameters())
    tol = 5e-2 if low else 1e-3
    ok = len(want_l) == len(got_l) and all(
        a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=tol, atol=tol / 10)
        for a, b in zip(want_l, got_l)
        if isinstance(a, torch.Tensor)
    )
    return None if ok else "gives different outputs than the model"


def _last_line(exc: BaseException) -> str:
    """The error's own message: TorchScript's interpreter puts it last, after its traceback."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__
