"""What the timing loop calls, and the measurements the runner, the search and the corpus
check make with it: ``compare_interleaved`` (a step against the original, in alternating
rounds), ``compare_round_robin`` (several candidates against the original in one
measurement: the search's final re-timing), ``time_alone`` (one model, the same machinery:
the original's row, the memory fallback). All return objects whose ``timing()`` is the typed
StepTiming.

* One thread count (``settings.threads``, default: the physical cores, or the CPUs other
  processes leave free, ``choose_cpus``) drives torch and every runtime alike.
* Torch models run under ``torch.inference_mode()``; on CUDA every sample is synchronised.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from accel.errors import AccelError
from accel.models.feed import as_positional, move_inputs
from accel.timing.noise import NoiseMonitor
from accel.timing.placement import choose_cpus, torch_threads, with_threads
from accel.timing.rounds import Alone, Comparison, run_alone, run_round_robin
from accel.timing.settings import MeasureError, TimingSettings

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """What the timing loop calls, plus what the result reports about it."""

    first: Callable[[], Any]  # the first call (may create the session)
    call: Callable[[], Any]  # every later call
    runner: str
    size_bytes: int | None
    uses_torch: bool
    threads: Callable[[], int | None] = lambda: None


def _is_loaded_model(obj: Any) -> bool:
    return callable(getattr(obj, "forward", None)) and isinstance(getattr(obj, "kind", None), str)


def batch_size(inputs: Any) -> int:
    """The leading dimension of the first input (1 for scalars and empty inputs)."""
    values = as_positional(inputs)
    if not values:
        return 1
    shape = getattr(values[0], "shape", None)
    if shape is None or len(shape) == 0:
        return 1
    return max(int(shape[0]), 1)


def prepare(model: Any, inputs: Any, device: str, threads: int | None) -> Prepared:
    """What the timing loop calls: a LoadedModel's or a runtime's own object's (an .onnx
    path, an ORT session, a torch module) timing target from its runtime, else the plain
    callable on inputs moved once."""
    from accel.models.runtime import native_timing_target, runtime_of

    torch = sys.modules.get("torch")
    if _is_loaded_model(model):
        t = runtime_of(model).timing_target(model, inputs, device, threads)
    else:
        t = native_timing_target(model, inputs, device, threads)
    if t is not None:
        return Prepared(t.first, t.call, t.runner, t.size_bytes, t.uses_torch, t.threads)
    if not callable(model):
        raise AccelError(
            f"cannot benchmark a {type(model).__name__}: pass a torch module, a callable, "
            "an onnxruntime.InferenceSession, a LoadedModel or a path to a .onnx file"
        )
    args = as_positional(move_inputs(inputs, device) if torch is not None else inputs)
    return Prepared(
        lambda: model(*args), lambda: model(*args), "callable", None, uses_torch=torch is not None
    )


def check_finite(outputs: Any, name: str) -> None:
    """A model whose outputs hold NaN has no meaningful latency to report."""
    import numpy as np
    import torch
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves(outputs):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            bad = not bool(torch.isfinite(leaf).all())
        elif isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f":
            bad = not bool(np.isfinite(leaf).all())
        else:
            continue
        if bad:
            raise MeasureError(
                f"the {name} model returned NaN or infinity; fix the model (or the step "
                "that produced it) before timing it"
            )


def _sync_for(device: str) -> Callable[[], None]:
    torch = sys.modules.get("torch")
    if device.startswith("cuda") and torch is not None:
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _grad_off() -> Any:
    torch = sys.modules.get("torch")
    return torch.inference_mode() if torch is not None else contextlib.nullcontext()


def compare_interleaved(
    reference: Any,
    candidate: Any,
    inputs: Any,
    settings: TimingSettings | Mapping[str, Any] | None = None,
    *,
    device: str = "cpu",
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[float, str], None] | None = None,
    seed: int = 0,
    reference_warm: bool = False,
    give_up_below: float | None = None,
) -> Comparison:
    """Time ``candidate`` against ``reference`` on the same ``inputs`` in alternating rounds.

    Both are anything ``prepare`` takes (LoadedModel, torch module, callable, ORT session,
    .onnx path). Raises MeasureError for a model that returns NaN. ``reference_warm``: see
    ``run_rounds``; ``give_up_below``: see ``run_round_robin``. With ``settings.threads`` unset, CPUs that other processes keep busy are
    left out while timing (``choose_cpus``); the result's ``placement`` says where it ran."""
    return compare_round_robin(
        reference,
        {"candidate": candidate},
        inputs,
        settings,
        device=device,
        cancel=cancel,
        progress=progress,
        seed=seed,
        reference_warm=reference_warm,
        give_up_below=give_up_below,
    )["candidate"]


def compare_round_robin(
    reference: Any,
    candidates: Mapping[str, Any],
    inputs: Any,
    settings: TimingSettings | Mapping[str, Any] | None = None,
    *,
    device: str = "cpu",
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[float, str], None] | None = None,
    seed: int = 0,
    reference_warm: bool = False,
    give_up_below: float | None = None,
) -> dict[str, Comparison]:
    """``compare_interleaved`` for several named candidates in one measurement
    (``run_round_robin``: rotating order, the reference in every round): each candidate's
    Comparison against the reference of the same rounds, so their speedups compare."""
    settings = TimingSettings.from_any(settings)
    device = str(device)
    placement = choose_cpus(settings.threads, device)
    threads = placement.threads
    settings = settings.with_threads(threads)
    sync = _sync_for(device)
    with placement.pinned(), torch_threads(threads), _grad_off():
        prepared = {"reference": prepare(with_threads(reference, threads), inputs, device, threads)}
        for name, model in candidates.items():
            prepared[name] = prepare(with_threads(model, threads), inputs, device, threads)
        out = run_round_robin(
            prepared["reference"].call,
            {name: prepared[name].call for name in candidates},
            settings,
            sync=sync,
            monitor=NoiseMonitor(device),
            cancel=cancel,
            progress=progress,
            seed=seed,
            first={name: p.first for name, p in prepared.items()},
            check_output=check_finite,
            reference_warm=reference_warm,
            give_up_below=give_up_below,
        )
    for cmp in out.values():
        cmp.placement = placement
        if placement.note and cmp.noisy:
            cmp.reasons.append(placement.note)
    if placement.note:
        log.info("%s", placement.note)
    return out


def time_alone(
    model: Any,
    inputs: Any,
    settings: TimingSettings | Mapping[str, Any] | None = None,
    *,
    device: str = "cpu",
    cancel: Callable[[], bool] | None = None,
    name: str = "model",
) -> Alone:
    """Time one model on its own with the comparison's machinery (placement, threads, first
    call, warm-up, batching, rounds): the original's row, and the memory fallback."""
    settings = TimingSettings.from_any(settings)
    device = str(device)
    placement = choose_cpus(settings.threads, device)
    threads = placement.threads
    sync = _sync_for(device)
    with placement.pinned(), torch_threads(threads), _grad_off():
        prepared = prepare(with_threads(model, threads), inputs, device, threads)
        side, rounds, noise = run_alone(
            prepared.call,
            prepared.first,
            settings,
            sync=sync,
            monitor=NoiseMonitor(device),
            cancel=cancel,
            check=lambda out: check_finite(out, name),
        )
    return Alone(side, rounds, threads, placement, noise)


__all__ = [
    "MeasureError",
    "Prepared",
    "batch_size",
    "check_finite",
    "compare_interleaved",
    "compare_round_robin",
    "prepare",
    "time_alone",
]
