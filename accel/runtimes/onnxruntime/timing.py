"""What the timing harness calls for an ONNX model: an ORT session created by the first
call and fed numpy arrays (in the model's float types) prepared once, or, on a GPU, inputs
and outputs bound on the device once (IOBinding)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from accel.errors import AccelError
from accel.models.feed import as_positional, move_inputs
from accel.models.runtime import TimingTarget

log = logging.getLogger("accel.timing")


def _is_ort_session(obj: Any) -> bool:
    return callable(getattr(obj, "run", None)) and callable(getattr(obj, "get_inputs", None))


def _to_numpy(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach") and hasattr(value, "numpy"):
        t = value.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            t = t.float()
        return t.numpy()
    return np.asarray(value)


# ONNX element types whose numpy dtype we cast floating inputs to (an fp16-converted model
# takes fp16 inputs while the recipe's inputs stay fp32).
_ORT_FLOAT_TYPES = {
    "tensor(float16)": "float16",
    "tensor(float)": "float32",
    "tensor(double)": "float64",
}


def _ort_feed(session: Any, inputs: Any) -> dict[str, Any]:
    metas = list(session.get_inputs())
    names = [m.name for m in metas]
    if isinstance(inputs, Mapping) and set(inputs) == set(names):
        values = [inputs[name] for name in names]
    else:
        values = list(as_positional(inputs))
        if len(values) != len(names):
            raise AccelError(
                f"the ONNX model expects {len(names)} inputs {names}, got {len(values)}; "
                "pass a dict keyed by those names or a tuple in that order"
            )
        if isinstance(inputs, Mapping):
            log.warning(
                "input names %s do not match the ONNX inputs %s; feeding by position",
                list(inputs),
                names,
            )
    feed = {}
    for meta, value in zip(metas, values):
        arr = _to_numpy(value)
        want = _ORT_FLOAT_TYPES.get(getattr(meta, "type", ""))
        if want is not None and arr.dtype.kind == "f" and arr.dtype != want:
            arr = arr.astype(want)
        feed[meta.name] = arr
    return feed


def _ort_session_threads(session: Any) -> int | None:
    try:
        n = int(session.get_session_options().intra_op_num_threads)
    except Exception:
        return None
    return n or None  # 0 means "ORT default"


def _make_session(path: Path, device: str, threads: int | None) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    providers = ["CPUExecutionProvider"]
    if str(device).startswith("cuda"):
        providers.insert(0, "CUDAExecutionProvider")
    return ort.InferenceSession(str(path), sess_options=opts, providers=providers)


def _prepare_ort(
    get_session: Callable[[], Any], inputs: Any, size_bytes: int | None
) -> TimingTarget:
    state: dict[str, Any] = {}

    def first() -> Any:
        state["session"] = sess = get_session()
        state["feed"] = _ort_feed(sess, inputs)
        return sess.run(None, state["feed"])

    def call() -> Any:
        return state["session"].run(None, state["feed"])

    return TimingTarget(
        first,
        call,
        "onnxruntime",
        size_bytes,
        uses_torch=False,
        threads=lambda: _ort_session_threads(state["session"]) if "session" in state else None,
    )


def _prepare_ort_bound(
    get_session: Callable[[], Any], inputs: Any, device: str, size_bytes: int | None
) -> TimingTarget:
    """A GPU session with inputs and outputs bound on the device once (IOBinding), so the
    timing has no host copies; a session that ended up on CPU runs plainly."""
    from accel.runtimes.onnxruntime.onnx_io import bind_on_device

    state: dict[str, Any] = {}

    def first() -> Any:
        sess = state["session"] = get_session()
        bound = bind_on_device(sess, inputs, device)
        if bound is None:
            feed = _ort_feed(sess, inputs)
            state["call"] = lambda: sess.run(None, feed)
        else:
            state["bound"] = bound  # keeps the bound input tensors alive
            state["call"] = lambda: sess.run_with_iobinding(bound[0])
        return state["call"]()

    return TimingTarget(
        first,
        lambda: state["call"](),
        "onnxruntime",
        size_bytes,
        uses_torch=False,
        threads=lambda: _ort_session_threads(state["session"]) if "session" in state else None,
    )


def model_target(
    model: Any, inputs: Any, device: str, get_session: Callable[[], Any]
) -> TimingTarget:
    """The target of an ONNX-kind LoadedModel (or anything with kind, onnx_path, session()
    and input_casts); ``get_session`` creates the session on the first call."""
    size = getattr(model, "size_bytes", None) or None
    onnx_path = getattr(model, "onnx_path", None)
    if size is None and onnx_path is not None and Path(onnx_path).is_file():
        size = Path(onnx_path).stat().st_size
    casts = getattr(model, "input_casts", None)
    prepare = getattr(model, "prepare_inputs", None)
    if callable(prepare) and isinstance(inputs, Mapping):
        inputs, casts = prepare(inputs), None
    fed = move_inputs(inputs, "cpu", casts)
    options = getattr(model, "session_options", None) or {}
    if str(device).startswith("cuda") and options.get("io_binding", True):
        return _prepare_ort_bound(get_session, fed, device, size)
    return _prepare_ort(get_session, fed, size)


def native_target(obj: Any, inputs: Any, device: str, threads: int | None) -> TimingTarget | None:
    """The target of a path to an .onnx file or an ORT session (None for anything else)."""
    if isinstance(obj, str | os.PathLike) and str(obj).endswith(".onnx"):
        path = Path(obj)
        if not path.is_file():
            raise AccelError(f"ONNX file not found: {path}")
        return _prepare_ort(
            lambda: _make_session(path, device, threads), inputs, path.stat().st_size
        )
    if _is_ort_session(obj):
        return _prepare_ort(lambda: obj, inputs, None)
    return None
