"""CUDA graphs pass: capture the forward once, replay it from static input buffers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from accel.models.forms import COMPILED, CUDA_GRAPH, EAGER, EXPORTED, SCRIPTED
from accel.passes.base import Pass, PassConfig, PassContext, Requirements, ScriptStep, register_pass

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel


class CudaGraphsConfig(PassConfig):
    warmup: int = Field(
        3, ge=1, le=100, description="eager iterations on a side stream before capture"
    )


@register_pass
class CudaGraphs(Pass):
    name = "cuda_graphs"
    summary = "Capture the forward as a CUDA graph for the run's input shapes and replay it (removes launch overhead)."
    category = "runtime"
    Config = CudaGraphsConfig
    requires = Requirements(
        model_kinds=("torch",),
        cuda=True,
        note="static shapes: other input shapes fall back to eager",
        accepts=(EAGER, COMPILED, SCRIPTED, EXPORTED),
        produces=CUDA_GRAPH,
    )

    def apply(self, model: LoadedModel, config: CudaGraphsConfig, ctx: PassContext) -> LoadedModel:
        import torch

        from accel.errors import PassError
        from accel.passes._torch_helpers import CUDAGraphRunner

        args = list(model.prepare_inputs(ctx.inputs).values())
        if not all(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            raise PassError(
                "cuda_graphs needs the model and its inputs on the GPU; set the recipe's device to cuda."
            )
        ctx.progress(0.1, "capturing the CUDA graph")
        try:
            runner = CUDAGraphRunner(model.module, args, warmup=config.warmup)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PassError(
                f"CUDA graph capture failed: {type(exc).__name__}: {first}. The forward must not sync with the CPU "
                "(.item(), printing tensors, data-dependent shapes) or allocate outside torch's caching allocator."
            ) from None
        ctx.details["captured_shapes"] = {k: list(v.shape) for k, v in ctx.inputs.items()}
        return model.replace(module=runner, metadata={**model.metadata, "cuda_graphs": True})

    def to_script(self, config: CudaGraphsConfig) -> ScriptStep:
        from accel.passes._torch_helpers import CUDAGraphRunner, prepared_args, source_of

        code = (
            "# Capture once for these input shapes; run() then copies inputs into static buffers and replays.\n"
            f"model = CUDAGraphRunner(model, prepared_args(inputs, input_casts, device), warmup={config.warmup})\n"
        )
        return ScriptStep(code=code, helpers=source_of(CUDAGraphRunner, prepared_args))
