"""torch.export pass: an ExportedProgram (.pt2) with dynamic shapes from the input spec."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pydantic import Field

from accel.models.calls import bind_dynamic_shapes, bind_inputs
from accel.models.forms import EAGER, EXPORTED
from accel.models.shapes import example_for_export, export_dim_objects, ranged_dims
from accel.passes.base import Pass, PassConfig, PassContext, Requirements, ScriptStep, register_pass

if TYPE_CHECKING:
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)


class TorchExportConfig(PassConfig):
    dynamic: bool = Field(
        True, description="export the input spec's symbolic dims (batch, seq...) as dynamic"
    )
    static_dims: list[str] = Field(
        default_factory=list,
        description="symbolic dims to keep fixed at the run's value (e.g. [seq] for an LSTM)",
    )
    strict: bool = Field(
        False, description="strict mode (TorchDynamo tracing) instead of non-strict Python tracing"
    )


def dynamic_dims(spec: InputSpec, config: TorchExportConfig) -> dict[str, tuple[int, int]]:
    """name -> (min, max) of the dims exported as dynamic."""
    return ranged_dims(spec, config.static_dims) if config.dynamic else {}


@register_pass
class TorchExport(Pass):
    name = "torch_export"
    summary = (
        "torch.export the model to an ExportedProgram (.pt2) with dynamic dims from the input spec."
    )
    category = "export"
    Config = TorchExportConfig
    requires = Requirements(model_kinds=("torch",), accepts=(EAGER,), produces=EXPORTED)

    def apply(self, model: LoadedModel, config: TorchExportConfig, ctx: PassContext) -> LoadedModel:
        import torch

        from accel.errors import PassError

        module = model.module
        if isinstance(module, torch.jit.ScriptModule) or type(module).__name__ == "OptimizedModule":
            raise PassError(
                "torch_export needs a plain nn.Module; put it before torchscript / compile steps."
            )
        if model.metadata.get("exported_program"):
            raise PassError(
                "the model is already a torch.export program; remove the second torch_export step."
            )
        spec = model.input_spec
        unknown = [d for d in config.static_dims if d not in spec.dims]
        if unknown:
            raise PassError(
                f"torch_export: static_dims {unknown} are not dims of the input spec ({', '.join(spec.dims) or 'none'})."
            )
        dims = dynamic_dims(spec, config)
        shapes = export_dim_objects(spec, dims)  # dim names made identifiers
        example = model.prepare_inputs(example_for_export(spec, ctx.inputs, dims, ctx.seed))
        # Bound to forward's signature: *args wrappers nest, keyword-only parameters go by name.
        args, kwargs = bind_inputs(module, example)
        shapes = bind_dynamic_shapes(module, list(example), shapes) if dims else None
        ctx.details["dynamic_dims"] = {n: [lo, hi] for n, (lo, hi) in dims.items()}
        ctx.progress(0.1, "exporting")
        try:
            ep = torch.export.export(
                module.eval(), args, kwargs=kwargs, dynamic_shapes=shapes, strict=config.strict
            )
        except Exception as exc:
            raise self._explain_failure(exc, dims) from None
        path = ctx.work_dir / "model.pt2"
        torch.export.save(ep, str(path))
        ctx.add_artifact(path, "exported_program")
        # Later steps run the saved program, loaded back, exactly as a user of the file would.
        loaded = torch.export.load(str(path)).module()
        ctx.details["graph_nodes"] = sum(1 for _ in ep.graph.nodes)
        return model.replace(
            module=loaded,
            format="exported_program",
            size_bytes=path.stat().st_size,
            metadata={**model.metadata, "exported_program": True, "pt2_path": str(path)},
        )

    @staticmethod
    def _explain_failure(exc: BaseException, dims: dict[str, tuple[int, int]]) -> Exception:
        from accel.errors import PassError
        from accel.passes._export_errors import (
            explain_export_failure,
            first_line,
            fixed_dims,
            is_data_dependent,
            user_frame,
        )

        fixed = fixed_dims(exc)
        if fixed:
            return PassError(
                f"torch_export: the model fixes dim(s) {', '.join(fixed)} to a constant while tracing, so they cannot "
                f"be dynamic. Add them to static_dims (static_dims: [{', '.join(fixed)}]), or set dynamic: false. "
                f"({first_line(exc)})"
            )
        if is_data_dependent(exc):
            return PassError(
                f"torch_export: the forward has data-dependent control flow{user_frame(exc)} (torch.export's guard "
                "on a value read from a tensor stopped it: a Python branch or size that depends on tensor values). "
                "Rewrite it with torch.cond / torch.where, or use torchscript with method: script, or compile "
                f"instead. ({type(exc).__name__}: {first_line(exc)})"
            )
        return PassError(f"torch_export: {explain_export_failure(exc)}")

    def to_script(self, config: TorchExportConfig) -> ScriptStep:
        from accel.models import calls
        from accel.passes._torch_helpers import prepared_args, source_of

        dynamic = "{n: (lo, hi) for n, (lo, hi, _) in DIMS.items()" + (
            f" if n not in {config.static_dims!r} and hi > lo}}"
            if config.static_dims
            else " if hi > lo}"
        )
        code = (
            f"export_dims = {dynamic if config.dynamic else '{}'}  # dims exported as dynamic: (min, max)\n"
            "# Dim names must be identifiers.\n"
            "dim_objs = {n: torch.export.Dim(''.join(c if c.isalnum() or c == '_' else '_' for c in n), min=lo, max=hi)\n"
            "            for n, (lo, hi) in export_dims.items()}\n"
            "shapes = tuple({axis: dim_objs[d] for axis, d in DYNAMIC_AXES.get(name, {}).items() if d in dim_objs}\n"
            "               for name in inputs)\n"
            "# torch.export specializes sizes 0 and 1: export on an example where the dynamic dims are >= 2.\n"
            "dims_now = {d: inputs[name].shape[axis] for name, axes in DYNAMIC_AXES.items() for axis, d in axes.items()}\n"
            "example = inputs\n"
            "if any(dims_now[n] < 2 for n in export_dims):\n"
            "    example = make_inputs(seed=SEED, dims={n: max(2, v) if n in export_dims else v for n, v in dims_now.items()})\n"
            "example = dict(zip(inputs, prepared_args(example, input_casts, device)))\n"
            "# Bound to forward's signature: *args wrappers nest, keyword-only parameters go by name.\n"
            "args, kwargs = bind_inputs(model, example)\n"
            "shapes = bind_dynamic_shapes(model, list(example), shapes) if export_dims else None\n"
            "ep = torch.export.export(model.eval(), args, kwargs=kwargs,\n"
            f"                         dynamic_shapes=shapes, strict={config.strict})\n"
            "torch.export.save(ep, str(step_dir / 'model.pt2'))\n"
            "# From here on the script runs the saved program, as the studio does.\n"
            "model = torch.export.load(str(step_dir / 'model.pt2')).module()\n"
        )
        return ScriptStep(
            code=code,
            helpers=source_of(
                prepared_args,
                calls.forward_signature,
                calls._exported_keywords,
                calls.bind_inputs,
                calls.bind_dynamic_shapes,
            ),
        )
