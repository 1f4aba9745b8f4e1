"""OpenVINO IR files (.xml + .bin): reading one safely, its input spec and statistics,
feeding it, compiling it, saving it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.errors import ModelLoadError
from accel.models.files import require_file, resolve_inside

if TYPE_CHECKING:
    from accel.models.inputs import InputSpec


_OV_DTYPES = {
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "f64": "float64",
    "i64": "int64",
    "i32": "int32",
    "i8": "int8",
    "u8": "uint8",
    "boolean": "bool",
}
PRECISIONS = {"f32": "f32", "bf16": "bf16", "f16": "f16"}


def module_path_of(name: str) -> str:
    """Torch module path encoded in an OpenVINO op name ("" when none).

    ``ov.convert_model`` on a torch module names ops ``__module.layer1.0.conv1/aten::...``;
    on an ONNX file from the TorchScript exporter ``/layer1/layer1.0/conv1/Conv``.
    """
    from accel.graph.op_names import op_module_path

    return op_module_path(name)


def compile_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """OpenVINO compile properties from a model's ``session_options``."""
    cfg: dict[str, Any] = {
        "PERFORMANCE_HINT": str(options.get("performance_hint", "latency")).upper(),
    }
    precision = options.get("precision")
    if precision:
        cfg["INFERENCE_PRECISION_HINT"] = PRECISIONS[str(precision)]
    if options.get("threads"):
        cfg["INFERENCE_NUM_THREADS"] = int(options["threads"])
    if options.get("streams"):
        cfg["NUM_STREAMS"] = int(options["streams"])
    if options.get("kv_cache_precision"):  # the CPU plugin's, for stateful LMs
        cfg["KV_CACHE_PRECISION"] = str(options["kv_cache_precision"])
    if options.get("perf_count"):
        cfg["PERF_COUNT"] = True
    return cfg


def weights_file(path: Path) -> Path:
    """The .bin of the IR ``path`` (.xml), resolved, refused when it is missing or when it
    resolves outside the .xml's folder (a link to another file): an IR reads nothing
    beyond its own folder, as an ONNX model's external data does not."""
    path = Path(path)
    weights = path.with_suffix(".bin")
    if not weights.is_file() and not weights.is_symlink():
        raise ModelLoadError(
            f"{path} has no weights file {weights.name} next to it; an OpenVINO IR is a pair "
            "of files (.xml + .bin) with the same name: copy both"
        )
    resolved = resolve_inside(path.parent, weights)
    if resolved is None:
        raise ModelLoadError(
            f"{path}: its weights file {weights.name} resolves to {weights.resolve()}, outside "
            f"the model's folder {path.parent.resolve()} (a link?); refused. Copy the real "
            ".bin file next to the .xml."
        )
    require_file(resolved)
    return resolved


def read_ir(path: Path) -> Any:
    """Read an IR (.xml) and its checked .bin (``weights_file``) with a clear error for a
    missing or broken file pair. Every read of an IR goes through here."""
    import openvino as ov

    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"OpenVINO IR file not found: {path}")
    weights = weights_file(path)
    try:
        return ov.Core().read_model(str(path), str(weights))
    except Exception as exc:  # OpenVINO raises RuntimeError with the parser's message
        raise ModelLoadError(
            f"OpenVINO cannot read {path}: {str(exc).strip().splitlines()[0][:300]}. "
            "Check that the .xml and .bin belong together and are complete."
        ) from None


def spec_from_ov(ov_model: Any) -> InputSpec:
    """An InputSpec from an OpenVINO model's inputs (dynamic dims become symbolic)."""
    from accel.models.inputs import InputSpec

    parts = []
    for i, inp in enumerate(ov_model.inputs):
        names = inp.get_names()
        name = inp.get_any_name() if names else f"input_{i}"
        dtype = _OV_DTYPES.get(inp.get_element_type().get_type_name(), "float32")
        dims = []
        for j, d in enumerate(inp.get_partial_shape()):
            dims.append(
                str(d.get_length()) if d.is_static else ("batch" if j == 0 else f"d{i}_{j}")
            )
        parts.append(f"{name}:{dtype}[{','.join(dims)}]")
    return InputSpec.parse("; ".join(parts))


def _const_of(node: Any) -> Any:
    """The Constant behind ``node`` (itself, or through one Convert), else None."""
    if node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node if node.get_type_name() == "Constant" else None


