"""Memory-format passes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from accel.models.forms import COMPILED, EAGER, EXPORTED, SCRIPTED
from accel.passes.base import (
    STAGE_LAYOUT,
    Pass,
    PassConfig,
    PassContext,
    Requirements,
    ScriptStep,
    SearchSpec,
    register_pass,
)

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel


class ChannelsLastConfig(PassConfig):
    convert_inputs: bool = Field(
        True, description="also feed 4-D inputs in channels_last memory format"
    )


@register_pass
class ChannelsLast(Pass):
    name = "channels_last"
    search = SearchSpec(stage=STAGE_LAYOUT, when=("conv2d",))
    summary = "Store conv weights and activations as NHWC (channels_last); faster conv kernels on CPU and tensor cores."
    category = "layout"
    Config = ChannelsLastConfig
    requires = Requirements(
        model_kinds=("torch",),
        note="useful for models with 2-D convolutions",
        accepts=(EAGER, COMPILED, SCRIPTED, EXPORTED),
        keeps_layer_names=True,
    )

    def apply(
        self, model: LoadedModel, config: ChannelsLastConfig, ctx: PassContext
    ) -> LoadedModel:
        import torch

        self.preflight(model, config)
        module = model.module
        module = module.to(memory_format=torch.channels_last)
        return model.replace(module=module, channels_last_inputs=bool(config.convert_inputs))

    def preflight(self, model: LoadedModel, config: ChannelsLastConfig) -> None:
        import torch

        from accel.errors import NotApplicable

        module = model.module
        if isinstance(module, torch.nn.Module) and not any(
            isinstance(m, torch.nn.Conv2d) for m in module.modules()
        ):
            raise NotApplicable(
                "channels_last only helps models with 2-D convolutions, and this model has none; remove the step."
            )

    def to_script(self, config: ChannelsLastConfig) -> ScriptStep:
        code = "model = model.to(memory_format=torch.channels_last)\n"
        if config.convert_inputs:
            code += (
                "inputs = {k: v.contiguous(memory_format=torch.channels_last) if v.dim() == 4 else v\n"
                "          for k, v in inputs.items()}\n"
            )
        return ScriptStep(code=code)
