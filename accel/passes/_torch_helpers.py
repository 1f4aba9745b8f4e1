"""Torch building blocks shared by the torch passes and by the scripts they export.

Every class and function here is written to be copied verbatim into an exported script
(``inspect.getsource``): it uses only ``torch``, ``nn`` and names defined in this module,
so the studio and the script run exactly the same code. Not scanned as a pass module
(leading underscore); imported inside ``apply`` because it imports torch.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from accel.layer_patterns import layer_matches  # scripts get its source with to_low_precision


class KeepFloat32(nn.Module):
    """Runs the wrapped layer in float32 inside a low-precision model: casts its floating
    inputs up and its floating outputs back (to the inputs' dtype, else ``dtype``)."""

    def __init__(self, module: nn.Module, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.module = module.float()
        self.dtype = dtype

    def forward(self, *args, **kwargs):
        floats = [a for a in args if torch.is_tensor(a) and a.is_floating_point()]
        dtype = floats[0].dtype if floats else self.dtype

        def cast(v, to):
            return v.to(to) if torch.is_tensor(v) and v.is_floating_point() else v

        out = self.module(
            *[cast(a, torch.float32) for a in args],
            **{k: cast(v, torch.float32) for k, v in kwargs.items()},
        )
        if isinstance(out, (tuple, list)):
            return type(out)(cast(v, dtype) for v in out)
        return cast(out, dtype)


def to_low_precision(model, dtype, keep_norm_fp32=True, keep_last_fp32=False, keep=()):
    """Convert ``model``'s weights (and so its compute) to ``dtype`` in place.

    Normalization layers (BatchNorm, LayerNorm, GroupNorm, InstanceNorm, RMSNorm), the last
    layer with weights and/or the layers the ``keep`` patterns select (``layer_matches``)
    stay in float32, wrapped in KeepFloat32. Returns the names of the layers kept in float32.
    """
    norm_types = [
        nn.modules.batchnorm._BatchNorm,
        nn.LayerNorm,
        nn.GroupNorm,
        nn.modules.instancenorm._InstanceNorm,
    ]
    if hasattr(nn, "RMSNorm"):
        norm_types.append(nn.RMSNorm)
    keep_names = []
    if keep_norm_fp32:
        keep_names += [
            name for name, m in model.named_modules() if name and isinstance(m, tuple(norm_types))
        ]
    if keep_last_fp32:
        # The last leaf layer with its own weights, in registration order (the classifier head
        # of the usual model).
        leaves = [
            name
            for name, m in model.named_modules()
            if name and not list(m.children()) and any(True for _ in m.parameters(recurse=False))
        ]
        if leaves and leaves[-1] not in keep_names:
            keep_names.append(leaves[-1])
    keep_names += [
        name
        for name, m in model.named_modules()
        if any(layer_matches(p, name, type(m).__name__) for p in keep)
    ]
    # A layer inside another kept layer is already float32.
    keep_names = list(dict.fromkeys(keep_names))
    keep_names = [n for n in keep_names if not any(n.startswith(k + ".") for k in keep_names)]
    model.to(dtype)
    for name in keep_names:
        model.set_submodule(name, KeepFloat32(model.get_submodule(name), dtype))
    return keep_names


class AutocastForward(nn.Module):
    """Runs the wrapped model under torch.autocast (mixed precision); weights stay float32."""

    def __init__(self, module: nn.Module, device_type: str, dtype: torch.dtype):
        super().__init__()
        self.module = module
        self.device_type = device_type
        self.dtype = dtype

    def forward(self, *args):
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            return self.module(*args)


def conv_bn_pairs_from_export(model, example_args):
    """(layer, batchnorm) module names where the BatchNorm reads only that layer's output.

    Data flow from a torch.export (non-strict) graph: each conv/linear and batch_norm op
    carries the module it ran in (``nn_module_stack``), so pairs are found across submodules
    (models that keep conv and norm as separate attributes of a block). A module called more
    than once, or a layer output that anything else reads, is left alone.
    """
    ep = torch.export.export(model, tuple(example_args), strict=False)
    producing = ("aten.conv1d", "aten.conv2d", "aten.conv3d", "aten.convolution", "aten.linear")
    norms = ("aten.batch_norm", "aten._native_batch_norm_legit_no_training")

    def owner(node):
        stack = node.meta.get("nn_module_stack") or {}
        return list(stack.values())[-1][0] if stack else None

    calls = {}
    for node in ep.graph.nodes:
        if node.op == "call_function" and str(node.target).startswith(producing + norms):
            name = owner(node)
            calls[name] = calls.get(name, 0) + 1
    pairs = []
    for node in ep.graph.nodes:
        if node.op != "call_function" or not str(node.target).startswith(norms):
            continue
        src = node.args[0] if node.args else None
        if not (
            isinstance(src, torch.fx.Node)
            and src.op == "call_function"
            and str(src.target).startswith(producing)
            and len(src.users) == 1
        ):
            continue
        layer_name, bn_name = owner(src), owner(node)
        if layer_name and bn_name and calls[layer_name] == 1 and calls[bn_name] == 1:
            pairs.append((layer_name, bn_name))
    return pairs


def conv_bn_pairs_from_fx(model, modules, example_args=None):
    """(layer, batchnorm) names from a torch.fx trace (a layer used once whose output feeds
    nothing but the BatchNorm), plus norm-act layers fx traces through, found in the export
    graph; None when fx cannot trace the model."""
    pairs = []
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:
        return None
    calls = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    for node in graph.nodes:
        if node.op != "call_module" or not isinstance(
            modules.get(node.target), nn.modules.batchnorm._BatchNorm
        ):
            continue
        src = node.args[0] if node.args else None
        if (
            isinstance(src, torch.fx.Node)
            and src.op == "call_module"
            and len(src.users) == 1
            and calls[src.target] == 1
            and calls[node.target] == 1
        ):
            pairs.append((src.target, node.target))
    # BatchNorm subclasses that fx traces through (timm's BatchNormAct2d) are no call_module
    # nodes: find their producers in the export graph.
    traced_through = any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) and not _is_fx_leaf(m)
        for m in modules.values()
    )
    if traced_through and example_args is not None:
        try:
            with torch.no_grad():
                found = conv_bn_pairs_from_export(model, example_args)
        except Exception:
            found = []
        pairs += [p for p in found if p not in pairs]
    return pairs


