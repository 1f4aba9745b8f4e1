"""A TorchScript file served by Triton's libtorch backend (``pytorch_libtorch``).

Triton names the tensors of a TorchScript model by position: ``INPUT__0``, ``OUTPUT__0``."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class ServedTorchScript:
    platform = "pytorch_libtorch"
    config_field = "platform"
    file_name = "model.pt"
    batch_sweep = True

    def __init__(self, path: Path) -> None:
        import torch

        self.path = path
        self.module = torch.jit.load(str(path), map_location="cpu").eval()

    def input_names(self, spec: Any) -> list[str]:
        return [f"INPUT__{i}" for i in range(len(spec.inputs))]

    def outputs(self, spec: Any, sample: Mapping[str, Any]) -> list[tuple[str, str, list[Any]]]:
        out = self.run(sample)
        return [
            (f"OUTPUT__{i}", str(v.dtype).removeprefix("torch."), list(v.shape))
            for i, v in enumerate(out)
        ]

    def run(self, sample: Mapping[str, Any]) -> list[Any]:
        import torch

        with torch.inference_mode():
            out = self.module(*sample.values())
        return list(out) if isinstance(out, tuple | list) else [out]

    def write(self, version_dir: Path, input_names: Sequence[str]) -> None:
        shutil.copy2(self.path, version_dir / self.file_name)
