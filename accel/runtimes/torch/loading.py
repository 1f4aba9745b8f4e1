"""After a torch model is loaded: its statistics, its device, and a test forward."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel.errors import InputSpecError, ModelLoadError

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel


def check_device(device: str) -> None:
    """Refuse a device this machine does not have, saying which it has."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelLoadError(
                f"device {device!r} asked for, but no CUDA GPU is available here; use device 'cpu'"
            )
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ModelLoadError(
                f"device {device!r} does not exist; this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif device != "cpu":
        raise ModelLoadError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N'")


def fill_torch_stats(lm: LoadedModel) -> None:
    from accel.models.sources import torch_stats

    lm.num_params, lm.size_bytes, lm.content_hash = torch_stats(lm.module)


def validate_forward(lm: LoadedModel) -> None:
    """Run the model once on inputs of its spec; a mismatch says which spec to give."""
    try:
        inputs = lm.example_inputs()
    except InputSpecError as exc:  # e.g. too large for the memory available
        raise ModelLoadError(f"cannot build inputs for the spec '{lm.input_spec}': {exc}") from None
    try:
        lm.forward(inputs)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelLoadError(
            f"the model does not accept inputs of the spec '{lm.input_spec}': {type(exc).__name__}: {first}. "
            "Give the right input spec (names, shapes, dtypes), e.g. --input 'x:float32[batch,3,224,224]'."
        ) from None
