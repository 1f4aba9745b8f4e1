"""Warnings about step combinations that run but do not do what the recipe says.

Not errors (the run works); the Recipe panel shows them on the step and the Runs panel in
the run's log. Plain logic on pass metadata, no Qt.
"""

from __future__ import annotations

from collections.abc import Sequence

from accel.passes.registry import get_pass
from accel.recipe import Step

# Torch precision steps that leave the weights in a dtype ONNX Runtime has no kernels for:
# an ONNX export after them writes float32 (the export pass upcasts; see onnx_export.py).
LOW_PRECISION_STEPS = {"bf16": "bfloat16", "fp16": "float16"}
# What gives low precision in ONNX instead (a pass applied after the export).
ONNX_LOW_PRECISION = "onnx_fp16"


def step_warnings(steps: Sequence[Step], device: str = "cpu") -> dict[int, str]:
    """Step index -> warning for the enabled steps of a recipe."""
    out: dict[int, str] = {}
    low: tuple[int, str] | None = None  # (step index, dtype) of the last low-precision step
    for i, step in enumerate(steps):
        if not step.enabled:
            continue
        try:
            cls = get_pass(step.pass_name)
        except Exception:
            continue  # unknown passes are reported as errors elsewhere
        if step.pass_name in LOW_PRECISION_STEPS:
            low = (i, LOW_PRECISION_STEPS[step.pass_name])
            continue
        if cls.category == "export" and step.pass_name == "export_onnx" and low is not None:
            j, dtype = low
            upcast = dtype == "bfloat16" or not device.startswith("cuda")
            if upcast:
                alt = f"add {ONNX_LOW_PRECISION} after the export" + (
                    "" if device.startswith("cuda") else " (needs a GPU to be faster)"
                )
                out[i] = (
                    f"step {j + 1} made the model {dtype}, but {step.pass_name} exports it in "
                    f"float32 (ONNX Runtime has no {dtype} kernels on {device}): the ONNX "
                    f"model is not {dtype}. For low precision in ONNX {alt}; or drop step "
                    f"{j + 1} to export the original float32 model."
                )
            low = None
    return out
