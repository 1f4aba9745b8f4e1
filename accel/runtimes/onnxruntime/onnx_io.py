"""Safe ONNX loading: external data stays inside the model's folder."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel.errors import ModelLoadError
from accel.models.files import resolve_inside
from accel.models.inputs import Dim, InputSpec, TensorSpec, normalize_dtype

log = logging.getLogger(__name__)

# Protobuf cannot serialise a single message over 2 GiB; keep a margin.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


def all_tensors(model: Any) -> list[Any]:
    """Every TensorProto of a model: initializers (sparse ones too) and node attributes, in
    the main graph, in every subgraph (If / Loop / Scan bodies, at any depth) and in local
    functions. The studio's own walk, so the external-data guard does not depend on ONNX
    Runtime refusing what it misses."""
    out: list[Any] = []
    graphs = [model.graph]
    nodes = [n for f in model.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            g = graphs.pop()
            out.extend(g.initializer)
            for sp in g.sparse_initializer:
                out.extend((sp.values, sp.indices))
            nodes.extend(g.node)
            continue
        node = nodes.pop()
        for attr in node.attribute:
            if attr.HasField("t"):
                out.append(attr.t)
            out.extend(attr.tensors)
            if attr.HasField("sparse_tensor"):
                out.extend((attr.sparse_tensor.values, attr.sparse_tensor.indices))
            if attr.HasField("g"):
                graphs.append(attr.g)
            graphs.extend(attr.graphs)
    return out


def check_external_data(path: Path) -> list[Path]:
    """Refuse external data that points outside the model's folder; return the data files."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError) as exc:
        raise ModelLoadError(
            f"{path} is not a valid ONNX file (truncated or corrupt?): {type(exc).__name__}: {exc}. "
            "Re-export the model or check the download."
        ) from None
    folder = path.resolve().parent
    files: list[Path] = []
    for t in all_tensors(model):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if (
            not loc
            or Path(loc).is_absolute()
            or loc.startswith(("/", "\\"))
            or ".." in Path(loc).parts
        ):
            raise ModelLoadError(
                f"{path}: tensor {t.name!r} points to external data {loc!r} outside the model's folder; "
                "refused. Keep external data files next to the .onnx file with relative names."
            )
        target = resolve_inside(folder, folder / loc)
        if target is None:
            raise ModelLoadError(
                f"{path}: tensor {t.name!r} external data {loc!r} resolves to "
                f"{(folder / loc).resolve()}, outside {folder} "
                "(a link?); refused. Copy the data file into the model's folder."
            )
        if not target.is_file():
            raise ModelLoadError(
                f"{path}: external data file {loc!r} for tensor {t.name!r} is missing"
            )
        if target not in files:
            files.append(target)
    return files


