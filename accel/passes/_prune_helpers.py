"""Plain-library pruning code shared by the pruning passes and their exported scripts.

``to_script`` copies the source text of these functions into the exported script, so the
studio and the script prune, fine-tune and measure with the same code. Keep them
self-contained: only torch and torch_pruning, imported inside the functions, and the
pattern matcher ``layer_matches`` (accel.layer_patterns; scripts get its source too).
"""

from __future__ import annotations

from accel.layer_patterns import layer_matches


def count_flops(model, inputs):
    """Floating-point operations of one forward pass (torch's FLOP counter: 2 per multiply-add).

    The counter knows no CPU attention kernel, so scaled_dot_product_attention is counted here.
    """
    import math

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    def sdpa_flops(q_shape, k_shape, v_shape, *args, **kwargs):
        batch = math.prod(q_shape[:-2])
        return 2 * batch * q_shape[-2] * k_shape[-2] * (q_shape[-1] + v_shape[-1])

    aten = torch.ops.aten
    names = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu")
    counter = FlopCounterMode(
        display=False,
        custom_mapping={getattr(aten, n): sdpa_flops for n in names if hasattr(aten, n)},
    )
    with torch.no_grad(), counter:
        model(*inputs.values())
    return int(counter.get_total_flops())


def prunable_layers_to_ignore(model, patterns=(), ignore_head=True, keep=()):
    """Modules whose output channels stay: the classifier head (last Linear), embeddings,
    recurrent layers (torch-pruning cannot prune them consistently), names matching patterns
    and the modules in ``keep``."""
    import torch

    ignored, names = [], []
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    for name, module in model.named_modules():
        kept = isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag, torch.nn.RNNBase))
        kept = kept or any(m is module for m in keep)
        kept = kept or any(layer_matches(p, name, type(module).__name__) for p in patterns)
        kept = kept or (ignore_head and bool(linears) and module is linears[-1][1])
        if kept and name:
            ignored.append(module)
            names.append(name)
    return ignored, names


def output_norm_layers(model, inputs, linears=True):
    """Leaf modules (norms, activations, convs, and with ``linears`` Linear layers) whose
    outputs are the model's outputs: their channels must stay, or the pruned model's outputs
    change shape (a Hugging Face encoder returns the residual stream straight from a
    LayerNorm, an image decoder its image straight from a conv, DETR its class logits from a
    Linear that is not the last one)."""
    import weakref

    import torch

    produced = {}  # id -> (module, weak reference): a freed tensor's id can come back

    def hook(module, args, out):
        if torch.is_tensor(out):
            produced[id(out)] = (module, weakref.ref(out))

    def tensors(out):
        if torch.is_tensor(out):
            return [out]
        if isinstance(out, dict):
            out = list(out.values())
        if isinstance(out, (tuple, list)):
            return [t for o in out for t in tensors(o)]
        return []

    skip = () if linears else (torch.nn.Linear,)
    leaves = [m for m in model.modules() if not list(m.children()) and not isinstance(m, skip)]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with torch.no_grad():
            outputs = tensors(model(*inputs.values()))
    finally:
        for handle in handles:
            handle.remove()
    layers = []
    for t in outputs:
        module, ref = produced.get(id(t), (None, None))
        if module is not None and ref() is t and module not in layers:
            layers.append(module)
    return layers


def attention_heads(model):
    """Attention blocks and the head count of each of their q/k/v projections.

    A block is a module with q/k/v Linear children (``q_proj``/``k_proj``/``v_proj``,
    ``query``/``key``/``value`` or T5's ``q``/``k``/``v``) whose head count is an attribute
    (``num_heads``, ``num_attention_heads``, ``n_heads``) or in its Hugging Face ``config``; grouped-query attention gives
    k/v fewer heads (``num_key_value_heads``). A module with an int ``num_heads`` and other
    Linear children (a fused qkv) counts too. Returns ({Linear: heads}, [block facts]); a
    block with rotary embeddings or grouped-query attention must lose whole heads only.
    """
    import inspect

    import torch

    heads, blocks = {}, []
    for module in model.modules():
        if isinstance(module, torch.nn.MultiheadAttention):
            continue
        n_q, n_kv, projs = attention_projections(module)
        if n_q is None or not projs or n_q % n_kv:
            continue
        q, k = next(iter(projs)), list(projs)[min(1, len(projs) - 1)]
        head_dim = (
            positive_int(module, "head_dim", "attention_head_size", "key_value_proj_dim")
            or q.out_features // n_q
        )
        rotary = "position_embeddings" in inspect.signature(module.forward).parameters
        rotary = rotary or hasattr(module, "rotary_emb")
        heads.update(projs)
        blocks.append(
            {
                "block": module,
                "q": q,
                "k": k,
                "n_q": n_q,
                "n_kv": n_kv,
                "head_dim": head_dim,
                "widths": (q.out_features, k.out_features),
                "whole_heads": rotary or n_kv != n_q,
            }
        )
    return heads, blocks


