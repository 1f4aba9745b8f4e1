"""An .onnx file as a LoadedModel: its inputs, external data (only inside its folder),
size, content hash and parameter count."""

from __future__ import annotations

import hashlib
from pathlib import Path

from accel.errors import ModelLoadError
from accel.models.files import require_file
from accel.models.inputs import InputSpec
from accel.models.loaded import LoadedModel
from accel.runtimes.onnxruntime.onnx_io import check_external_data, spec_from_onnx


def load_onnx(path: Path, spec: InputSpec | None, source: str) -> LoadedModel:
    require_file(path)
    data_files = check_external_data(path)
    inferred = spec_from_onnx(path)
    if spec is None:
        spec = inferred
    elif [t.name for t in spec.inputs] != [t.name for t in inferred.inputs]:
        raise ModelLoadError(
            f"input spec names {spec.names} do not match the ONNX model's inputs {inferred.names}"
        )
    h = hashlib.sha256()
    size = 0
    for f in [path, *data_files]:
        size += f.stat().st_size
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    n_params = 0
    for init in proto.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        n_params += n
    return LoadedModel(
        source=source,
        kind="onnx",
        input_spec=spec,
        onnx_path=path,
        num_params=n_params,
        size_bytes=size,
        content_hash=h.hexdigest(),
        format="onnx",
        metadata={
            "opset": max(
                (o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=None
            )
        },
    )
