"""An .onnx file served by Triton's ONNX Runtime backend (``onnxruntime_onnx``): tensor
names and dtypes read from the session, the file copied with its external data."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


class ServedOnnx:
    platform = "onnxruntime_onnx"
    config_field = "platform"
    file_name = "model.onnx"
    batch_sweep = True

    def __init__(self, path: Path, threads: int | None) -> None:
        import onnxruntime as ort

        from accel.runtimes.onnxruntime.onnx_io import check_external_data

        self.path = path
        self.data_files = check_external_data(path)  # refuses data outside the folder
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        if threads:
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def input_names(self, spec: Any) -> list[str]:
        return [i.name for i in self.session.get_inputs()]

    def outputs(self, spec: Any, sample: Mapping[str, Any]) -> list[tuple[str, str, list[Any]]]:
        return [
            (o.name, _ORT_DTYPES.get(o.type, "float32"), list(o.shape))
            for o in self.session.get_outputs()
        ]

    def run(self, sample: Mapping[str, Any]) -> list[Any]:
        feeds = {k: v.numpy() if hasattr(v, "numpy") else v for k, v in sample.items()}
        names = {i.name for i in self.session.get_inputs()}
        return self.session.run(None, {k: v for k, v in feeds.items() if k in names})

    def write(self, version_dir: Path, input_names: Sequence[str]) -> None:
        """The file as model.onnx and its external data files under their own names (the
        model names them relative to its folder)."""
        shutil.copy2(self.path, version_dir / self.file_name)
        for f in self.data_files:
            shutil.copy2(f, version_dir / f.name)