def spec_from_onnx(path: Path) -> InputSpec:
    """Infer an InputSpec from the graph inputs (symbolic dims keep their names)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    init_names = {i.name for i in model.graph.initializer}
    tensors = []
    dims: dict[str, Dim] = {}
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        tt = inp.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name
        if dtype == "bool_":
            dtype = "bool"
        shape: list[int | str] = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(int(d.dim_value))
            else:
                name = (
                    d.dim_param
                    if d.HasField("dim_param") and d.dim_param
                    else f"{_safe(inp.name)}_dim{i}"
                )
                name = _safe(name)
                shape.append(name)
        low = high = None
        if dtype.startswith("int"):
            low, high = 0.0, 100.0  # unknown token range: keep ids small so any vocab accepts them
        tensors.append(TensorSpec(inp.name, tuple(shape), normalize_dtype(dtype), low, high))
    return InputSpec(tuple(tensors), dims)


def _safe(name: str) -> str:
    import re

    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if s and not s[0].isdigit() else f"d_{s}"


def create_session(
    path: Path | None, providers: list[str] | None, options: dict[str, Any], device: str
) -> Any:
    """Create an ORT session; CPU unless the device or providers say otherwise."""
    import onnxruntime as ort

    if path is None:
        raise ModelLoadError("ONNX model has no file path")
    so = _session_options(options)
    chosen = _providers_to_try(providers, device)
    device_id = int(device.split(":", 1)[1]) if device.startswith("cuda:") else 0
    last_exc: Exception | None = None
    # A GPU provider can fail to start (TensorRT or cuDNN libraries missing): fall back to
    # the next provider in the list, as the fallback order promises.
    while chosen:
        opts = [{"device_id": device_id} if p in _GPU_PROVIDERS else {} for p in chosen]
        try:
            return ort.InferenceSession(
                str(path), sess_options=so, providers=chosen, provider_options=opts
            )
        except Exception as exc:  # ORT raises its own exception types
            last_exc = exc
            if chosen[0] not in _GPU_PROVIDERS:
                break
            log.warning(
                "%s failed to start (%s); falling back", chosen[0], str(exc).splitlines()[0]
            )
            chosen = chosen[1:]
    raise ModelLoadError(
        f"ONNX Runtime cannot load {path}: {str(last_exc).splitlines()[0]}. Check the opset and op "
        "support (`python -m onnx.checker`), or re-export the model."
    ) from None


def _session_options(options: dict[str, Any]) -> Any:
    """ORT SessionOptions from the runtime's options (optimisation level, threads, execution
    mode, spinning, the optimised model's path, profiling); warnings and errors only."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    level = options.get("graph_optimization_level")
    if level:
        so.graph_optimization_level = {
            "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]
    if options.get("intra_op_threads"):
        so.intra_op_num_threads = int(options["intra_op_threads"])
    if options.get("inter_op_threads"):
        so.inter_op_num_threads = int(options["inter_op_threads"])
    if options.get("execution_mode") == "parallel":
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    if options.get("allow_spinning") is False:
        # Idle intra-op threads sleep instead of spinning: they would otherwise take the CPU
        # from whatever runs next (accel.timing times models back to back).
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if options.get("optimized_model_path"):
        so.optimized_model_filepath = str(options["optimized_model_path"])
    if options.get("enable_profiling"):
        so.enable_profiling = True
        if options.get("profile_prefix"):
            so.profile_file_prefix = str(options["profile_prefix"])
    so.log_severity_level = 3
    return so


def _providers_to_try(providers: list[str] | None, device: str) -> list[str]:
    """The providers to try in order: the asked ones (default: CUDA then CPU on a cuda
    device, else CPU) that can run here, with the CPU provider added when missing."""
    if not providers:
        providers = (
            ["CUDAExecutionProvider", "CPUExecutionProvider"]
            if device.startswith("cuda")
            else ["CPUExecutionProvider"]
        )
    usable = set(usable_providers(device))
    chosen = [p for p in providers if p in usable] or ["CPUExecutionProvider"]
    if "CPUExecutionProvider" not in chosen:
        chosen.append("CPUExecutionProvider")
    return chosen


_GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")


def usable_providers(device: str) -> list[str]:
    """ORT providers that can run here: GPU ones only for a cuda device with CUDA present
    (onnxruntime-gpu lists them even on machines without a GPU)."""
    import onnxruntime as ort

    available = list(ort.get_available_providers())
    gpu_ok = False
    if str(device).startswith("cuda"):
        try:
            import torch

            gpu_ok = torch.cuda.is_available()
        except ImportError:  # no torch: trust ORT's list
            gpu_ok = True
    usable = [p for p in available if gpu_ok or p not in _GPU_PROVIDERS]
    if "TensorrtExecutionProvider" in usable and not _tensorrt_installed():
        usable.remove("TensorrtExecutionProvider")
    return usable


def _tensorrt_installed() -> bool:
    """ORT's TensorRT provider needs the TensorRT libraries (pip ``tensorrt`` or a system
    libnvinfer); without them it only logs an error per session."""
    import ctypes.util
    import importlib.util

    return any(
        importlib.util.find_spec(m) is not None for m in ("tensorrt", "tensorrt_libs")
    ) or bool(ctypes.util.find_library("nvinfer"))


def bind_on_device(session: Any, inputs: Mapping[str, Any], device: str) -> tuple[Any, list] | None:
    """An IOBinding with ``inputs`` copied to the cuda ``device`` and outputs bound there,
    plus the tensors it points into (keep them alive while it runs); None unless the
    session runs on a GPU provider."""
    import torch

    if not (str(device).startswith("cuda") and session.get_providers()[0] in _GPU_PROVIDERS):
        return None
    dev = torch.device(device)
    binding = session.io_binding()
    keep = []
    for meta in session.get_inputs():
        x = torch.as_tensor(inputs[meta.name]).to(dev)
        if meta.type == "tensor(float16)" and x.dtype != torch.float16:
            x = x.half()
        elif meta.type == "tensor(float)" and x.is_floating_point() and x.dtype != torch.float32:
            x = x.float()
        x = x.contiguous()
        keep.append(x)
        binding.bind_input(
            name=meta.name,
            device_type="cuda",
            device_id=dev.index or 0,
            element_type=_np_dtype(x.dtype),
            shape=tuple(x.shape),
            buffer_ptr=x.data_ptr(),
        )
    for out in session.get_outputs():
        binding.bind_output(out.name, "cuda", dev.index or 0)
    torch.cuda.synchronize(dev)  # the copies ran on torch's stream; ORT reads on its own
    return binding, keep


def run_session(
    session: Any, inputs: Mapping[str, Any], device: str = "cpu", io_binding: bool = True
) -> tuple:
    """Run an ORT session on torch tensors; outputs come back as CPU torch tensors.

    On a cuda device with a GPU provider, inputs and outputs are bound on the device
    (IOBinding, see bind_on_device); on CPU a plain run."""
    import numpy as np
    import torch

    bound = bind_on_device(session, inputs, device) if io_binding else None
    if bound is not None:
        binding, _keep = bound
        session.run_with_iobinding(binding)
        return tuple(torch.from_numpy(np.asarray(o)) for o in binding.copy_outputs_to_cpu())
    metas = list(session.get_inputs())
    feed = {}
    for meta in metas:
        x = inputs[meta.name]
        x = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        if meta.type == "tensor(float16)" and x.dtype != np.float16:
            x = x.astype(np.float16)
        elif meta.type == "tensor(float)" and x.dtype.kind == "f" and x.dtype != np.float32:
            x = x.astype(np.float32)
        feed[meta.name] = x
    return tuple(torch.from_numpy(np.asarray(o)) for o in session.run(None, feed))


def _np_dtype(dtype: Any) -> Any:
    import numpy as np
    import torch

    return {
        torch.float32: np.float32,
        torch.float16: np.float16,
        torch.float64: np.float64,
        torch.int64: np.int64,
        torch.int32: np.int32,
        torch.int16: np.int16,
        torch.int8: np.int8,
        torch.uint8: np.uint8,
        torch.bool: np.bool_,
    }[dtype]


def save_onnx(proto: Any, path: Path, external: bool | None) -> bool:
    """Save ``proto`` at ``path``; weights go to ``path.name + '.data'`` in the same folder
    when asked or when the model is too big for one protobuf. Returns whether they did."""
    import onnx

    size = sum(len(t.raw_data) for t in proto.graph.initializer)
    if external is None:
        external = size > EXTERNAL_DATA_THRESHOLD
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()
    if external:
        onnx.save_model(
            proto,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data.name,
            size_threshold=1024,
        )
    else:
        onnx.save_model(proto, str(path))
    return bool(external)