def positive_int(obj, *names):
    """The first of ``obj``'s attributes ``names`` that is a positive int, else None."""
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def attention_projections(module):
    """(query heads, key/value heads, {projection Linear: its heads}) of a module that may
    be an attention block (see ``attention_heads``); heads None when it is not one."""
    import torch

    qkv_names = (
        ("q_proj", "k_proj", "v_proj"),
        ("query", "key", "value"),
        ("q", "k", "v"),
        ("to_q", "to_k", "to_v"),  # diffusers' Attention
    )
    out_names = {"out", "out_proj", "o_proj", "o", "dense", "proj"}
    children = dict(module.named_children())
    linear = {n: m for n, m in children.items() if isinstance(m, torch.nn.Linear)}
    config = getattr(module, "config", None)
    qkv = next(([linear[n] for n in ns] for ns in qkv_names if all(n in linear for n in ns)), None)
    if qkv is None:
        n_q = positive_int(module, "num_heads")
        return n_q, n_q, {m: n_q for n, m in linear.items() if n not in out_names}
    n_q = positive_int(
        module, "num_heads", "num_attention_heads", "n_heads", "heads"
    ) or positive_int(config, "num_attention_heads")
    n_kv = positive_int(module, "num_key_value_heads") or positive_int(
        config, "num_key_value_heads"
    )
    n_kv = n_kv or n_q
    return n_q, n_kv, {qkv[0]: n_q, qkv[1]: n_kv, qkv[2]: n_kv}


def update_attention_attributes(blocks, whole_heads):
    """After pruning: set the head counts and sizes the blocks' forward reshapes with."""
    for b in blocks:
        q_width, k_width = b["q"].out_features, b["k"].out_features
        n_q, n_kv, head_dim = b["n_q"], b["n_kv"], b["head_dim"]
        if whole_heads:
            n_q = max(1, round(n_q * q_width / b["widths"][0]))
            n_kv = max(1, round(n_kv * k_width / b["widths"][1]))
        else:
            head_dim = max(1, round(head_dim * q_width / b["widths"][0]))
        values = {
            "num_heads": n_q,
            "num_attention_heads": n_q,
            "n_heads": n_q,
            "num_key_value_heads": n_kv,
            "num_key_value_groups": n_q // n_kv,
            "head_dim": head_dim,
            "attention_head_size": head_dim,
            "key_value_proj_dim": head_dim,
            "all_head_size": q_width,
            "inner_dim": q_width,
            "inner_kv_dim": k_width,  # diffusers' Attention
            "heads": n_q,
            "attn_dim": n_q * head_dim,  # timm's Attention reshapes its output with it
        }
        for attr, value in values.items():
            current = getattr(b["block"], attr, None)
            if isinstance(current, int) and not isinstance(current, bool):
                setattr(b["block"], attr, value)


def channel_attributes(model):
    """Channel counts a block keeps as int attributes and checks or reshapes with (diffusers'
    Upsample2D: ``assert x.shape[1] == self.channels``), each tied to the direct child
    conv/linear whose input (or output) width it equals: [(block, attr, child, side)]."""
    import torch

    layers = (torch.nn.Linear, torch.nn.modules.conv._ConvNd)
    tied = []
    for module in model.modules():
        if type(module).__module__.startswith("torch.nn"):
            continue
        children = [m for m in module.children() if isinstance(m, layers)]
        for attr in ("channels", "in_channels", "out_channels"):
            value = getattr(module, attr, None)
            if not isinstance(value, int) or isinstance(value, bool):
                continue
            for child in children:
                width_in = getattr(child, "in_channels", getattr(child, "in_features", None))
                width_out = getattr(child, "out_channels", getattr(child, "out_features", None))
                side = "in" if value == width_in else "out" if value == width_out else None
                if side is not None:
                    tied.append((module, attr, child, side))
                    break
    return tied


