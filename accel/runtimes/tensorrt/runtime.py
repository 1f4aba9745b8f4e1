"""The TensorRT runtime: an ONNX model run by ONNX Runtime's TensorRT execution provider.

A model of this kind keeps the ONNX file in ``onnx_path`` and the provider's options in
``session_options["tensorrt"]`` (fp16 / int8 flags, the calibration table, engine and
timing caches in the run folder). It runs on NVIDIA GPUs only: elsewhere
``unavailable_reason`` says why and the ``tensorrt`` pass is refused before any work.
Needs the ``[tensorrt]`` extra (tensorrt, torch-tensorrt) and onnxruntime-gpu.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.models.runtime import ProfileRequest, ScriptRuntime, register_runtime
from accel.runtimes.onnxruntime.runtime import OnnxFileRuntime

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel
    from accel.profile.results import ModelProfile
    from accel.runtimes.tensorrt.serving import ServedPlan

log = logging.getLogger(__name__)

TRT_PROVIDER = "TensorrtExecutionProvider"


@register_runtime
class TensorRtRuntime(OnnxFileRuntime):
    kind = "tensorrt"
    label = "TensorRT"
    file_suffixes = ()  # .onnx files load as onnx; the tensorrt pass makes this kind
    libraries = ("tensorrt", "onnxruntime")
    needs_cuda = True
    reached_by = "tensorrt"
    capabilities = frozenset({"graph", "profile", "netron"})
    artifact_kinds = frozenset({"tensorrt_engine", "tensorrt_plan"})

    def unavailable_reason(self, device: str = "cpu") -> str | None:
        reason = super().unavailable_reason(device)
        if reason:
            return reason
        import onnxruntime as ort

        if TRT_PROVIDER not in ort.get_available_providers():
            return "this onnxruntime build has no TensorRT execution provider (install onnxruntime-gpu)"
        return None

    def session(self, model: LoadedModel) -> Any:
        if model._session is None:
            model._session = create_trt_session(model)
        return model._session

    def profile(
        self, model: LoadedModel, inputs: Mapping[str, Any], request: ProfileRequest
    ) -> ModelProfile:
        self.check_available(request.device)
        prof = super().profile(model, inputs, request)
        prof.kind = self.kind
        prof.notes.append(
            "TensorRT runs fused engines: a row is an engine (a group of ONNX nodes), not a node"
        )
        return prof

    def script(self) -> ScriptRuntime:
        return ScriptRuntime(run_branch=super().script().run_branch)

    def serve(self, path: Path, device: str, threads: int | None) -> ServedPlan:
        from accel.runtimes.tensorrt.serving import ServedPlan

        return ServedPlan(path)

    def info(self, model: LoadedModel) -> dict[str, Any]:
        return {
            "file": str(model.onnx_path) if model.onnx_path else None,
            "tensorrt": dict(model.session_options.get("tensorrt", {})),
        }


def trt_provider_options(options: Mapping[str, Any], device_id: int) -> dict[str, Any]:
    """ORT TensorRT provider options from ``session_options["tensorrt"]``."""
    trt = dict(options.get("tensorrt", {}))
    out: dict[str, Any] = {"device_id": device_id}
    if trt.get("fp16"):
        out["trt_fp16_enable"] = True
    if trt.get("int8"):
        out["trt_int8_enable"] = True
        out["trt_int8_calibration_table_name"] = str(trt["calibration_table"])
        out["trt_int8_use_native_calibration_table"] = False
    if trt.get("cache_dir"):
        out["trt_engine_cache_enable"] = True
        out["trt_engine_cache_path"] = str(trt["cache_dir"])
        out["trt_timing_cache_enable"] = True
        out["trt_timing_cache_path"] = str(trt["cache_dir"])
    if trt.get("workspace_bytes"):
        out["trt_max_workspace_size"] = int(trt["workspace_bytes"])
    return out


def create_trt_session(model: LoadedModel) -> Any:
    """An ORT session whose first provider is TensorRT (CUDA, then CPU, take what it lacks)."""
    import onnxruntime as ort

    TensorRtRuntime().check_available(model.device)
    device_id = int(model.device.split(":", 1)[1]) if ":" in model.device else 0
    so = ort.SessionOptions()
    so.log_severity_level = 3
    providers = [TRT_PROVIDER, "CUDAExecutionProvider", "CPUExecutionProvider"]
    opts = [
        trt_provider_options(model.session_options, device_id),
        {"device_id": device_id},
        {},
    ]
    return ort.InferenceSession(
        str(model.onnx_path), sess_options=so, providers=providers, provider_options=opts
    )
