"""Fold BatchNorm into the Conv / Linear layer before it (inference)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel.models.forms import EAGER, EXPORTED
from accel.passes.base import (
    STAGE_FOLD,
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


class FoldBatchNormConfig(PassConfig):
    pass


def _nothing_folded(module: Any, bns: list[str]) -> str:
    """Why no BatchNorm was folded: the check that excluded them."""
    import torch

    plain = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
    own_forward = sorted(
        {
            type(module.get_submodule(n)).__name__
            for n in bns
            if type(module.get_submodule(n)) not in plain
            and type(module.get_submodule(n)).forward not in {b.forward for b in plain}
        }
    )
    if own_forward and all(type(module.get_submodule(n)) not in plain for n in bns):
        return (
            f"fold_batchnorm found {len(bns)} BatchNorm layer(s), all of type "
            f"{', '.join(own_forward)}: a BatchNorm subclass with its own forward, which folding "
            "into the conv would drop (timm's BatchNormAct layers fold: their drop and act stay); "
            "the check 'the norm layer is a plain BatchNorm or a known norm-act layer' failed for "
            "every one. Remove the step."
        )
    return (
        f"fold_batchnorm found {len(bns)} BatchNorm layer(s) but none reading only the output "
        f"of a Conv/Linear it could absorb (e.g. {bns[0]}; traced with torch.fx, then "
        "torch.export); remove the step."
    )


@register_pass
class FoldBatchNorm(Pass):
    name = "fold_batchnorm"
    search = SearchSpec(stage=STAGE_FOLD, when=("batchnorm",))
    summary = "Fuse each BatchNorm into the Conv (or Linear + BatchNorm1d) before it; same outputs, fewer ops."
    category = "compile"
    Config = FoldBatchNormConfig
    requires = Requirements(
        model_kinds=("torch",),
        note="for models with Conv + BatchNorm (inference only)",
        accepts=(EAGER, EXPORTED),
        keeps_layer_names=True,  # a folded BatchNorm stays as an nn.Identity of its name
    )

    def apply(
        self, model: LoadedModel, config: FoldBatchNormConfig, ctx: PassContext
    ) -> LoadedModel:
        import torch

        from accel.errors import PassError
        from accel.models.sources import torch_stats
        from accel.passes._torch_helpers import fold_batchnorm

        module = model.module
        if isinstance(module, torch.jit.ScriptModule) or type(module).__name__ == "OptimizedModule":
            raise PassError(
                "fold_batchnorm needs a plain nn.Module; put it before torchscript / compile steps."
            )
        self.preflight(model, config)
        bns = [
            n
            for n, m in module.named_modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
        ]
        # Example inputs let the helper follow the data flow through torch.export when
        # torch.fx cannot trace the model (most Hugging Face models).
        example_args = list(model.prepare_inputs(ctx.inputs).values())
        folded = fold_batchnorm(module, example_args)
        left = [
            n
            for n, m in module.named_modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
        ]
        ctx.details["folded"] = len(folded)
        ctx.details["pairs"] = [f"{a} + {b}" for a, b in folded]
        ctx.metrics["batchnorm_folded"] = float(len(folded))
        if not folded:
            raise PassError(_nothing_folded(module, bns))
        if left:
            ctx.details["not_folded"] = left
            ctx.warn(
                f"{len(left)} BatchNorm layer(s) not folded (no single Conv/Linear feeding them): {', '.join(left[:5])}"
            )
        n_params, size, digest = torch_stats(module)
        return model.replace(
            module=module, num_params=n_params, size_bytes=size, content_hash=digest
        )

    def preflight(self, model: LoadedModel, config: FoldBatchNormConfig) -> None:
        import torch

        from accel.errors import NotApplicable

        module = model.module
        if module is None or not isinstance(module, torch.nn.Module):
            return
        if not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules()):
            raise NotApplicable(
                "fold_batchnorm: the model has no BatchNorm layers to fold; remove the step."
            )

    def to_script(self, config: FoldBatchNormConfig) -> ScriptStep:
        from accel.passes._torch_helpers import (
            _after_norm,
            _is_fx_leaf,
            conv_bn_pairs,
            conv_bn_pairs_from_export,
            conv_bn_pairs_from_fx,
            fold_batchnorm,
            prepared_args,
            source_of,
        )

        code = (
            "folded = fold_batchnorm(model, prepared_args(inputs, input_casts, device))\n"
            "print(f'    folded {len(folded)} BatchNorm layers')\n"
        )
        return ScriptStep(
            code=code,
            imports=["import torch.fx"],
            helpers=source_of(
                conv_bn_pairs_from_export,
                _is_fx_leaf,
                _after_norm,
                conv_bn_pairs_from_fx,
                conv_bn_pairs,
                fold_batchnorm,
                prepared_args,
            ),
        )