def conv_bn_pairs(model, modules, example_args=None):
    """(layer, batchnorm) name pairs: from fx, else torch.export, else nn.Sequential order."""
    pairs = conv_bn_pairs_from_fx(model, modules, example_args)
    if pairs is not None:
        return pairs
    if example_args is not None:
        try:
            with torch.no_grad():
                return conv_bn_pairs_from_export(model, example_args)
        except Exception:
            pass
    pairs = []
    for name, seq in model.named_modules():
        if isinstance(seq, nn.Sequential):
            names = [f"{name}.{n}" if name else n for n, _ in seq.named_children()]
            pairs += list(zip(names, names[1:]))
    return pairs


def fold_batchnorm(model, example_args=None):
    """Fold every BatchNorm that directly follows a Conv (or a Linear, for BatchNorm1d) into it.

    Data flow comes from a torch.fx trace; for a model fx cannot trace (most Hugging Face
    models), from a torch.export graph of ``example_args`` (conv_bn_pairs_from_export);
    without example inputs, or when export fails too, from consecutive layers inside
    nn.Sequential. The folded layer replaces the conv/linear in the original module, the
    BatchNorm becomes nn.Identity. Inference only (uses the running statistics). Returns the
    list of folded (layer, batchnorm) names.
    """
    from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

    model.eval()
    modules = dict(model.named_modules())
    pairs = conv_bn_pairs(model, modules, example_args)
    folded = []
    for layer_name, bn_name in pairs:
        layer, bn = modules.get(layer_name), modules.get(bn_name)
        if not isinstance(bn, nn.modules.batchnorm._BatchNorm) or not bn.track_running_stats:
            continue
        # Subclasses count when they keep the base forward (e.g. a depthwise Conv2d subclass).
        conv_bn = [
            (nn.Conv1d, nn.BatchNorm1d),
            (nn.Conv2d, nn.BatchNorm2d),
            (nn.Conv3d, nn.BatchNorm3d),
        ]
        # A norm-act layer (timm's BatchNormAct2d: norm, then self.drop, then self.act) folds
        # too; what its forward adds after the norm stays in its place.
        after = _after_norm(bn)
        kind = next(
            (c for c, b in conv_bn if isinstance(layer, c) and (type(bn) is b or after)), None
        )
        if (
            kind is not None
            and type(layer).forward is kind.forward
            and layer.out_channels == bn.num_features
        ):
            fused = fuse_conv_bn_eval(layer, bn)
        elif (
            isinstance(layer, nn.Linear)
            and type(layer).forward is nn.Linear.forward
            and type(bn) is nn.BatchNorm1d
            and layer.out_features == bn.num_features
        ):
            fused = fuse_linear_bn_eval(layer, bn)
        else:
            continue
        model.set_submodule(layer_name, fused)
        model.set_submodule(bn_name, after or nn.Identity())
        folded.append((layer_name, bn_name))
    return folded


