"""``profile_model``: one entry point for torch and ONNX models."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from accel.errors import AccelError
from accel.profile.results import ModelProfile

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    import torch

    if not threads:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(old)


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
        from accel.measure import physical_cores

        threads = physical_cores()
    if inputs is None:
        inputs = loaded.example_inputs()
    if loaded.kind == "onnx":
        from accel.profile.ort_profile import profile_onnx

        options = dict(loaded.session_options or {})
        if threads:
            options["intra_op_threads"] = int(threads)
        prof = profile_onnx(
            loaded.onnx_path,
            loaded.prepare_inputs(inputs),
            device=device,
            providers=loaded.providers,
            session_options=options,
            iters=iters,
            warmup=warmup,
            ops=ops,
            trace_path=trace_path,
            progress=progress,
            cancel=cancel,
        )
        prof.threads = threads
    elif loaded.kind == "torch":
        import torch

        from accel.profile.torch_profile import profile_torch

        module = loaded.module
        if not isinstance(module, torch.nn.Module):
            raise AccelError(f"cannot profile {loaded.source}: it has no torch module to hook")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise AccelError(
                f"device {device!r} asked for, but CUDA is not available here; use --device cpu"
            )
        moved = device != loaded.device
        target = loaded.replace(device=device) if moved else loaded
        if moved:
            module.to(device)
        try:
            prepared = target.prepare_inputs(inputs)
            args = tuple(prepared.values())
            # Events and memory stats refer to the current CUDA device: make it the model's.
            dev_ctx = (
                torch.cuda.device(torch.device(device))
                if device.startswith("cuda")
                else contextlib.nullcontext()
            )
            with _torch_threads(threads), torch.inference_mode(), dev_ctx:
                prof = profile_torch(
                    module,
                    lambda: module(*args),
                    device=device,
                    iters=iters,
                    warmup=warmup,
                    ops=ops,
                    trace_path=trace_path,
                    progress=progress,
                    cancel=cancel,
                )
        finally:
            if moved:
                module.to(loaded.device)
    else:
        raise AccelError(
            f"cannot profile a model of kind {loaded.kind!r} (expected 'torch' or 'onnx')"
        )
    prof.source = loaded.source
    return prof