def update_channel_attributes(tied):
    """After pruning: each tied attribute takes its child's new width."""
    for module, attr, child, side in tied:
        if side == "in":
            width = getattr(child, "in_channels", getattr(child, "in_features", None))
        else:
            width = getattr(child, "out_channels", getattr(child, "out_features", None))
        setattr(module, attr, width)


def _taylor_gradients(model, batches):
    """Accumulate gradients for Taylor importance; pseudo-labels (the model's own argmax) need no labels."""
    import torch.nn.functional as F

    model.zero_grad()
    for batch in batches:
        out = model(*batch.values())
        out = next(iter(out.values())) if isinstance(out, dict) else out  # Hugging Face outputs
        out = out[0] if isinstance(out, (tuple, list)) else out
        out = out.float()
        loss = F.cross_entropy(out, out.argmax(-1)) if out.dim() == 2 else out.pow(2).mean()
        loss.backward()  # gradients stay on the parameters for the pruner to read


def layer_widths(model):
    """Output channels of every Conv / Linear layer, by name."""
    import torch

    return {
        n: m.out_channels if isinstance(m, torch.nn.modules.conv._ConvNd) else m.out_features
        for n, m in model.named_modules()
        if isinstance(m, (torch.nn.modules.conv._ConvNd, torch.nn.Linear))
    }


class DependencyGraphError(ValueError):
    """torch-pruning cannot follow this model's channel counts (see prune_channels_tp)."""


def aligned_width(current, kept, round_to):
    """The channels a layer of ``current`` keeps when ``kept`` were asked for and widths are
    rounded to a multiple of ``round_to``: the nearest multiple (a half rounds up), never
    below ``round_to`` and never above ``current``; a layer no wider than ``round_to`` keeps
    all its channels (it cannot be aligned, and rounding would empty it)."""
    if current <= round_to:
        return current
    nearest = (2 * kept + round_to) // (2 * round_to) * round_to
    return min(current, max(round_to, nearest))


def _aligned_pruner(tp):
    """torch-pruning's MetaPruner whose ``round_to`` uses ``aligned_width``. Its own rounds
    the kept channels down, so a layer narrower than ``round_to`` after pruning is emptied
    (16 channels pruned by 30 % at round_to 16 kept 0)."""

    class AlignedPruner(tp.pruner.MetaPruner):
        def _round_to(self, n_pruned, current_channels, round_to):
            return current_channels - aligned_width(
                current_channels, current_channels - n_pruned, round_to
            )

    return AlignedPruner


def grouped_channels(pruner):
    """Whether torch-pruning prunes some layer's channels per group (attention heads, grouped
    convolutions): its ``round_to`` then counts a group's channels against the whole
    layer's width and can remove far more than asked."""
    groups = {**pruner.in_channel_groups, **pruner.out_channel_groups}
    return any(g > 1 for g in groups.values())


def drop_grouped_round_to(pruner):
    """Turn the pruner's ``round_to`` off where it prunes channels per group
    (``grouped_channels``); the reason, or None when it stays on (or was off)."""
    if not pruner.round_to or not grouped_channels(pruner):
        return None
    round_to, pruner.round_to = pruner.round_to, None
    return (
        f"round_to {round_to} not applied: this model prunes channels per group (attention "
        "heads or grouped convolutions), which torch-pruning cannot round"
    )


