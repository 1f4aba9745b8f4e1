"""What the OpenVINO passes share: the session options of a step (precision, threads) and
finishing a step with an OpenVINO model (save the IR,
compile it once, record what runs)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel
    from accel.passes.base import PassContext


def finish_ov_step(
    model: LoadedModel,
    ov_model: Any,
    ctx: PassContext,
    options: dict[str, Any],
    fmt: str,
) -> LoadedModel:
    """Save ``ov_model`` as the step's IR, compile it once (compile time and the precision
    that really runs go to the step's metrics/details) and return the new model."""
    from accel.runtimes.openvino.ir import ov_stats, save_ir
    from accel.runtimes.openvino.stateful import is_stateful_lm, lm_facts

    path = save_ir(ov_model, ctx.work_dir / "model.xml")
    metadata = dict(model.metadata)
    if is_stateful_lm(ov_model):  # as loading the IR gives it: generation needs no module
        metadata["lm_config"] = lm_facts(ov_model)
    ctx.add_artifact(path, "model")
    ctx.add_artifact(path.with_suffix(".bin"), "weights")
    weights, size, digest = ov_stats(ov_model, [path, path.with_suffix(".bin")])
    metadata["param_dtypes"] = weights
    new = model.replace(
        kind="openvino",
        module=None,
        onnx_path=None,
        runtime_file=path,
        providers=None,
        input_casts={},
        num_params=sum(weights.values()),
        size_bytes=size,
        content_hash=digest,
        format=fmt,
        session_options=options,
        channels_last_inputs=False,  # the IR takes its inputs contiguous
        metadata=metadata,
    )
    t0 = time.perf_counter()
    compiled, _ = new.session()
    ctx.metrics["compile_time_s"] = time.perf_counter() - t0
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    ran = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
    ctx.details["precision_ran"] = ran
    ctx.details["threads"] = int(compiled.get_property("INFERENCE_NUM_THREADS"))
    ctx.details["compile"] = dict(options)
    return new


def auto_precision(device: str, ctx: PassContext) -> str:
    """precision: auto on ``device``: bf16 where the CPU's flags show bf16 matrix kernels and
    OpenVINO reports BF16 for the device, else f32; the choice and why go in the details."""
    from accel.hardware import cpu_features, default_openvino_precision
    from accel.runtimes.openvino.ir import bf16_supported

    features = cpu_features()
    chosen = "f32"
    if device in ("CPU", "AUTO") and default_openvino_precision(features) == "bf16":
        chosen = "bf16" if bf16_supported("CPU") else "f32"
    ctx.details["precision_auto"] = f"{chosen} ({features.summary()})"
    return chosen


def compile_options(
    device: str, precision: str, performance_hint: str, streams: int | None, ctx: PassContext
) -> dict[str, Any]:
    """A step's OpenVINO session options: the precision hint resolved (auto, or bf16 on a
    CPU without it: f32 with a warning) and the recipe's thread count."""
    from accel.runtimes.openvino.ir import bf16_supported

    if precision == "auto":
        precision = auto_precision(device, ctx)
    elif precision == "bf16" and device == "CPU" and not bf16_supported("CPU"):
        ctx.warn(
            "bf16 asked for, but this CPU has no bf16 support (AVX-512 BF16 / AMX): "
            "the precision hint fell back to f32"
        )
        precision = "f32"
    threads = None
    if ctx.recipe is not None:
        threads = getattr(getattr(ctx.recipe, "benchmark", None), "threads", None)
    opts: dict[str, Any] = {
        "device": device,
        "precision": precision,
        "performance_hint": performance_hint,
    }
    if "precision_auto" in ctx.details:  # a compile that would crash may run f32 instead
        opts["precision_auto"] = True
    if threads:
        opts["threads"] = int(threads)
    if streams:
        opts["streams"] = int(streams)
    return opts


@contextlib.contextmanager
def root_logging_kept() -> Iterator[None]:
    """Undo changes to the root logger: when a conversion fails, OpenVINO's torch frontend
    sets the root level to ERROR and adds a stderr handler, silencing every later warning
    of the process (the studio's included)."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)


OV_PRECISION_HELPER = '''
def ov_precision(wanted, device="CPU"):
    """The precision hint to use: bf16 only where the CPU supports it (as the studio does);
    auto: bf16 where the CPU has bf16 matrix kernels (AMX, AVX-512 BF16), else f32."""
    if wanted == "auto":
        cpu_caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        return "bf16" if device in ("CPU", "AUTO") and "BF16" in cpu_caps else "f32"
    caps = ov.Core().get_property(device, "OPTIMIZATION_CAPABILITIES")
    return "f32" if wanted == "bf16" and "BF16" not in caps else wanted
'''
