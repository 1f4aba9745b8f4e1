"""``profile_model``: one entry point for torch and ONNX models."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from accel.profile.results import ModelProfile

log = logging.getLogger(__name__)


def profile_model(
    loaded: Any,
    inputs: Mapping[str, Any] | None = None,
    *,
    iters: int = 20,
    warmup: int = 5,
    ops: bool = True,
    trace_path: str | Path | None = None,
    device: str | None = None,
    threads: int | None = None,
    progress: Callable[[float, str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> ModelProfile:
    """Profile a ``LoadedModel`` layer by layer (torch: per module, ONNX: per node).

    ``inputs`` default to ``loaded.example_inputs()``. ``device`` defaults to the
    model's device; a torch model on another device is moved there for the
    profile and moved back afterwards. ``progress(fraction, message)`` is called
    as the work advances; ``cancel()`` is polled between iterations and raises
    ``accel.errors.Cancelled`` when it returns True. ``trace_path`` writes a
    Chrome/Perfetto trace (open it in https://ui.perfetto.dev or chrome://tracing).
    ``threads`` (torch and ONNX Runtime intra-op threads) defaults to the physical cores,
    as the runner's timing does.
    """
    device = device or loaded.device or "cpu"
    if not threads:  # one thread policy with the runner: the physical cores
        from accel.timing import physical_cores

        threads = physical_cores()
    if inputs is None:
        inputs = loaded.example_inputs()
    from accel.models.runtime import ProfileRequest, runtime_of

    request = ProfileRequest(
        iters=iters,
        warmup=warmup,
        ops=ops,
        trace_path=trace_path,
        device=device,
        threads=threads,
        progress=progress,
        cancel=cancel,
    )
    prof = runtime_of(loaded).profile(loaded, inputs, request)
    prof.source = loaded.source
    return prof