def build_pruner(model, example_inputs, **kwargs):
    """torch-pruning's MetaPruner, stopped at its shape inference's recursion-limit warning.

    Past that limit (long chains of reshapes and concatenations, as in detection heads) the
    group search that the constructor runs next has no time or memory bound (torchvision
    ssdlite320: over 20 minutes; swin_t: over 17 GB). Over the 19 corpus models only those
    two hit the limit."""
    import warnings

    import torch_pruning as tp

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Maximum recursive depth", category=UserWarning)
        try:
            # fresh group tables: torch-pruning's defaults are shared dicts that keep the
            # grouped layers of every model pruned before in this process
            groups = {"in_channel_groups": {}, "out_channel_groups": {}}
            return _aligned_pruner(tp)(model, example_inputs, **{**groups, **kwargs})
        except UserWarning:
            raise DependencyGraphError(
                "torch-pruning cannot follow the channel counts of this model: its shape "
                "inference hit its recursion limit on long chains of reshapes and "
                "concatenations, and its group search would not finish. Use prune_unstructured "
                "or quantization for this model, or prune its backbone as a model of its own."
            ) from None


def channel_importance(name):
    """torch-pruning's importance criterion called ``name`` (l1, l2, bn_scale, taylor)."""
    import torch_pruning as tp

    return {
        "l1": lambda: tp.importance.MagnitudeImportance(p=1),
        "l2": lambda: tp.importance.MagnitudeImportance(p=2),
        "bn_scale": lambda: tp.importance.BNScaleImportance(),
        "taylor": lambda: tp.importance.TaylorImportance(),
    }[name]()


def changed_widths(before, after):
    """{layer: [width before, width after]} of the layers whose width changed."""
    return {n: [before[n], c] for n, c in after.items() if before.get(n) != c}


def prune_steps(model, pruner, steps, taylor, batches, on_step):
    """Run the pruner's steps (Taylor importance needs fresh gradients before each)."""
    for step in range(steps):
        if taylor:
            _taylor_gradients(model, batches)
        pruner.step()
        if on_step is not None:
            on_step(step + 1, steps)
    model.zero_grad(set_to_none=True)


def conv1d_as_linear(model):
    """Replace each transformers Conv1D (GPT-2's attention and MLP layers: ``x @ weight + bias``
    with ``weight`` of shape (in, out)) by the nn.Linear that computes the same, so that channel
    pruning can take it. Returns the replaced layers' names."""
    import torch

    names = []
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ != "Conv1D" or not hasattr(child, "nf"):
                continue
            weight = child.weight
            linear = torch.nn.Linear(
                weight.shape[0],
                weight.shape[1],
                bias=child.bias is not None,
                device=weight.device,
                dtype=weight.dtype,
            )
            with torch.no_grad():
                linear.weight.copy_(weight.t())
                if child.bias is not None:
                    linear.bias.copy_(child.bias)
            linear.train(child.training)
            setattr(parent, name, linear)
            names.append(f"{parent_name}.{name}" if parent_name else name)
    return names


def split_qkv_layers(model):
    """Linear layers whose output a block splits into query, key and value by a fixed size
    (GPT-2's ``c_attn`` with ``split_size``). torch-pruning maps the attention output's
    channels back through scaled_dot_product_attention onto every output of the split (the
    out-projection's 64 inputs got 192 indices: IndexError), so these keep their outputs."""
    import torch

    return [
        m.c_attn
        for m in model.modules()
        if isinstance(getattr(m, "c_attn", None), torch.nn.Linear)
        and isinstance(getattr(m, "split_size", None), int)
    ]


