"""Pruning passes: structured channel pruning (torch-pruning), unstructured magnitude
pruning (torch.nn.utils.prune) and 2:4 semi-structured sparsity (torchao, CUDA).

The pruning code itself lives in ``_prune_helpers`` and is copied verbatim into exported
scripts, so a script prunes exactly like the studio. Pruning is deterministic: importance
comes from the weights (or from calibration batches for Taylor), never from random draws.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.layer_patterns import PATTERN_HELP
from accel.models.forms import EAGER
from accel.passes.base import (
    SKIP,
    STAGE_PRUNE,
    FloatRange,
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

log = logging.getLogger(__name__)


def _helpers(*names: str) -> list[str]:
    from accel.passes import _prune_helpers as h

    return [inspect.getsource(getattr(h, n)) for n in names]


def _check_ignore(module: Any, patterns: list[str]) -> None:
    """A pattern that names no module is a typo: say so rather than prune what was meant to stay."""
    from accel.errors import PassError
    from accel.layer_patterns import match, unmatched_message

    layers = [(n, type(m).__name__) for n, m in module.named_modules() if n]
    _, bad = match(layers, patterns)
    if bad:
        names = [n for n, _ in layers]
        raise PassError(unmatched_message(bad, names, "ignore pattern(s)", "module of the model"))


def _refresh_stats(model: LoadedModel, module: object, **metadata: object) -> LoadedModel:
    from accel.models.sources import torch_stats

    n_params, size, digest = torch_stats(module)
    return model.replace(
        module=module,
        num_params=n_params,
        size_bytes=size,
        content_hash=digest,
        metadata={**model.metadata, **metadata},
    )


# -- structured channel pruning ----------------------------------------------------------------


class PruneChannelsConfig(PassConfig):
    ratio: float = Field(
        0.3,
        gt=0,
        lt=1,
        description="fraction of channels to remove (per layer, or overall with global_pruning)",
    )
    importance: Literal["l1", "l2", "bn_scale", "taylor"] = Field(
        "l2",
        description="channel importance: weight L1/L2 norm, BatchNorm scale, or Taylor (gradient x weight on calibration data)",
    )
    global_pruning: bool = Field(
        False,
        description="rank channels across all layers (uneven widths) instead of the same ratio in each layer",
    )
    iterative_steps: int = Field(
        1, ge=1, le=50, description="reach the ratio in this many pruning steps"
    )
    ignore: list[str] = Field(
        default_factory=list,
        description=f"layers whose output channels stay: {PATTERN_HELP}",
    )
    ignore_head: bool = Field(
        True,
        description="keep the classifier head (the last Linear) intact; embeddings are always kept",
    )
    prune_heads: bool = Field(
        False, description="attention: remove whole heads instead of shrinking every head"
    )
    round_to: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="keep channel counts a multiple of this (e.g. 16 for fast int8 kernels): "
        "each pruned layer keeps the nearest multiple, never fewer than this; layers no wider "
        "are not pruned",
    )
    importance_batches: int = Field(
        4, ge=1, description="calibration batches for Taylor importance"
    )
    finetune_steps: int = Field(
        0,
        ge=0,
        description="fine-tune steps after pruning (0: none); distils the unpruned model's outputs",
    )
    finetune_lr: float = Field(1e-3, gt=0, description="Adam learning rate for fine-tuning")
    finetune_batches: int = Field(
        8, ge=1, description="calibration batches to fine-tune on (cycled)"
    )


def _prune_and_check(
    module: Any,
    inputs: dict[str, Any],
    config: PruneChannelsConfig,
    batches: list[Any],
    ctx: PassContext,
    share: float,
) -> tuple[Any, dict[str, Any]]:
    """Prune with torch-pruning (errors that say what to ignore), then check that something
    was pruned and that the pruned model still runs. Returns the pruned module (a pruned copy
    when the residual width had to be kept) and torch-pruning's facts."""
    import torch

    from accel.errors import AccelError, NotApplicable, PassError
    from accel.passes import _prune_helpers as h

    def on_prune(i: int, n: int) -> None:
        ctx.check_cancelled()
        ctx.progress(share * i / n, f"pruning step {i}/{n}")

    try:
        with torch.enable_grad():
            module, facts = h.prune_channels_runnable(
                module,
                inputs,
                ratio=config.ratio,
                importance=config.importance,
                global_pruning=config.global_pruning,
                iterative_steps=config.iterative_steps,
                ignore=tuple(config.ignore),
                ignore_head=config.ignore_head,
                prune_heads=config.prune_heads,
                round_to=config.round_to,
                batches=batches[: config.importance_batches],
                on_step=on_prune,
            )
    except AccelError:
        raise
    except h.DependencyGraphError as exc:
        raise NotApplicable(f"prune_channels: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - torch-pruning fails in many ways on unusual graphs
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise PassError(
            f"torch-pruning could not prune this model: {type(exc).__name__}: {first}. Add the failing "
            "layers to `ignore` (module-name patterns) or use prune_unstructured."
        ) from None
    _check_pruned(module, inputs, facts)
    if facts.get("kept_residual_width"):
        ctx.warn(f"kept the residual (LayerNorm) width: {facts['kept_residual_width']}")
    if facts.get("round_to_skipped"):
        ctx.warn(facts["round_to_skipped"])
    return module, facts


def _check_pruned(module: Any, inputs: dict[str, Any], facts: dict[str, Any]) -> None:
    """Something was pruned, and the pruned model still runs."""
    import torch

    from accel.errors import PassError

    if not facts["pruned_channels"]:
        from accel.passes._prune_helpers import unhandled_weight_layers

        other = unhandled_weight_layers(module)
        if other:  # the cause: its layers are of types channel pruning does not take
            raise PassError(
                "nothing was pruned: this model's weight layers are of types channel pruning "
                f"does not take ({', '.join(f'{n} x{c}' for n, c in other.items())}); only "
                f"Linear and Conv layers are pruned (ignored: {facts['ignored_layers']}). Use "
                "quantization, or prune_unstructured."
            )
        raise PassError(
            f"nothing was pruned: every prunable layer is ignored or coupled to an ignored one "
            f"(ignored: {facts['ignored_layers']}). Recurrent layers and embeddings are always kept; "
            "try ignore_head: false or a model with Conv/Linear layers."
        )
    try:
        with torch.inference_mode():
            module(*inputs.values())
    except Exception as exc:  # noqa: BLE001
        raise PassError(
            f"the pruned model no longer runs ({type(exc).__name__}: {exc}); a layer reshapes with a fixed "
            "width. Add it to `ignore`, or make its forward use -1 / the layer's current size."
        ) from None


_HELDOUT_SEED = 30000  # held-out inputs for the fine-tuning check (never trained on)


def _finetune(
    module: Any,
    teacher: Any,
    config: PruneChannelsConfig,
    batches: list[Any],
    ctx: PassContext,
    share: float,
    module_inputs: Any,
) -> None:
    """Distil the pruned model towards the original (``finetune_steps`` steps), keeping the
    untuned weights when that matches the original worse on held-out inputs
    (``module_inputs(seed=...)``, seeds the training never sees)."""
    import torch

    from accel.passes import _prune_helpers as h

    def on_tune(i: int, n: int) -> None:
        ctx.check_cancelled()
        if i % max(1, n // 20) == 0 or i == n:
            ctx.progress(share + (0.95 - share) * i / n, f"fine-tuning {i}/{n}")

    heldout = [module_inputs(seed=_HELDOUT_SEED + i) for i in range(4)]
    with torch.enable_grad():
        loss, before, after = h.distill(
            module,
            teacher,
            batches[: config.finetune_batches],
            config.finetune_steps,
            config.finetune_lr,
            on_tune,
            heldout=heldout,
        )
    ctx.metrics.update(finetune_loss=loss, heldout_mse_untuned=before, heldout_mse_tuned=after)
    ctx.details["kept"] = "fine-tuned" if after <= before else "untuned"
    if after > before:
        ctx.warn(
            f"fine-tuning made the pruned model match the original worse on held-out inputs "
            f"(MSE {after:.3g} vs {before:.3g} untuned); kept the untuned weights. Try a lower "
            f"finetune_lr (now {config.finetune_lr:g}), more finetune_batches or real data."
        )


# The _prune_helpers functions an exported prune_channels step copies into its script.
_CHANNEL_SCRIPT_HELPERS = (
    "layer_matches",
    "count_flops",
    "prunable_layers_to_ignore",
    "output_norm_layers",
    "positive_int",
    "attention_projections",
    "attention_heads",
    "update_attention_attributes",
    "channel_attributes",
    "update_channel_attributes",
    "_taylor_gradients",
    "layer_widths",
    "DependencyGraphError",
    "aligned_width",
    "_aligned_pruner",
    "grouped_channels",
    "drop_grouped_round_to",
    "build_pruner",
    "channel_importance",
    "changed_widths",
    "prune_steps",
    "conv1d_as_linear",
    "split_qkv_layers",
    "prune_channels_tp",
    "prune_channels_runnable",
    "distill",
)


@register_pass
class PruneChannels(Pass):
    name = "prune_channels"
    search = SearchSpec(
        stage=STAGE_PRUNE,
        params={"ratio": FloatRange(0.1, 0.5)},
        # round_to 16: aligned widths run the int8 kernels faster per kept channel (ResNet-50
        # pruned by 0.45, OpenVINO + NNCF int8, 1 thread, AVX2: 27.3 -> 20.1 ms with more
        # parameters kept, 8.39 M against 8.22 M); none where attention heads are pruned
        # (torch-pruning rounds per head there: the pass would leave it out with a warning)
        fixed={"finetune_steps": 0, "round_to": 16},
        fixed_for_layers={"attention": {"round_to": None}},
        opt_in="prune",
    )
    summary = "Structured channel pruning (torch-pruning): physically removes channels, keeps residuals, BN and attention heads consistent."
    category = "prune"
    Config = PruneChannelsConfig
    requires = Requirements(
        model_kinds=("torch",),
        libraries=("torch_pruning",),
        note="eager nn.Module (not TorchScript)",
        accepts=(EAGER,),
        layer_lists={"ignore": SKIP},
        keeps_layer_names=True,
    )

    def preflight(self, model: LoadedModel, config: PruneChannelsConfig) -> None:
        """Shifted-window attention (Swin: a window shift and a relative-position bias table)
        sends torch-pruning's shape inference into deep recursion: on torchvision swin_t it
        took over 17 GB of memory before it was killed. Say so before any work."""
        import torch

        from accel.errors import NotApplicable

        module = model.module
        if not isinstance(module, torch.nn.Module):
            return
        shifted = [
            n
            for n, m in module.named_modules()
            if hasattr(m, "shift_size") and hasattr(m, "relative_position_bias_table")
        ] or [
            n
            for n, m in module.named_modules()
            if hasattr(m, "shift_size")
            and any(hasattr(c, "relative_position_bias_table") for c in m.modules())
        ]
        if shifted:
            raise NotApplicable(
                f"prune_channels: shifted-window attention ({shifted[0]}, Swin) is not supported: "
                "torch-pruning's dependency graph runs out of memory on it (over 17 GB for "
                "torchvision swin_t). Use prune_unstructured, or quantization, for this model."
            )

    def apply(
        self, model: LoadedModel, config: PruneChannelsConfig, ctx: PassContext
    ) -> LoadedModel:
        import copy

        import torch

        from accel.errors import PassError
        from accel.passes import _prune_helpers as h

        module = model.module
        _check_ignore(module, config.ignore)
        if isinstance(module, torch.jit.ScriptModule) or model.metadata.get("exported_program"):
            raise PassError(
                "prune_channels needs an eager nn.Module; load the model from Python code (zoo:, pkg.mod:factory) instead of TorchScript/ExportedProgram."
            )
        inputs = model.prepare_inputs(ctx.inputs)
        params_before = sum(p.numel() for p in module.parameters())
        flops_before = h.count_flops(module, inputs)
        need_data = config.importance == "taylor" or config.finetune_steps > 0
        n_batches = max(config.importance_batches, config.finetune_batches) if need_data else 0
        batches = (
            [model.prepare_inputs(b) for b in ctx.calibration_batches(n_batches)]
            if need_data
            else []
        )
        teacher = copy.deepcopy(module) if config.finetune_steps else None
        share = 0.6 if config.finetune_steps else 0.9

        module, facts = _prune_and_check(module, inputs, config, batches, ctx, share)
        if config.finetune_steps:
            _finetune(
                module,
                teacher,
                config,
                batches,
                ctx,
                share,
                lambda seed: model.prepare_inputs(model.input_spec.sample(seed=seed)),
            )
        module.eval()
        params_after = sum(p.numel() for p in module.parameters())
        flops_after = h.count_flops(module, inputs)
        ctx.metrics.update(
            params_before=float(params_before),
            params_after=float(params_after),
            flops_before=float(flops_before),
            flops_after=float(flops_after),
            params_ratio=params_after / params_before if params_before else None,
            flops_ratio=flops_after / flops_before if flops_before else None,
        )
        ctx.details.update({"backend": "torch_pruning", **facts})
        return _refresh_stats(
            model, module, pruned={"ratio": config.ratio, "importance": config.importance}
        )

    def to_script(self, config: PruneChannelsConfig) -> ScriptStep:
        helpers = _helpers(*_CHANNEL_SCRIPT_HELPERS)
        need_data = config.importance == "taylor" or config.finetune_steps > 0
        n_batches = max(config.importance_batches, config.finetune_batches)
        lines = [
            "params_before, flops_before = sum(p.numel() for p in model.parameters()), count_flops(model, inputs)",
            f"batches = calibration_batches({n_batches})" if need_data else "batches = []",
        ]
        if config.finetune_steps:
            lines.append("teacher = copy.deepcopy(model)  # the unpruned model, for distillation")
        lines += [
            "with torch.enable_grad():",
            "    model, facts = prune_channels_runnable(",
            "        model, inputs,",
            f"        ratio={config.ratio!r}, importance={config.importance!r}, global_pruning={config.global_pruning!r},",
            f"        iterative_steps={config.iterative_steps!r}, ignore={tuple(config.ignore)!r}, ignore_head={config.ignore_head!r},",
            f"        prune_heads={config.prune_heads!r}, round_to={config.round_to!r}, batches=batches[:{config.importance_batches}],",
            "    )",
        ]
        if config.finetune_steps:
            lines += [
                "with torch.enable_grad():",
                "    heldout = [",
                "        {k: (x.to(input_casts[k]) if k in input_casts and x.is_floating_point() else x).to(device)",
                f"         for k, x in make_inputs(seed={_HELDOUT_SEED} + i).items()}}",
                "        for i in range(4)",
                "    ]  # the untuned weights stay when fine-tuning matches the original worse on these",
                f"    distill(model, teacher, batches[:{config.finetune_batches}], steps={config.finetune_steps}, lr={config.finetune_lr!r}, heldout=heldout)",
            ]
        lines += [
            "model.eval()",
            "params_after, flops_after = sum(p.numel() for p in model.parameters()), count_flops(model, inputs)",
            'print(f"prune_channels: params {params_before} -> {params_after}, FLOPs {flops_before} -> {flops_after}")',
        ]
        imports = ["import copy", "import torch_pruning as tp"]
        return ScriptStep(code="\n".join(lines) + "\n", imports=imports, helpers=helpers)


# -- unstructured magnitude pruning --------------------------------------------------------------


class PruneUnstructuredConfig(PassConfig):
    amount: float = Field(0.5, gt=0, lt=1, description="fraction of weights set to zero")
    global_pruning: bool = Field(
        True, description="rank weights across all layers (True) or prune each layer by `amount`"
    )
    ignore: list[str] = Field(
        default_factory=list, description=f"layers left dense: {PATTERN_HELP}"
    )
    ignore_head: bool = Field(True, description="leave the classifier head (the last Linear) dense")


@register_pass
class PruneUnstructured(Pass):
    name = "prune_unstructured"
    summary = "Magnitude pruning of individual weights (torch.nn.utils.prune), made permanent. Shrinks compressed size, not latency."
    category = "prune"
    Config = PruneUnstructuredConfig
    requires = Requirements(
        model_kinds=("torch",),
        note="dense kernels do not get faster from zeros",
        accepts=(EAGER,),
        layer_lists={"ignore": SKIP},
        keeps_layer_names=True,
    )

    def apply(
        self, model: LoadedModel, config: PruneUnstructuredConfig, ctx: PassContext
    ) -> LoadedModel:
        import torch

        from accel.errors import PassError
        from accel.passes import _prune_helpers as h

        module = model.module
        _check_ignore(module, config.ignore)
        if isinstance(module, torch.jit.ScriptModule):
            raise PassError("prune_unstructured needs an eager nn.Module, not TorchScript.")
        sparsity, layers = h.prune_unstructured_magnitude(
            module, config.amount, config.global_pruning, tuple(config.ignore), config.ignore_head
        )
        if not layers:
            raise PassError(
                "no Linear/Conv layer left to prune: every one is ignored; loosen `ignore`."
            )
        total = sum(p.numel() for p in module.parameters())
        zeros = sum(int((p == 0).sum()) for p in module.parameters())
        ctx.metrics["sparsity"] = sparsity
        ctx.metrics["model_sparsity"] = zeros / total if total else 0.0
        ctx.details.update({"backend": "torch.nn.utils.prune", "pruned_layers": layers})
        ctx.warn(
            f"{sparsity:.0%} of the pruned weights are now zero, but dense kernels do not run faster on zeros: "
            "expect the same latency. The gain is in compressed size, or with sparse kernels (sparsity_2_4 on GPU)."
        )
        return _refresh_stats(model, module, pruned={"unstructured": config.amount})

    def to_script(self, config: PruneUnstructuredConfig) -> ScriptStep:
        code = (
            "sparsity, _ = prune_unstructured_magnitude(\n"
            f"    model, amount={config.amount!r}, global_pruning={config.global_pruning!r},\n"
            f"    ignore={tuple(config.ignore)!r}, ignore_head={config.ignore_head!r},\n"
            ")\n"
            'print(f"prune_unstructured: {sparsity:.1%} of the pruned weights are zero (dense kernels: same speed)")\n'
        )
        return ScriptStep(
            code=code,
            helpers=_helpers(
                "layer_matches", "bake_reparametrized", "prune_unstructured_magnitude"
            ),
        )


# -- 2:4 semi-structured sparsity ----------------------------------------------------------------


class Sparsity24Config(PassConfig):
    dtype: Literal["float16", "bfloat16"] = Field(
        "float16", description="semi-structured sparse kernels need half precision"
    )
    ignore: list[str] = Field(
        default_factory=list, description=f"Linear layers left dense: {PATTERN_HELP}"
    )
    ignore_head: bool = Field(True, description="leave the classifier head (the last Linear) dense")


@register_pass
class Sparsity24(Pass):
    name = "sparsity_2_4"
    summary = "2:4 semi-structured sparsity on Linear weights (torchao, cuSPARSELt): two of every four weights zeroed, sparse tensor-core kernels."
    category = "prune"
    Config = Sparsity24Config
    requires = Requirements(
        model_kinds=("torch",),
        cuda=True,
        libraries=("torchao",),
        note="NVIDIA GPU with sparse tensor cores (Ampere or newer)",
        accepts=(EAGER,),
        layer_lists={"ignore": SKIP},
        keeps_layer_names=True,
    )

    def apply(self, model: LoadedModel, config: Sparsity24Config, ctx: PassContext) -> LoadedModel:
        import torch

        from accel.errors import PassError
        from accel.passes import _prune_helpers as h

        if not str(model.device).startswith("cuda") or not torch.cuda.is_available():
            raise PassError(
                "sparsity_2_4 needs a CUDA GPU (semi-structured sparse kernels exist only there); set the recipe's "
                "device to cuda:0 on a machine with an NVIDIA GPU, or use prune_unstructured / prune_channels on CPU."
            )
        from torchao.sparsity import semi_sparse_weight, sparsify_

        dtype = getattr(torch, config.dtype)
        module = model.module.to(dtype)
        _check_ignore(module, config.ignore)
        names = set(h.mask_2_4(module, tuple(config.ignore), config.ignore_head))
        if not names:
            raise PassError(
                "no Linear layer fits 2:4 sparse kernels (needs out % 32 == 0 and in % 64 == 0), or all are ignored."
            )
        # Stats of the masked dense weights: sparse tensor subclasses cannot be hashed byte-wise.
        stats = _refresh_stats(model, module, sparsity="2:4")
        sparsify_(module, semi_sparse_weight(), filter_fn=lambda m, fqn: fqn in names)
        ctx.details.update({"backend": "torchao.sparsity", "sparse_layers": sorted(names)})
        casts = {n: config.dtype for n in model.input_spec.names}
        return stats.replace(module=module, input_casts={**model.input_casts, **casts})

    def to_script(self, config: Sparsity24Config) -> ScriptStep:
        code = (
            f"model = model.to(torch.{config.dtype})\n"
            f"sparse_names = set(mask_2_4(model, ignore={tuple(config.ignore)!r}, ignore_head={config.ignore_head!r}))\n"
            "sparsify_(model, semi_sparse_weight(), filter_fn=lambda m, fqn: fqn in sparse_names)\n"
            f"input_casts = {{name: torch.{config.dtype} for name in inputs}}\n"
        )
        return ScriptStep(
            code=code,
            imports=["from torchao.sparsity import semi_sparse_weight, sparsify_"],
            helpers=_helpers("layer_matches", "mask_2_4"),
        )
