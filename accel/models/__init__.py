"""Model sources, input specifications and the built-in demo models."""

from accel.errors import InputSpecError, ModelLoadError
from accel.models.inputs import Dim, InputSpec, TensorSpec
from accel.models.loaded import LoadedModel
from accel.models.sources import load_model, torch_stats

__all__ = [
    "Dim",
    "InputSpec",
    "InputSpecError",
    "LoadedModel",
    "ModelLoadError",
    "TensorSpec",
    "ZOO",
    "load_model",
    "torch_stats",
]


def __getattr__(name: str):
    if name == "ZOO":  # importing the zoo imports torch; keep `import accel.models` light
        from accel.models.zoo import ZOO

        return ZOO
    raise AttributeError(name)
