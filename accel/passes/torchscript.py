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
        """Run the saved model and the source model on another input: other seed, other shapes."""
        import torch

        from accel.errors import PassError
        from accel.parity import normalize_outputs

        spec = model.input_spec
        dims = other_dims(spec, current_dims(spec, ctx.inputs))
        second = spec.sample(seed=ctx.seed + 1, dims=dims or None)
        ctx.details["checked_on"] = {k: list(v.shape) for k, v in second.items()}
        try:
            want = normalize_outputs(model.forward(second))
            got = normalize_outputs(new.forward(second))
        except Exception as exc:
            raise PassError(
                f"the saved TorchScript model fails on a second input of other shapes {ctx.details['checked_on']}: "
                f"{type(exc).__name__}: {_first_line(exc)}. The trace fixed a shape; use method: script or torch_export."
            ) from None
        want_l = (
            [want]
            if isinstance(want, torch.Tensor)
            else list(torch.utils._pytree.tree_leaves(want))
        )
        got_l = (
            [got] if isinstance(got, torch.Tensor) else list(torch.utils._pytree.tree_leaves(got))
        )
        # A low-precision model's two runs may round differently (other kernels after freezing).
        low = any(c in ("float16", "bfloat16") for c in model.input_casts.values())
        low = low or any(
            p.dtype in (torch.float16, torch.bfloat16) for p in model.module.parameters()
        )
        tol = 5e-2 if low else 1e-3
        ok = len(want_l) == len(got_l) and all(
            a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=tol, atol=tol / 10)
            for a, b in zip(want_l, got_l)
            if isinstance(a, torch.Tensor)
        )
        if not ok:
            raise PassError(
                "the saved TorchScript model gives different outputs than the model on a second input "
                f"(shapes {ctx.details['checked_on']}): the trace recorded one path of data-dependent control "
                "flow or a fixed shape. Use method: script, or torch_export."
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
