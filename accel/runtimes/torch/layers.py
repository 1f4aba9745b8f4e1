"""Per-layer taps of torch models for per-layer parity (``accel.graph.layer_parity``).

Every submodule's output is captured under its module path through forward hooks; a flat
``ExportedProgram.module()`` (no submodules left) through an FX interpreter reading the
``nn_module_stack`` of its nodes. TorchScript modules take no hooks: they give no taps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _first_tensor(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, list | tuple):
        for v in x:
            t = _first_tensor(v)
            if t is not None:
                return t
    if isinstance(x, Mapping):
        for v in x.values():
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def torch_layer_outputs(
    module: Any, inputs: Mapping[str, Any], prepare: Any = None
) -> tuple[dict[str, Any], set[str]]:
    """Outputs of every submodule (first call), in completion order, and the names of
    modules that returned their input unchanged (Identity-like)."""
    import torch

    outs: dict[str, Any] = {}
    passthrough: set[str] = set()

    def hook(path: str):
        def fn(_m: Any, inp: Any, out: Any) -> None:
            if path in outs:
                return
            t = _first_tensor(out)
            if t is None:
                return
            if any(t is i for i in (inp if isinstance(inp, tuple) else (inp,))):
                passthrough.add(path)
            outs[path] = t.detach().cpu().clone()

        return fn

    handles = [m.register_forward_hook(hook(p)) for p, m in module.named_modules() if p]
    try:
        feed = prepare(inputs) if prepare else dict(inputs)
        with torch.inference_mode():
            module(*feed.values())
    finally:
        for h in handles:
            h.remove()
    return outs, passthrough


def fx_layer_outputs(gm: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Per-module outputs of a flat GraphModule (``ExportedProgram.module()``) whose nodes
    carry ``nn_module_stack``: the value of the last node of each module, in completion order."""
    import torch

    from accel.graph.model import ancestors

    last: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        stack = node.meta.get("nn_module_stack") or {}
        if not stack:
            continue
        entry = list(stack.values())[-1]
        path = entry[0] if isinstance(entry, tuple) else str(entry)
        for p in ancestors(path)[1:]:
            last.pop(p, None)  # re-insert: dict order becomes completion order
            last[p] = node.name
    wanted = set(last.values())
    captured: dict[str, Any] = {}

    class Capture(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            if n.name in wanted:
                t = _first_tensor(out)
                if t is not None:
                    captured[n.name] = t.detach().cpu().clone()
            return out

    with torch.inference_mode():
        Capture(gm).run(*inputs.values())
    return {p: captured[n] for p, n in last.items() if n in captured}


def is_script(model: Any) -> bool:
    import torch

    return isinstance(getattr(model, "module", model), torch.jit.ScriptModule)


def _is_flat_exported(module: Any) -> bool:
    import torch

    if not isinstance(module, torch.fx.GraphModule):
        return False
    return any(n.meta.get("nn_module_stack") for n in module.graph.nodes)


def torch_model_layer_outputs(
    model: Any, inputs: Mapping[str, Any]
) -> tuple[dict[str, Any], set[str]]:
    """Per-module outputs of a torch module or a torch-kind LoadedModel, and the paths of
    modules that returned their input unchanged."""
    prepare = getattr(model, "prepare_inputs", None)
    module = getattr(model, "module", model)
    # torch.compile wraps the eager module: compare its layers eagerly (compiled code has no
    # per-module boundaries to hook).
    module = getattr(module, "_orig_mod", module)
    if is_script(module):
        return {}, set()  # ScriptModules take no forward hooks; compare_layers says so
    if _is_flat_exported(module):
        feed = prepare(inputs) if prepare else dict(inputs)
        return fx_layer_outputs(module, feed), set()
    return torch_layer_outputs(module, inputs, prepare)
