"""Read tensors from ``.npz`` and tensor-only ``.pt`` files (never unpickling code)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from accel.errors import DataError

if TYPE_CHECKING:
    import torch


def load_tensor_file(path: str | Path) -> dict[str, torch.Tensor]:
    """A mapping name -> tensor from an ``.npz`` or tensor-only ``.pt``/``.pth`` file."""
    import numpy as np
    import torch

    p = Path(path)
    if not p.is_file():
        raise DataError(f"data file {p} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".npz":
        try:
            with np.load(p, allow_pickle=False) as z:
                return {k: torch.from_numpy(np.array(z[k])) for k in z.files}
        except ValueError as exc:
            raise DataError(
                f"{p}: cannot read .npz ({exc}); object arrays are not allowed"
            ) from None
        except Exception as exc:
            raise DataError(f"{p}: not a valid .npz file ({exc})") from None
    if suffix in (".pt", ".pth", ".bin"):
        try:
            obj = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise DataError(
                f"{p}: cannot read as a tensor-only .pt file ({type(exc).__name__}: {str(exc).splitlines()[0]}). "
                "Save a dict of tensors with torch.save({'x': tensor, ...})."
            ) from None
        if isinstance(obj, torch.Tensor):
            return {"input": obj}
        if isinstance(obj, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in obj):
            return {f"input{i}": t for i, t in enumerate(obj)}
        if isinstance(obj, dict) and all(isinstance(t, torch.Tensor) for t in obj.values()):
            return {str(k): v for k, v in obj.items()}
        raise DataError(
            f"{p}: expected a tensor, a list of tensors or a dict of tensors, got {type(obj).__name__}"
        )
    raise DataError(f"{p}: unsupported data file type {suffix!r}; use .npz or a tensor-only .pt")
