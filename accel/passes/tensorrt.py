"""``tensorrt``: NVIDIA TensorRT engines, on GPUs only (the ``[tensorrt]`` extra).

ONNX models run through ONNX Runtime's TensorRT execution provider (the model becomes
kind ``tensorrt``): fp16, int8 with a calibration table computed on the recipe's
calibration data, engine and timing caches in the step's folder. Torch models are
compiled with torch-tensorrt (fp16 / bf16) and stay torch modules.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.errors import PassError
from accel.passes.base import Pass, PassConfig, PassContext, Requirements, ScriptStep, register_pass

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)


class TensorRtConfig(PassConfig):
    precision: Literal["fp32", "fp16", "bf16", "int8"] = Field(
        "fp16",
        description="kernel precision TensorRT may use: int8 (ONNX models only) calibrates "
        "on the recipe's data, bf16 (torch models only) needs Ampere or newer",
    )
    calibration_samples: int = Field(
        32, ge=1, le=10_000, description="calibration batches for int8"
    )
    workspace_gb: float | None = Field(
        None, gt=0, description="builder workspace limit in GiB (default: TensorRT's)"
    )


def _write_calibration_table(model: LoadedModel, ctx: PassContext, n: int) -> Any:
    """Calibrate activations on ``n`` batches with ONNX Runtime (CPU) and write the table
    the TensorRT provider reads."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, create_calibrator
    from onnxruntime.quantization.calibrate import CalibrationMethod
    from onnxruntime.quantization.quant_utils import write_calibration_table

    batches = ctx.calibration_batches(n)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(batches)

        def get_next(self) -> dict[str, Any] | None:
            b = next(self.it, None)
            if b is None:
                return None
            return {k: np.asarray(v.detach().cpu().numpy()) for k, v in b.items()}

    calibrator = create_calibrator(
        str(model.onnx_path),
        augmented_model_path=str(ctx.work_dir / "augmented.onnx"),
        calibrate_method=CalibrationMethod.MinMax,
    )
    calibrator.collect_data(Reader())
    ranges = calibrator.compute_data()
    write_calibration_table(ranges, dir=str(ctx.work_dir))
    return ctx.work_dir / "calibration.flatbuffers"


@register_pass
class TensorRtPass(Pass):
    name = "tensorrt"
    summary = "NVIDIA TensorRT engines (GPU only): ONNX via ORT's TensorRT provider, torch via torch-tensorrt"
    category = "runtime"
    Config = TensorRtConfig
    requires = Requirements(
        model_kinds=("onnx", "torch"),
        cuda=True,
        libraries=("tensorrt",),
        note="NVIDIA GPU with the [tensorrt] extra installed",
    )

    def apply(self, model: LoadedModel, config: TensorRtConfig, ctx: PassContext) -> LoadedModel:
        from accel.runtimes.tensorrt import TensorRtRuntime

        reason = TensorRtRuntime().unavailable_reason(ctx.device)
        if reason:
            raise PassError(f"tensorrt cannot run here: {reason}")
        if model.module is not None:
            return self._torch(model, config, ctx)
        return self._onnx(model, config, ctx)

    def _onnx(self, model: LoadedModel, config: TensorRtConfig, ctx: PassContext) -> LoadedModel:
        if config.precision == "bf16":
            raise PassError("bf16 is for torch models; use fp16 or int8 for ONNX models")
        cache = ctx.work_dir / "trt_cache"
        cache.mkdir(parents=True, exist_ok=True)
        trt: dict[str, Any] = {"cache_dir": str(cache)}
        if config.precision in ("fp16", "int8"):
            trt["fp16"] = True
        if config.precision == "int8":
            ctx.progress(0.1, "calibrating int8 ranges")
            table = _write_calibration_table(model, ctx, config.calibration_samples)
            trt.update(int8=True, calibration_table=str(table))
            ctx.add_artifact(table, "calibration_table")
        if config.workspace_gb:
            trt["workspace_bytes"] = int(config.workspace_gb * 1024**3)
        new = model.replace(
            kind="tensorrt",
            device=ctx.device,
            providers=None,
            session_options={**model.session_options, "tensorrt": trt},
        )
        ctx.progress(0.4, "building the TensorRT engine")
        t0 = time.perf_counter()
        session = new.session()
        new.forward(ctx.inputs)  # the engine is built on the first run
        ctx.metrics["engine_build_s"] = time.perf_counter() - t0
        ctx.details["providers_active"] = list(session.get_providers())
        ctx.details["tensorrt"] = trt
        for f in sorted(cache.glob("*")):
            ctx.add_artifact(f, "tensorrt_cache")
        return new

    def _torch(self, model: LoadedModel, config: TensorRtConfig, ctx: PassContext) -> LoadedModel:
        import torch

        try:
            import torch_tensorrt
        except ImportError:
            raise PassError(
                "torch models need torch-tensorrt (pip install 'accel-studio[tensorrt]'), "
                "or add export_onnx before the tensorrt step"
            ) from None
        if config.precision == "int8":
            raise PassError("int8 TensorRT is for ONNX models: add export_onnx before this step")
        dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
        inputs = tuple(model.prepare_inputs(ctx.inputs).values())
        t0 = time.perf_counter()
        compiled = torch_tensorrt.compile(
            model.module.eval(),
            ir="dynamo",
            inputs=list(inputs),
            enabled_precisions={dtypes[config.precision]},
            workspace_size=int((config.workspace_gb or 0) * 1024**3),
        )
        ctx.metrics["engine_build_s"] = time.perf_counter() - t0
        ctx.details["torch_tensorrt"] = torch_tensorrt.__version__
        return model.replace(module=compiled, device=ctx.device)

    def to_script(self, config: TensorRtConfig) -> ScriptStep:
        if config.precision == "int8":
            raise NotImplementedError  # the calibration-table step is not written yet
        dtype = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[config.precision]
        lines = [
            "if kind == 'torch':",
            "    import torch_tensorrt",
            "    model = torch_tensorrt.compile(",
            "        model.eval(), ir='dynamo', inputs=[x.to(device) for x in inputs.values()],",
            f"        enabled_precisions={{torch.{dtype}}},",
            "    )",
            "else:",
            "    trt_cache = step_dir / 'trt_cache'",
            "    trt_cache.mkdir(exist_ok=True)",
            "    trt_options = {'device_id': 0, 'trt_engine_cache_enable': True,",
            "                   'trt_engine_cache_path': str(trt_cache), 'trt_timing_cache_enable': True,",
            "                   'trt_timing_cache_path': str(trt_cache)}",
        ]
        if config.precision == "fp16":
            lines.append("    trt_options['trt_fp16_enable'] = True")
        lines += [
            "    session = ort.InferenceSession(str(onnx_path), providers=[",
            "        ('TensorrtExecutionProvider', trt_options), 'CUDAExecutionProvider', 'CPUExecutionProvider'])",
            "    # The session runs like any ONNX Runtime session from here on.",
        ]
        return ScriptStep(code="\n".join(lines), imports=["import onnxruntime as ort"])