def _numel(node: Any) -> int:
    shape = node.get_output_partial_shape(0)
    if not shape.is_static:
        return 0
    size = 1
    for d in shape.to_shape():
        size *= int(d)
    return size


def _decompressed(node: Any) -> bool:
    """Whether ``node`` is an integer constant turned real: Convert(integer Constant), or
    the Subtract of a zero point from one."""
    if node.get_type_name() == "Subtract":
        return _decompressed(node.input_value(0).get_node())
    if node.get_type_name() != "Convert":
        return False
    c = _const_of(node)
    return c is not None and not c.get_output_element_type(0).is_real()


def weight_dtypes(ov_model: Any) -> dict[str, int]:
    """The model's weights by element type (``{"f32": n, "i8": m}``): real constants, and
    integer constants decompressed to real ones (NNCF ``compress_weights``: u8/i8/u4/i4
    weight -> Convert [-> Subtract zero point] -> Multiply scale). The scales and zero points
    of such a decompression are not weights; nor are scalars."""
    ops = list(ov_model.get_ordered_ops())
    aux: set[str] = set()  # friendly names of decompression scales and zero points
    for op in ops:
        if op.get_type_name() not in ("Subtract", "Multiply") or op.get_input_size() != 2:
            continue
        if _decompressed(op.input_value(0).get_node()):
            other = _const_of(op.input_value(1).get_node())
            if other is not None:
                aux.add(other.get_friendly_name())
    out: dict[str, int] = {}
    for op in ops:
        if op.get_type_name() != "Constant" or op.get_friendly_name() in aux:
            continue
        etype = op.get_output_element_type(0)
        if not etype.is_real():
            consumers = [t.get_node().get_type_name() for t in op.output(0).get_target_inputs()]
            if not consumers or any(c != "Convert" for c in consumers):
                continue  # shapes, indices, axes: integers that are not weights
        size = _numel(op)
        if size > 1:
            key = etype.get_type_name()
            out[key] = out.get(key, 0) + size
    return out


def ov_stats(ov_model: Any, files: list[Path]) -> tuple[dict[str, int], int, str]:
    """(weights by element type, bytes of the files, sha256 of the files)."""
    n = weight_dtypes(ov_model)
    h = hashlib.sha256()
    total = 0
    for f in files:
        total += f.stat().st_size
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return n, total, h.hexdigest()


def to_numpy_feed(compiled: Any, inputs: Mapping[str, Any]) -> dict[int, Any]:
    """Inputs by port index as numpy arrays (matched by name, else by position)."""
    import numpy as np
    import torch

    values = list(inputs.values())
    feed = {}
    for i, port in enumerate(compiled.inputs):
        names = port.get_names()
        x = next((inputs[n] for n in names if n in inputs), None)
        if x is None:
            x = values[i]
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            if x.dtype == torch.bfloat16 or x.dtype == torch.float16:
                x = x.float()
            x = x.numpy()
        x = np.ascontiguousarray(x)
        want = _OV_DTYPES.get(port.get_element_type().get_type_name())
        if want in ("float32", "float16") and x.dtype != np.dtype(want) and x.dtype.kind == "f":
            x = x.astype(want)
        feed[i] = x
    return feed


def outputs_as_torch(compiled: Any, result: Any) -> tuple:
    import numpy as np
    import torch

    return tuple(torch.from_numpy(np.array(result[o])) for o in compiled.outputs)


def ov_tensor(x: Any) -> Any:
    import openvino as ov

    return ov.Tensor(x, shared_memory=True)


def save_ir(ov_model: Any, path: Path) -> Path:
    """Write ``path`` (.xml) and its .bin atomically: under temporary names, then renamed,
    so an interrupted save leaves no IR that looks complete."""
    import openvino as ov

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.partial.xml")
    ov.save_model(ov_model, str(tmp), compress_to_fp16=False)
    tmp.with_suffix(".bin").replace(path.with_suffix(".bin"))
    tmp.replace(path)
    return path


def bf16_supported(device: str = "CPU") -> bool:
    import openvino as ov

    try:
        caps = ov.Core().get_property(device.upper(), "OPTIMIZATION_CAPABILITIES")
    except Exception:  # noqa: BLE001 - an unknown device has no capabilities
        return False
    return "BF16" in caps