def _is_fx_leaf(module):
    """torch.fx keeps torch.nn's own modules as calls; it traces into any other."""
    return type(module).__module__.startswith("torch.nn")


def _after_norm(bn):
    """What a norm-act layer applies after its BatchNorm, as one module (timm's BatchNormAct
    layers: ``drop`` then ``act``), or None for any other BatchNorm."""
    plain = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
    if type(bn) in plain or not all(
        isinstance(getattr(bn, a, None), nn.Module) for a in ("drop", "act")
    ):
        return None
    if type(bn).__name__ not in ("BatchNormAct2d", "BatchNormAct1d", "BatchNormAct3d"):
        return None
    return nn.Sequential(bn.drop, bn.act)


class CUDAGraphRunner(nn.Module):
    """Replays one CUDA graph captured for fixed input shapes from static input buffers.

    Inputs of another shape or dtype run the wrapped module eagerly.
    """

    def __init__(self, module: nn.Module, example_args, warmup: int = 3):
        super().__init__()
        self.module = module
        with torch.no_grad():
            self.static_args = [a.detach().clone() for a in example_args]
            # Warm up on a side stream (cuBLAS/cuDNN workspaces, lazy init) before capture.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(warmup):
                    module(*self.static_args)
            torch.cuda.current_stream().wait_stream(stream)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = module(*self.static_args)

    def forward(self, *args):
        same = len(args) == len(self.static_args) and all(
            a.shape == s.shape and a.dtype == s.dtype and a.device == s.device
            for a, s in zip(args, self.static_args)
        )
        if not same:
            return self.module(*args)
        for s, a in zip(self.static_args, args):
            s.copy_(a)
        self.graph.replay()
        # The graph overwrites its output buffers on the next replay: hand out copies.
        return torch.utils._pytree.tree_map(
            lambda t: t.clone() if isinstance(t, torch.Tensor) else t, self.static_out
        )


def prepared_args(inputs, input_casts, device):
    """The model's positional arguments: inputs cast by ``input_casts`` and moved to ``device``."""
    args = []
    for name, x in inputs.items():
        if name in input_casts and x.is_floating_point():
            x = x.to(input_casts[name])
        args.append(x.to(device))
    return args


def source_of(*objs) -> list[str]:
    """Source text of helpers above, for ScriptStep.helpers."""
    return [inspect.getsource(o) for o in objs]
