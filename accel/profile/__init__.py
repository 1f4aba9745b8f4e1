"""Per-layer profiler: per-module times, FLOPs, memory, operator table, Chrome trace.

``profile_model(loaded)`` handles torch and ONNX models and returns a
``ModelProfile`` (plain dataclasses with ``to_dict``/``from_dict``).
Heavy imports (torch, onnxruntime) happen when a profile runs.
"""

from accel.profile.api import profile_model
from accel.profile.results import LayerProfile, ModelProfile, OpRow

__all__ = ["LayerProfile", "ModelProfile", "OpRow", "profile_model", "profile_module"]


def profile_module(module, *args, device: str = "cpu", **kwargs):
    """Profile ``module(*args)`` directly (a plain nn.Module, no LoadedModel needed)."""
    import torch

    from accel.profile.torch_profile import profile_torch

    with torch.inference_mode():
        return profile_torch(module, lambda: module(*args), device=device, **kwargs)