def prune_channels_tp(
    model,
    inputs,
    ratio=0.3,
    importance="l2",
    global_pruning=False,
    iterative_steps=1,
    ignore=(),
    ignore_head=True,
    prune_heads=False,
    round_to=None,
    batches=(),
    on_step=None,
    keep=(),
):
    """Structured channel pruning with torch-pruning's dependency graph (channels are removed):
    coupled layers (residual adds, concatenations, BatchNorm, attention q/k/v/out) are pruned
    together; attention blocks keep whole heads (prune_heads=True removes heads instead of
    shrinking each head); modules in ``keep`` keep their output channels, as does every layer
    coupled to them. Returns facts: ignored layers, changed widths, why round_to was off."""
    model.eval()
    as_linear = conv1d_as_linear(model)
    outputs = output_norm_layers(model, inputs, linears=ignore_head)
    ignored, ignored_names = prunable_layers_to_ignore(
        model, ignore, ignore_head, [*outputs, *keep, *split_qkv_layers(model)]
    )
    heads, blocks = attention_heads(model)
    tied = channel_attributes(model)
    # Rotary embeddings need the full head size, grouped-query attention whole kv groups.
    whole_heads = prune_heads or any(b["whole_heads"] for b in blocks)
    channels_before = layer_widths(model)
    pruner = build_pruner(
        model,
        tuple(inputs.values()),
        importance=channel_importance(importance),
        global_pruning=global_pruning,
        pruning_ratio=ratio,
        max_pruning_ratio=max(ratio, 0.9),  # global ranking must not empty a layer
        iterative_steps=iterative_steps,
        ignored_layers=ignored,
        round_to=round_to,
        num_heads=heads,
        prune_num_heads=whole_heads,
        prune_head_dims=not whole_heads,
        head_pruning_ratio=ratio if whole_heads else 0.0,
    )
    round_to_skipped = drop_grouped_round_to(pruner)
    prune_steps(model, pruner, iterative_steps, importance == "taylor", batches, on_step)
    # Attention blocks reshape with their head count / size: keep them in line with the new widths.
    update_attention_attributes(blocks, whole_heads)
    update_channel_attributes(tied)
    return {
        "ignored_layers": ignored_names,
        "pruned_channels": changed_widths(channels_before, layer_widths(model)),
        "attention_blocks": len(blocks),
        "attention_pruning": ("whole heads" if whole_heads else "head size") if blocks else None,
        "conv1d_as_linear": len(as_linear),
        "round_to_skipped": round_to_skipped,  # why round_to was not applied (None: it was)
    }


def prune_channels_runnable(model, inputs, **kwargs):
    """``prune_channels_tp``, and when the pruned model no longer runs while it has LayerNorms,
    the same pruning again on an unpruned copy with every LayerNorm's width kept: a
    transformer's residual stream is often reshaped with a width fixed at build time
    (torchvision's ViT: ``x.reshape(n, self.hidden_dim, -1)``). MLP widths and heads are still
    pruned. Returns (model, facts); the caller checks that the returned model runs."""
    import copy

    import torch

    has_norms = any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    unpruned = copy.deepcopy(model) if has_norms else None
    facts = prune_channels_tp(model, inputs, **kwargs)
    try:
        with torch.inference_mode():
            model(*inputs.values())
        return model, facts
    except Exception as exc:  # noqa: BLE001 - retried once, else the caller reports it
        if unpruned is None:
            return model, facts
        why = f"{type(exc).__name__}: {str(exc)[:200]}"
    norms = [m for m in unpruned.modules() if isinstance(m, torch.nn.LayerNorm)]
    facts = prune_channels_tp(unpruned, inputs, keep=norms, **kwargs)
    facts["kept_residual_width"] = f"pruning the residual width broke the model ({why})"
    return unpruned, facts


def distill(student, teacher, batches, steps, lr=1e-3, on_step=None, heldout=()):
    """Fine-tune the pruned model to match the unpruned model's outputs (MSE on outputs).

    Runs in eval mode so BatchNorm statistics stay as they were; batches cycle in order.
    With ``heldout`` batches (inputs the training never sees) the student's weights from
    before training come back when training made it match the teacher worse on them.
    Returns (last loss, held-out MSE before, held-out MSE after); the MSEs are None without
    ``heldout``.
    """
    import copy

    import torch
    import torch.nn.functional as F

    def first(out):
        out = next(iter(out.values())) if isinstance(out, dict) else out  # Hugging Face outputs
        return out[0] if isinstance(out, (tuple, list)) else out

    def heldout_mse():
        with torch.no_grad():
            errors = [
                F.mse_loss(first(student(*b.values())).float(), first(teacher(*b.values())).float())
                for b in heldout
            ]
        return float(sum(errors) / len(errors)) if errors else None

    teacher.eval()
    student.eval()
    before, saved = heldout_mse(), copy.deepcopy(student.state_dict()) if heldout else None
    with torch.no_grad():
        targets = [first(teacher(*b.values())).float() for b in batches]
    optimizer = torch.optim.Adam([p for p in student.parameters() if p.requires_grad], lr=lr)
    loss_value = 0.0
    for step in range(steps):
        i = step % len(batches)
        optimizer.zero_grad()
        loss = F.mse_loss(first(student(*batches[i].values())).float(), targets[i])
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        if on_step is not None:
            on_step(step + 1, steps)
    student.zero_grad(set_to_none=True)
    after = heldout_mse()
    if saved is not None and after > before:
        student.load_state_dict(saved)
    return loss_value, before, after


