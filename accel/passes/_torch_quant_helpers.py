"""Torch quantization building blocks shared by the quantization passes and the scripts
they export (their source is copied into the script, so they use only torch, torchao and
the standard library, and import those inside the function).
"""

# ruff: noqa: PLC0415 - imports live inside the functions so each one is self-contained in scripts

from __future__ import annotations

from accel.layer_patterns import layer_matches  # scripts get its source with select_layers
from accel.models.calls import (  # scripts get their source with the helpers that call them
    bind_dynamic_shapes,
    bind_inputs,
    call_module,
)


def select_layers(model, layer_types, exclude=()):
    """Names of the layers of ``layer_types`` to quantize, those kept in float, and the
    ``exclude`` patterns that matched nothing.

    A pattern matches a layer by type name ("Linear"), by exact name ("fc1"), as a prefix
    ("layers.0" covers "layers.0.ffn_in") or as a glob ("layers.*.attention.*"): the
    shared ``layer_matches``. The projections inside nn.MultiheadAttention
    are never listed.
    """
    import torch

    classes = tuple(getattr(torch.nn, t) for t in layer_types)

    def is_float(m):  # not quantized already (packed or tensor-subclass weights)
        params = list(m.parameters(recurse=False))
        return bool(params) and all(
            type(p.detach()) is torch.Tensor and p.is_floating_point() for p in params
        )

    # nn.MultiheadAttention hands its out_proj's weight to a functional kernel that takes no
    # quantized weight tensors (torch itself marks it NonDynamicallyQuantizableLinear).
    in_mha = {
        id(c)
        for m in model.modules()
        if isinstance(m, torch.nn.MultiheadAttention)
        for c in m.children()
    }
    layers = [
        (n, m)
        for n, m in model.named_modules()
        if n and isinstance(m, classes) and is_float(m) and id(m) not in in_mha
    ]
    keep, excluded, used = [], [], set()
    for name, module in layers:
        hit = [p for p in exclude if layer_matches(p, name, type(module).__name__)]
        used.update(hit)
        (excluded if hit else keep).append(name)
    return keep, excluded, [p for p in exclude if p not in used]


def called_as_modules(model, names, inputs):
    """``names`` without the layers one forward on ``inputs`` never calls as modules: a
    parent that reads a layer's weight itself (torchvision's Swin attention calls
    ``F.linear(x, self.qkv.weight)``) breaks once the layer is swapped for a dynamically
    quantized module, whose ``weight`` is a method."""
    import torch

    called = set()
    hooks = [
        model.get_submodule(n).register_forward_pre_hook(lambda m, a, n=n: called.add(n))
        for n in names
    ]
    try:
        with torch.no_grad():
            call_module(model, inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return [n for n in names if n in called]


def name_filter(names):
    """A torchao ``quantize_`` filter_fn that accepts exactly the modules called ``names``."""
    wanted = set(names)

    def filter_fn(module, fqn):
        return fqn in wanted

    return filter_fn


def export_for_quantization(model, example_inputs):
    """torch.export the model with every input dim left to the exporter (Dim.AUTO), so the
    quantized graph takes other batch sizes than the example's; returns the graph module.
    The inputs and their dynamic shapes are bound to the forward's signature (a
    ``forward(*args)`` wrapper takes a nested tuple, keyword-only parameters a dict)."""
    import torch
    from torch.export import Dim

    names = list(example_inputs)
    auto = [{i: Dim.AUTO for i in range(x.dim())} for x in example_inputs.values()]
    args, kwargs = bind_inputs(model, example_inputs)
    dynamic = bind_dynamic_shapes(model, names, auto)
    ep = torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=dynamic)
    graph = ep.module()
    # Outputs the forward computes but does not return (a wrapper that returns BERT's hidden
    # states leaves the pooler's Linear -> Tanh unused) stay in the graph, and the X86
    # quantizer's fusion annotation fails on such an output-less pattern (IndexError).
    if graph.graph.eliminate_dead_code():
        graph.recompile()
    return graph


def x86_quant_config(observer="histogram", is_qat=False):
    """X86InductorQuantizer's default int8 config (uint8 per-tensor activations, int8
    per-channel weights) with the activation observer chosen by name."""
    import dataclasses

    from torchao.quantization.pt2e import (
        MinMaxObserver,
        MovingAverageMinMaxObserver,
    )
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        get_default_x86_inductor_quantization_config,
    )

    config = get_default_x86_inductor_quantization_config(is_qat=is_qat)
    if is_qat or observer == "histogram":
        return config
    ctor = {"minmax": MinMaxObserver, "moving_average": MovingAverageMinMaxObserver}[observer]
    act = dataclasses.replace(
        config.input_activation, observer_or_fake_quant_ctr=ctor.with_args(eps=2**-12)
    )
    return dataclasses.replace(config, input_activation=act, output_activation=act)


