"""What the timing harness calls for an OpenVINO model: an infer request of its own whose
input tensors wrap the prepared inputs, created and run by the first call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from accel.models.runtime import TimingTarget
from accel.runtimes.openvino.ir import ov_tensor, to_numpy_feed


def request_target(
    compile_model: Callable[[], Any],
    fed: Mapping[str, Any],
    size: int | None,
    stateful: bool = False,
) -> TimingTarget:
    """The target of ``compile_model()``'s compiled model on the prepared inputs ``fed``;
    ``stateful``: each call starts from an empty state (a stateful LM's whole sequence)."""
    state: dict[str, Any] = {}

    def first() -> Any:
        compiled = state["compiled"] = compile_model()
        # A request of its own: its input tensors wrap the timing inputs' memory, which
        # the model's shared request must not keep (later inputs may be larger).
        request = compiled.create_infer_request()
        for i, x in to_numpy_feed(compiled, fed).items():
            request.set_input_tensor(i, ov_tensor(x))
        state["request"] = request
        if stateful:
            request.reset_state()
        request.infer()
        return request

    def call() -> Any:
        if stateful:
            state["request"].reset_state()
        state["request"].infer()
        return state["request"]

    def used_threads() -> int | None:
        c = state.get("compiled")
        return int(c.get_property("INFERENCE_NUM_THREADS")) if c is not None else None

    return TimingTarget(first, call, "openvino", size, uses_torch=False, threads=used_threads)
