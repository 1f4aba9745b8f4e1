"""An OpenVINO IR served by Triton's OpenVINO backend (``backend: "openvino"``).

Triton's OpenVINO backend finds inputs and outputs by tensor name, so an IR with unnamed
tensors (a model converted from torch has unnamed outputs) is written with the names its
config uses: the spec's input names and ``OUTPUT__i``, as ``outputs`` reads them back."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accel.runtimes.openvino.ir import read_ir, weights_file


def ov_tensor_name(port: Any, fallback: str) -> str:
    """An OpenVINO port's tensor name; ``fallback`` for an unnamed one."""
    names = port.get_names()
    return port.get_any_name() if names else fallback


class ServedIR:
    platform = "openvino"
    config_field = "backend"
    file_name = "model.xml"
    batch_sweep = True

    def __init__(self, path: Path) -> None:
        import openvino as ov

        self.path = path
        self.compiled = ov.Core().compile_model(read_ir(path), "CPU")

    def input_names(self, spec: Any) -> list[str]:
        return [ov_tensor_name(t, n) for t, n in zip(self.compiled.inputs, spec.names)]

    def outputs(self, spec: Any, sample: Mapping[str, Any]) -> list[tuple[str, str, list[Any]]]:
        out = self.run(sample)
        names = [ov_tensor_name(o, f"OUTPUT__{i}") for i, o in enumerate(self.compiled.outputs)]
        return [
            (n, str(v.dtype).removeprefix("torch."), list(v.shape))
            for n, v in zip(names, out, strict=True)
        ]

    def run(self, sample: Mapping[str, Any]) -> list[Any]:
        res = self.compiled([v.numpy() for v in sample.values()])
        return [res[o] for o in self.compiled.outputs]

    def write(self, version_dir: Path, input_names: Sequence[str]) -> None:
        import openvino as ov

        model = read_ir(self.path)
        unnamed = [p for p in [*model.inputs, *model.outputs] if not p.get_names()]
        if unnamed:
            for p, n in zip(model.inputs, input_names):
                if not p.get_names():
                    p.get_tensor().set_names({n})
            for i, p in enumerate(model.outputs):
                if not p.get_names():
                    p.get_tensor().set_names({f"OUTPUT__{i}"})
            ov.save_model(model, str(version_dir / self.file_name), compress_to_fp16=False)
            return
        shutil.copy2(self.path, version_dir / self.file_name)
        shutil.copy2(weights_file(self.path), (version_dir / self.file_name).with_suffix(".bin"))