def explicit_conv_padding(model):
    """Convolutions with padding "valid" or "same" export as ``aten.conv2d.padding``, which
    X86InductorQuantizer refuses ("conv2d is not an aten conv2d operator"; Hugging Face's
    EfficientNet): give them the same padding as numbers. A "same" whose total padding is odd
    (asymmetric) is left as it is."""
    import torch

    for m in model.modules():
        if not isinstance(m, torch.nn.modules.conv._ConvNd) or not isinstance(m.padding, str):
            continue
        if m.padding_mode != "zeros":
            continue  # the forward pads by itself and passes padding 0
        total = [d * (k - 1) for k, d in zip(m.kernel_size, m.dilation)]
        if m.padding == "valid":
            m.padding = tuple(0 for _ in total)
        elif not any(t % 2 for t in total):
            m.padding = tuple(t // 2 for t in total)


def drop_integer_annotations(model):
    """X86InductorQuantizer annotates binary ops whatever their dtype, and models compute
    integer tensors with them (Hugging Face position ids: ``cumsum(mask) * mask + pad``),
    which activation observers cannot take ("histogram_cpu not implemented for 'Long'"):
    integer inputs and outputs lose their annotation and stay as they are."""
    import torch

    def is_float(node):
        val = getattr(node, "meta", {}).get("val")
        return not isinstance(val, torch.Tensor) or val.dtype.is_floating_point

    for node in model.graph.nodes:
        ann = node.meta.get("quantization_annotation")
        if ann is None:
            continue
        for arg in [a for a in ann.input_qspec_map if not is_float(a)]:
            del ann.input_qspec_map[arg]
        if ann.output_qspec is not None and not is_float(node):
            ann.output_qspec = None


def split_repeated_calls(model, name_configs):
    """A module called more than once (torchvision's ResNet reuses one ReLU per block,
    ALBERT one layer for every depth) gives one source partition with several outputs, which
    X86InductorQuantizer refuses ("Input partition has more than one output node"). Each
    call's nodes get their own name (``relu@1``; torch.export already numbers the calls in
    the stack's keys), and ``name_configs`` (the quantizer's per-module-name configs, e.g.
    layers kept in float) cover the numbered names too. Returns a function that undoes both."""
    saved, added = [], []
    for node in model.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if not stack:
            continue
        key, (fqn, cls) = list(stack.items())[-1]
        if "@" not in key:
            continue
        alias = f"{fqn}@{key.rpartition('@')[2]}"
        saved.append((node, stack))
        node.meta["nn_module_stack"] = {**stack, key: (alias, cls)}
        if fqn in name_configs and alias not in name_configs:
            name_configs[alias] = name_configs[fqn]
            added.append(alias)

    def undo():
        for node, stack in saved:
            node.meta["nn_module_stack"] = stack
        for alias in added:
            name_configs.pop(alias, None)

    return undo


def with_annotation_fixes(quantizer):
    """``quantizer`` (X86InductorQuantizer) with ``split_repeated_calls`` around its
    annotation and ``drop_integer_annotations`` after it."""
    from torchao.quantization.pt2e.quantizer import Quantizer

    class Fixed(Quantizer):
        def transform_for_annotation(self, model):
            return quantizer.transform_for_annotation(model)

        def annotate(self, model):
            undo = split_repeated_calls(model, quantizer.module_name_qconfig)
            try:
                model = quantizer.annotate(model) or model
            finally:
                undo()
            drop_integer_annotations(model)
            return model

        def validate(self, model):
            return quantizer.validate(model)

        def prepare_obs_or_fq_callback(self, model, edge_or_node_to_obs_or_fq):
            return quantizer.prepare_obs_or_fq_callback(model, edge_or_node_to_obs_or_fq)

    return Fixed()


def pt2e_static_quantize(
    model, batches, observer="histogram", exclude_names=(), on_batch=None, example=None
):
    """Post-training static int8 quantization (PT2E): export, insert observers, calibrate
    on ``batches`` (dicts of inputs), convert to quantize/dequantize + float ops.

    ``example`` (a dict of inputs) is what the export traces; give one whose symbolic dims
    are at least 2, since torch.export fixes a dim of size 1 (the usual batch-1 calibration
    sample) and the quantized graph would then refuse other batch sizes."""
    import torch
    from torchao.quantization.pt2e import (
        allow_exported_model_train_eval,
        move_exported_model_to_eval,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import X86InductorQuantizer

    batches = list(batches)
    explicit_conv_padding(model)
    graph = export_for_quantization(model, example if example is not None else batches[0])
    quantizer = X86InductorQuantizer()
    quantizer.set_global(x86_quant_config(observer))
    for name in exclude_names:
        quantizer.set_module_name_qconfig(name, None)  # stays float
    prepared = prepare_pt2e(graph, with_annotation_fixes(quantizer))
    with torch.no_grad():
        for i, batch in enumerate(batches):
            call_module(prepared, batch)
            if on_batch is not None:
                on_batch(i, len(batches))
    quantized = convert_pt2e(prepared)
    # The float weights of quantized layers stay registered but unused; drop them.
    used = {node.target for node in quantized.graph.nodes if node.op == "get_attr"}
    for name, _ in [*quantized.named_parameters(), *quantized.named_buffers()]:
        if name not in used:
            owner, _, attr = name.rpartition(".")
            delattr(quantized.get_submodule(owner) if owner else quantized, attr)
    # Exported graphs refuse .eval() unless allowed; later steps and users call it.
    move_exported_model_to_eval(quantized)
    allow_exported_model_train_eval(quantized)
    for m in quantized.modules():  # the flag move_exported_model_to_eval leaves set
        m.training = False
    return quantized


def weight_only_config(bits, group_size=None, layout="intx"):
    """torchao config for int8 / int4 weight-only quantization.

    ``layout`` "tinygemm" is Int4WeightOnlyConfig (packed int4 kernels: CUDA / mslk);
    "intx" is IntxWeightOnlyConfig (int4 values in int8 storage, runs on any CPU).
    """
    import torch
    from torchao.quantization import (
        Int4WeightOnlyConfig,
        Int8WeightOnlyConfig,
        IntxWeightOnlyConfig,
    )
    from torchao.quantization.granularity import PerAxis, PerGroup

    if bits == 8:
        return Int8WeightOnlyConfig(group_size=group_size) if group_size else Int8WeightOnlyConfig()
    if layout == "tinygemm":
        return Int4WeightOnlyConfig(group_size=group_size or 128)
    granularity = PerGroup(group_size) if group_size else PerAxis(0)
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=granularity)


def qat_base_config(scheme, group_size=32):
    """The torchao quantization config a QAT run simulates during training and applies at the end."""
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig
    from torchao.quantization.granularity import PerAxis, PerGroup

    if scheme == "int8_dynamic_act_int4_weight":
        return Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(group_size)
        )
    if scheme == "int8_dynamic_act_int8_weight":
        return Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int8, weight_granularity=PerAxis(0)
        )
    if scheme == "int4_weight_only":
        return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group_size))
    raise ValueError(f"unknown QAT scheme {scheme!r}")


