"""What the OpenVINO passes share: finishing a step with an OpenVINO model (save the IR,
compile it once, record what runs)."""

from __future__ import annotations

import time
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

    path = save_ir(ov_model, ctx.work_dir / "model.xml")
    ctx.add_artifact(path, "model")
    ctx.add_artifact(path.with_suffix(".bin"), "weights")
    n, size, digest = ov_stats(ov_model, [path, path.with_suffix(".bin")])
    new = model.replace(
        kind="openvino",
        module=None,
        onnx_path=None,
        runtime_file=path,
        providers=None,
        input_casts={},
        num_params=n,
        size_bytes=size,
        content_hash=digest,
        format=fmt,
        session_options=options,
        channels_last_inputs=False,  # the IR takes its inputs contiguous
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
