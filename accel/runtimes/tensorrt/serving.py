"""A TensorRT plan served by Triton's ``tensorrt_plan`` backend.

A plan is built for one GPU and loads only there, so this machine cannot run it to read
its outputs: the deploy says so rather than guessing a config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accel.errors import AccelError

_ON_ITS_GPU = (
    "a TensorRT plan loads only on a CUDA GPU like the one it was built on: run "
    "`studio deploy` on that machine (this one has no CUDA)"
)


class ServedPlan:
    platform = "tensorrt_plan"
    config_field = "platform"
    file_name = "model.plan"
    batch_sweep = False

    def __init__(self, path: Path) -> None:
        self.path = path

    def input_names(self, spec: Any) -> list[str]:
        return list(spec.names)

    def outputs(self, spec: Any, sample: Mapping[str, Any]) -> list[tuple[str, str, list[Any]]]:
        raise AccelError(_ON_ITS_GPU)

    def run(self, sample: Mapping[str, Any]) -> list[Any]:
        raise AccelError(_ON_ITS_GPU)

    def write(self, version_dir: Path, input_names: Sequence[str]) -> None:
        import shutil

        shutil.copy2(self.path, version_dir / self.file_name)