def unhandled_weight_layers(model):
    """Class names (and counts) of leaf layers with a 2-D or larger weight that channel
    pruning does not take (not Linear, Conv, recurrent, embedding or a norm), e.g. GPT-2's
    transformers Conv1D: why a model may have nothing to prune."""
    import torch

    known = (
        torch.nn.Linear,
        torch.nn.modules.conv._ConvNd,
        torch.nn.RNNBase,
        torch.nn.Embedding,
        torch.nn.EmbeddingBag,
    )
    counts = {}
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if list(module.children()) or isinstance(module, known) or not torch.is_tensor(weight):
            continue
        if weight.dim() >= 2:
            counts[type(module).__name__] = counts.get(type(module).__name__, 0) + 1
    return counts


def bake_reparametrized(module, name):
    """A weight computed from others (weight norm, spectral norm, a torch parametrization, as
    wav2vec2's positional conv has) made a plain Parameter of its current value: same outputs,
    and torch.nn.utils.prune can then mask it in place."""
    from torch.nn.utils import parametrize

    if parametrize.is_parametrized(module, name):
        # A deep copy shares its parametrized class with the original, and the removal deletes
        # the weight's property from that class: the module gets its own class first.
        cls = module.__class__
        own = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
        module.__class__ = type(cls.__name__, cls.__bases__, own)
        parametrize.remove_parametrizations(module, name, leave_parametrized=True)
    for key, hook in list(module._forward_pre_hooks.items()):
        if getattr(hook, "name", None) == name and hasattr(hook, "remove"):  # older hook API
            hook.remove(module)
            del module._forward_pre_hooks[key]


def prune_unstructured_magnitude(
    model, amount=0.5, global_pruning=True, ignore=(), ignore_head=True
):
    """Zero the smallest-magnitude weights of Linear/Conv/RNN layers (torch.nn.utils.prune), made permanent.

    Returns (sparsity over the pruned weights, names of the pruned layers).
    """
    import torch
    from torch.nn.utils import prune

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    targets, params = [], []
    for name, module in model.named_modules():
        # transformers' Conv1D (GPT-2) is a Linear with its weight stored transposed.
        conv1d = type(module).__name__ == "Conv1D" and hasattr(module, "nf")
        if isinstance(module, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)) or conv1d:
            weights = ["weight"]
        elif isinstance(module, torch.nn.RNNBase):
            weights = [w for w in module._flat_weights_names if w.startswith("weight")]
        else:
            continue
        if any(layer_matches(p, name, type(module).__name__) for p in ignore):
            continue
        if ignore_head and linears and module is linears[-1]:
            continue
        targets.append(name)
        params += [(module, w) for w in weights]
    if not params:
        return 0.0, []
    for m, p in params:
        bake_reparametrized(m, p)
    if global_pruning:
        prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=amount)
    else:
        for m, p in params:
            prune.l1_unstructured(m, p, amount=amount)
    for m, p in params:
        prune.remove(m, p)  # bake the mask into the weight: a plain dense module again
    zeros = sum(int((getattr(m, w) == 0).sum()) for m, w in params)
    total = sum(getattr(m, w).numel() for m, w in params)
    return zeros / total, targets


def mask_2_4(model, ignore=(), ignore_head=True):
    """Keep the 2 largest-magnitude weights in every group of 4 along the input dimension of Linear layers."""
    import torch

    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    done = []
    with torch.no_grad():
        for name, m in linears:
            if any(layer_matches(p, name, "Linear") for p in ignore) or (
                ignore_head and m is linears[-1][1]
            ):
                continue
            w = m.weight
            if w.shape[1] % 4 or w.shape[0] % 32 or w.shape[1] % 64:
                continue  # semi-structured kernels need these multiples
            groups = w.reshape(-1, 4)
            keep = groups.abs().topk(2, dim=1).indices
            mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(1, keep, True)
            w.copy_((groups * mask).reshape_as(w))
            done.append(name)
    return done
