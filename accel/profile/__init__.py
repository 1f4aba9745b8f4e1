"""Per-layer profiler: per-module times, FLOPs, memory, operator table, Chrome trace.

``profile_model(loaded)`` handles torch and ONNX models and returns a
``ModelProfile`` (plain dataclasses with ``to_dict``/``from_dict``).
Heavy imports (torch, onnxruntime) happen when a profile runs.

From a notebook::

    from accel.models import load_model
    from accel.profile import profile_model

    prof = profile_model(load_model("zoo:resnet"), iters=20, trace_path="resnet.json")
    [(r.name, r.type, r.self_ms, r.share, r.flops) for r in prof.top(10)]  # by self time
    prof.ops[:10]               # operators, each with the module it ran in

    # a decoder LM generating: prefill / decode per layer and group, the KV cache's growth
    from accel.profile import profile_generation_layers
    gen = profile_generation_layers(load_model("hf:llama_small"), {"prompt_tokens": 64})
    gen.groups(), gen.top(10, "decode"), gen.decode_coverage, gen.kv_bytes
    prof.overhead_ratio, prof.coverage   # the profiler's own cost, how well rows add up

    # any nn.Module, no LoadedModel needed
    from accel.profile import profile_module
    prof = profile_module(my_module, x, iters=10)
"""

from accel.profile.api import profile_generation_layers, profile_model
from accel.profile.generation import GenerationLayers, LayerSplit
from accel.profile.results import LayerProfile, ModelProfile, OpRow

__all__ = [
    "GenerationLayers",
    "LayerProfile",
    "LayerSplit",
    "ModelProfile",
    "OpRow",
    "profile_generation_layers",
    "profile_model",
    "profile_module",
]


def profile_module(module, *args, device: str = "cpu", **kwargs):
    """Profile ``module(*args)`` directly (a plain nn.Module, no LoadedModel needed; its
    runtime adopts it). ``kwargs``: the fields of ``accel.models.runtime.ProfileRequest``."""
    from accel.models.runtime import ProfileRequest, adopt

    inputs = {f"arg{i}": a for i, a in enumerate(args)}
    model = adopt(module, inputs)
    if model is None:
        raise TypeError(f"cannot profile a {type(module).__name__}; pass a torch module")
    return model.runtime.profile(model, inputs, ProfileRequest(device=device, **kwargs))
