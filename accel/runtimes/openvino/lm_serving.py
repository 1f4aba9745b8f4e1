"""A stateful OpenVINO LM answering concurrent generation requests, token by token: the
engines behind ``studio serve-test`` of a generation run (``OpenVinoRuntime.serve_lm``).

Two modes over the same IR, both greedy and exactly ``new_tokens`` tokens per request:

* ``SerialEngine`` ("no continuous batching"): one ``LLMPipeline``; requests take turns under
  a lock, each one's tokens streamed out by the pipeline's streamer as they come.
* ``ContinuousEngine`` ("continuous batching"): one ``ContinuousBatchingPipeline``; each
  request is ``add_request``-ed and gets a handle, one stepping thread calls ``step()`` while
  requests are pending and hands each handle's new tokens to its request's queue, so the
  pending requests decode together.

``engine.generate(ids, new_tokens)`` yields the new token ids as they are produced, from any
thread; closing the generator early (a client that went away) stops its request. Nothing here
serves over a network: ``accel.deploy.serve_lm`` puts an engine behind Triton.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accel.errors import AccelError
from accel.models.runtime import CB, LM_SERVING_MODES, NO_CB

_DONE = object()  # end of a request's tokens
_TURN = object()  # a serial request's turn began
# How long a request waits for its next token before it gives up (a stuck pipeline), and how
# long a serial request waits for its turn (behind the others: the client's budget ends it
# sooner).
TOKEN_TIMEOUT_S = 120.0
TURN_TIMEOUT_S = 3600.0


def _tensor(ids: Any) -> Any:
    import numpy as np
    import openvino as ov

    arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(1, -1))
    return ov.Tensor(arr)


def _next(q: queue.Queue, what: str, timeout: float = TOKEN_TIMEOUT_S) -> Any:
    try:
        item = q.get(timeout=timeout)
    except queue.Empty:
        raise AccelError(f"{what}: nothing within {timeout:.0f} s") from None
    if isinstance(item, BaseException):
        raise AccelError(f"{what} failed: {type(item).__name__}: {item}") from item
    return item


class SerialEngine:
    """One LLMPipeline, one request at a time (see the module docstring)."""

    mode = NO_CB

    def __init__(self, xml: Path, options: dict[str, Any]) -> None:
        from accel.runtimes.openvino.genai import pipeline_for

        self.pipe = pipeline_for(Path(xml), options)
        self._turn = threading.Lock()

    def generate(self, ids: Any, new_tokens: int) -> Iterator[int]:
        import numpy as np
        import openvino_genai as ov_genai

        from accel.runtimes.openvino.genai import greedy_config

        tokens: queue.Queue = queue.Queue()
        stop = threading.Event()

        class Streamed(ov_genai.StreamerBase):
            def write(self, token: Any) -> Any:
                for t in token if isinstance(token, list) else [token]:
                    tokens.put(int(t))
                if stop.is_set():
                    return ov_genai.StreamingStatus.CANCEL
                return ov_genai.StreamingStatus.RUNNING

            def end(self) -> None:
                pass

        ids = _tensor(ids)
        inputs = ov_genai.TokenizedInputs(ids, _tensor(np.ones(ids.shape, dtype=np.int64)))

        def run() -> None:
            try:
                with self._turn:  # one request at a time: that is this mode
                    tokens.put(_TURN)
                    if not stop.is_set():
                        self.pipe.generate(inputs, greedy_config(self.pipe, new_tokens), Streamed())
            except BaseException as exc:  # noqa: BLE001 - handed to the request's reader
                tokens.put(exc)
            finally:
                tokens.put(_DONE)

        worker = threading.Thread(target=run, name="lm-serial", daemon=True)
        worker.start()
        try:
            _next(tokens, "waiting for the model", TURN_TIMEOUT_S)  # _TURN (or its error)
            while (item := _next(tokens, "generation")) is not _DONE:
                yield item
        finally:
            stop.set()

    def close(self) -> None:
        self.pipe = None


class ContinuousEngine:
    """One ContinuousBatchingPipeline and its stepping thread (see the module docstring)."""

    mode = CB

    def __init__(self, xml: Path, options: dict[str, Any]) -> None:
        from accel.runtimes.openvino.genai import continuous_pipeline_for

        self.pipe = continuous_pipeline_for(Path(xml), options)
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: dict[int, tuple[Any, queue.Queue]] = {}
        self._closed = False
        self._stepper = threading.Thread(target=self._step_loop, name="lm-cb-step", daemon=True)
        self._stepper.start()

    def generate(self, ids: Any, new_tokens: int) -> Iterator[int]:
        from accel.runtimes.openvino.genai import greedy_config

        tokens: queue.Queue = queue.Queue()
        with self._wake:
            if self._closed:
                raise AccelError("the continuous-batching engine is closed")
            rid = next(self._ids)
            handle = self.pipe.add_request(rid, _tensor(ids), greedy_config(self.pipe, new_tokens))
            self._pending[rid] = (handle, tokens)
            self._wake.notify()
        try:
            while (item := _next(tokens, "generation")) is not _DONE:
                yield item
        finally:
            with self._wake:
                if self._pending.pop(rid, None) is not None:
                    handle.stop()  # the reader went away: the pipeline drops the request

    def _step_loop(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._closed or bool(self._pending))
                if self._closed:
                    return
            try:
                self.pipe.step()
            except BaseException as exc:  # noqa: BLE001 - every pending request hears of it
                self._finish_all(exc)
                continue
            self._hand_out()

    def _hand_out(self) -> None:
        import openvino_genai as ov_genai

        running = ov_genai.GenerationStatus.RUNNING
        with self._wake:
            for rid, (handle, tokens) in list(self._pending.items()):
                while handle.can_read():
                    for out in handle.read().values():
                        for t in out.generated_ids:
                            tokens.put(int(t))
                if handle.get_status() != running and not handle.can_read():
                    if str(handle.get_status()).endswith("FINISHED"):
                        tokens.put(_DONE)
                    else:
                        tokens.put(AccelError(f"request {rid} ended {handle.get_status()}"))
                    del self._pending[rid]

    def _finish_all(self, exc: BaseException) -> None:
        with self._wake:
            for _, tokens in self._pending.values():
                tokens.put(exc)
            self._pending.clear()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        self._stepper.join(30)
        self._finish_all(AccelError("the engine closed"))
        self.pipe = None


def engine_for(xml: Path, options: dict[str, Any], mode: str) -> SerialEngine | ContinuousEngine:
    """The engine of ``mode`` (``MODES``) over the stateful LM IR ``xml``."""
    from accel.runtimes.openvino.genai import pipeline_unavailable
    from accel.runtimes.openvino.ir import read_ir
    from accel.runtimes.openvino.stateful import is_stateful_lm

    missing = pipeline_unavailable()
    if missing:
        raise AccelError(f"serving a generation run needs OpenVINO GenAI: {missing}")
    if not is_stateful_lm(read_ir(xml)):
        raise AccelError(
            f"{xml} is not a stateful OpenVINO LM (no KV-cache state): serving generation needs "
            "the openvino_stateful step's IR"
        )
    if mode == NO_CB:
        return SerialEngine(xml, options)
    if mode == CB:
        return ContinuousEngine(xml, options)
    raise AccelError(f"unknown serving mode {mode!r}; one of {', '.join(LM_SERVING_MODES)}")