def first_output(outputs):
    """The first tensor of a model's outputs (the logits of a classifier)."""
    import torch

    while not isinstance(outputs, torch.Tensor):
        outputs = outputs[0] if isinstance(outputs, (list, tuple)) else next(iter(outputs.values()))
    return outputs


def qat_train(model, teacher, batches, steps, lr=1e-4, loss="distill", on_step=None):
    """Fine-tune a fake-quantized ``model`` for ``steps`` steps (Adam).

    ``batches(step)`` returns ``(inputs, labels)``. loss "distill": MSE to the float
    ``teacher``'s outputs on the same inputs (needs no labels); "cross_entropy": labels.
    """
    import torch
    import torch.nn.functional as F

    # BatchNorm statistics and dropout stay frozen (eval mode): fine-tuning adapts the
    # weights to quantization, not to the (often synthetic) data's statistics.
    model.eval()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    last = float("nan")
    for step in range(steps):
        inputs, labels = batches(step)
        out = first_output(call_module(model, inputs))
        if loss == "distill":
            with torch.no_grad():
                target = first_output(call_module(teacher, inputs))
            value = F.mse_loss(out, target)
        else:
            if labels is None:  # data labelled by a teacher model: the float model's argmax
                with torch.no_grad():
                    labels = first_output(call_module(teacher, inputs)).argmax(-1)
            value = F.cross_entropy(out, labels)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        last = float(value.detach())
        if on_step is not None:
            on_step(step, steps, last)
    return model, last


def heldout_mse(model, teacher, batches):
    """Mean squared error of ``model``'s first output against ``teacher``'s on ``batches``."""
    import torch

    total = 0.0
    with torch.no_grad():
        for inputs in batches:
            out = first_output(call_module(model, inputs)).float()
            ref = first_output(call_module(teacher, inputs)).float()
            total += float(torch.mean((out - ref) ** 2))
    return total / max(1, len(batches))
