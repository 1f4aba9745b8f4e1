"""A serving test of a language model that generates: PyTriton serves the run's LM on loopback
as a decoupled (streaming) model, one response per new token, and concurrent clients send it
seeded prompts (token ids, no tokenizer), with and without continuous batching.

``serve_lm_test(runtime, path, options, ...)`` builds the runtime's engine per mode
(``Runtime.serve_lm``: ``accel.runtimes.openvino.lm_serving``), binds it in a Triton server on
127.0.0.1 (as many model instances as the most clients, so every client's request is in the
server at once and the engine decides how they share the model), and for each client count
runs the clients in a spawned process (``serve.in_client_process``): each client streams its
requests one after another over gRPC and reads the clock when it sends and as each token
arrives. The figures are the clients' own: time to first token (p50/p99), time per output token
after the first (p50) and tokens per second of all clients together. Both modes get the same
prompts. The server, the engine and the clients end when the test ends, is cancelled or fails.
"""

from __future__ import annotations

import contextlib
import math
import queue
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.deploy.serve import (
    check_ports,
    check_pytriton,
    in_client_process,
    percentile,
    python_lib_env,
    server_log_tail,
    triton_config,
)
from accel.deploy.triton import DeployError
from accel.errors import Cancelled
from accel.models.runtime import CB, LM_SERVING_MODES, NO_CB

MODES = LM_SERVING_MODES
MODEL_NAME = "lm"
# How long past the load's end a client waits for a token before it counts its request as
# failed (a serial request waits for its turn behind the other clients').
TOKEN_WAIT_S = 120.0


@dataclass(frozen=True)
class RequestTiming:
    """One request as its client saw it: the clock when sent and as each token arrived."""

    sent: float
    token_times: tuple[float, ...]

    @property
    def ttft_s(self) -> float:
        return self.token_times[0] - self.sent if self.token_times else math.nan

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first (NaN with fewer than two tokens)."""
        n = len(self.token_times)
        return (self.token_times[-1] - self.token_times[0]) / (n - 1) if n > 1 else math.nan


@dataclass(frozen=True)
class LMLoadPoint:
    mode: str  # NO_CB | CB
    clients: int
    requests: int
    errors: int
    tokens: int
    tokens_per_s: float  # all clients' tokens over the load's wall time
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def load_point(
    mode: str, clients: int, timings: Sequence[RequestTiming], errors: int, wall_s: float
) -> LMLoadPoint:
    """The figures of one load from its clients' timings (``wall_s``: the load's wall time)."""
    ttft = [t.ttft_s for t in timings if t.token_times]
    tpot = [t.tpot_s for t in timings if len(t.token_times) > 1]
    tokens = sum(len(t.token_times) for t in timings)
    return LMLoadPoint(
        mode=mode,
        clients=clients,
        requests=len(timings),
        errors=errors,
        tokens=tokens,
        tokens_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        ttft_p50_ms=statistics.median(ttft) * 1e3 if ttft else math.nan,
        ttft_p99_ms=percentile(ttft, 0.99) * 1e3,
        tpot_p50_ms=statistics.median(tpot) * 1e3 if tpot else math.nan,
    )


@dataclass
class LMServeReport:
    prompt_tokens: int
    new_tokens: int
    load: list[LMLoadPoint] = field(default_factory=list)
    workload: str = "generate"

    def point(self, mode: str, clients: int) -> LMLoadPoint | None:
        return next((p for p in self.load if p.mode == mode and p.clients == clients), None)

    def gain(self, clients: int) -> float | None:
        """Tokens/s with continuous batching over without, at ``clients``."""
        on, off = self.point(CB, clients), self.point(NO_CB, clients)
        if on is None or off is None or off.tokens_per_s <= 0:
            return None
        return on.tokens_per_s / off.tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "load": [p.to_dict() for p in self.load],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LMServeReport:
        """The report a worker sent back as JSON (``to_dict``; NaN comes as null)."""
        points = [
            LMLoadPoint(**{k: math.nan if v is None else v for k, v in p.items()})
            for p in d.get("load", [])
        ]
        return cls(int(d["prompt_tokens"]), int(d["new_tokens"]), points)


def _never() -> bool:
    return False


# -- the clients (in a spawned process) --------------------------------------------------------
def _inputs(ids: Any, new_tokens: int) -> list[Any]:
    import numpy as np
    import tritonclient.grpc as grpcclient

    ids = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(-1))
    a = grpcclient.InferInput("input_ids", list(ids.shape), "INT64")
    a.set_data_from_numpy(ids)
    b = grpcclient.InferInput("new_tokens", [1], "INT64")
    b.set_data_from_numpy(np.array([new_tokens], dtype=np.int64))
    return [a, b]


class _StreamClient:
    """One gRPC client with its stream: ``request(ids, n)`` sends one request and returns
    its RequestTiming once the server's final response came."""

    def __init__(self, url: str) -> None:
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(url)
        self.arrived: queue.Queue = queue.Queue()
        self.client.start_stream(
            callback=lambda result, error: self.arrived.put((time.perf_counter(), result, error))
        )
        self.sent = 0

    def request(self, ids: Any, new_tokens: int, deadline: float) -> RequestTiming:
        """``deadline``: time.monotonic() after which a missing token fails the request."""
        self.sent += 1
        rid = str(self.sent)
        t0 = time.perf_counter()
        self.client.async_stream_infer(
            MODEL_NAME, _inputs(ids, new_tokens), request_id=rid, enable_empty_final_response=True
        )
        times: list[float] = []
        while True:
            try:
                wait = max(0.1, deadline - time.monotonic())
                t, result, error = self.arrived.get(timeout=wait)
            except queue.Empty:
                raise TimeoutError("no token before the load's deadline") from None
            if error is not None:
                raise RuntimeError(str(error))
            if result.as_numpy("token_id") is not None:
                times.append(t)
            final = result.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                return RequestTiming(t0, tuple(times))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.stop_stream()
        with contextlib.suppress(Exception):
            self.client.close()


def lm_client_load(
    url: str,
    prompts: Sequence[Any],
    new_tokens: int,
    clients: int,
    requests: int,
    duration_s: float,
) -> tuple[list[RequestTiming], int, float]:
    """``clients`` threads, each with its own stream, send ``requests`` requests one after
    another (client ``c``'s ``r``-th request: prompt ``c * requests + r``) until each sent
    them or ``duration_s`` passed; returns (timings, errors, wall time). One request before
    the load warms the server up (untimed)."""
    warm = _StreamClient(url)
    try:
        warm.request(prompts[0], new_tokens, time.monotonic() + TOKEN_WAIT_S)
    finally:
        warm.close()
    timings: list[RequestTiming] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + duration_s
    deadline = stop_at + TOKEN_WAIT_S

    def client(c: int) -> None:
        mine: list[RequestTiming] = []
        try:
            stream = _StreamClient(url)
        except Exception:  # noqa: BLE001 - counted
            with lock:
                errors[0] += 1
            return
        try:
            for r in range(requests):
                if time.monotonic() >= stop_at:
                    break
                try:
                    ids = prompts[(c * requests + r) % len(prompts)]
                    mine.append(stream.request(ids, new_tokens, deadline))
                except Exception:  # noqa: BLE001 - counted and reported; the stream is spent
                    with lock:
                        errors[0] += 1
                    break
        finally:
            stream.close()
            with lock:
                timings.extend(mine)

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration_s + TOKEN_WAIT_S)
    return timings, errors[0], time.perf_counter() - t0


# -- the server ----------------------------------------------------------------------------------
def _infer_func(engine: Any, prompt_tokens: int, new_tokens: int, vocab: int) -> Callable:
    """PyTriton's decoupled infer function: one request's tokens, one response each. A request
    longer than the test's prompt, asking more tokens than the test's or naming ids outside the
    vocabulary is refused (the server answers only what the test sends)."""
    import numpy as np

    def infer_func(requests: list[Any]) -> Iterator[list[dict[str, Any]]]:
        for req in requests:  # no batching: Triton hands over one request at a time
            ids = np.asarray(req["input_ids"], dtype=np.int64).reshape(-1)
            n = int(np.asarray(req["new_tokens"]).reshape(-1)[0])
            if not 1 <= ids.size <= prompt_tokens or not 1 <= n <= new_tokens:
                raise ValueError(
                    f"a request of {ids.size} prompt tokens and {n} new tokens; this server "
                    f"takes 1..{prompt_tokens} and 1..{new_tokens}"
                )
            if ids.min() < 0 or ids.max() >= vocab:
                raise ValueError(f"token ids must be in 0..{vocab - 1}")
            for token in engine.generate(ids, n):
                yield [{"token_id": np.array([token], dtype=np.int64)}]

    return infer_func


@contextlib.contextmanager
def _serving_lm(
    engine: Any,
    prompt_tokens: int,
    new_tokens: int,
    vocab: int,
    port: int | None,
    instances: int,
    log_dir: str,
) -> Iterator[str]:
    """Triton serving ``engine`` as a decoupled model on 127.0.0.1; yields the gRPC url. The
    server stops when the block ends, whatever ends it."""
    import numpy as np
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton

    cfg, ports = triton_config(port, log_dir)
    funcs = [_infer_func(engine, prompt_tokens, new_tokens, vocab) for _ in range(instances)]
    with Triton(config=cfg) as triton:
        try:
            triton.bind(
                model_name=MODEL_NAME,
                infer_func=funcs if instances > 1 else funcs[0],
                inputs=[
                    Tensor(name="input_ids", dtype=np.int64, shape=(-1,)),
                    Tensor(name="new_tokens", dtype=np.int64, shape=(1,)),
                ],
                outputs=[Tensor(name="token_id", dtype=np.int64, shape=(1,))],
                config=ModelConfig(batching=False, decoupled=True),
                strict=True,
            )
            triton.run()
        except Exception as exc:
            raise DeployError(
                f"Triton did not start: {type(exc).__name__}: {exc}\n{server_log_tail(cfg)}"
            ) from exc
        yield f"127.0.0.1:{ports[1]}"


def lm_facts(runtime: Any, path: Path) -> dict[str, int]:
    """The LM's vocabulary and context (``LoadedModel.metadata["lm_config"]``); DeployError
    when the model file is no LM."""
    model = runtime.load(Path(path), None, str(path))
    facts = dict(model.metadata.get("lm_config") or {})
    if not facts.get("vocab_size"):
        raise DeployError(
            f"{path} is not a language model the studio can prompt (no vocabulary size in it): "
            "serve-test the IR of an openvino_stateful step"
        )
    return facts


def check_lengths(facts: dict[str, int], prompt_tokens: int, new_tokens: int) -> None:
    """DeployError when a prompt plus its new tokens is longer than the model's context."""
    context = facts.get("max_position_embeddings")
    if context and prompt_tokens + new_tokens > context:
        raise DeployError(
            f"prompt_tokens {prompt_tokens} + new_tokens {new_tokens} is longer than the "
            f"model's context ({context} tokens): lower benchmark.prompt_tokens or new_tokens"
        )


def serve_lm_test(
    runtime: Any,
    path: Path,
    options: dict[str, Any],
    *,
    prompt_tokens: int,
    new_tokens: int,
    clients: Sequence[int] = (1, 4),
    requests: int = 8,
    duration_s: float = 60.0,
    port: int | None = None,
    modes: Sequence[str] = MODES,
    log: Callable[[str], None] = lambda s: None,
    progress: Callable[[float, str], None] = lambda f, m: None,
    cancel: Callable[[], bool] = _never,
) -> LMServeReport:
    """The served generation load per mode and client count (see the module doc)."""
    check_pytriton()
    check_ports(port)
    facts = lm_facts(runtime, path)
    check_lengths(facts, prompt_tokens, new_tokens)
    prompts = _prompts(prompt_tokens, new_tokens, facts["vocab_size"], max(clients) * requests)
    python_lib_env()
    report = LMServeReport(prompt_tokens, new_tokens)
    steps, done = len(modes) * len(clients), 0
    for mode in modes:
        if cancel():
            raise Cancelled("serve test cancelled")
        progress(done / steps, f"{mode}: compiling the model")
        engine = runtime.serve_lm(path, options, mode)
        try:
            log(f"starting Triton ({mode}) on 127.0.0.1")
            with (
                tempfile.TemporaryDirectory(prefix="accel-triton-") as logs,
                _serving_lm(
                    engine, prompt_tokens, new_tokens, facts["vocab_size"], port, max(clients), logs
                ) as url,
            ):
                for n in clients:
                    if cancel():
                        raise Cancelled("serve test cancelled")
                    progress(done / steps, f"{mode}: {n} client(s)")
                    args = (url, prompts, new_tokens, n, requests, duration_s)
                    wait = duration_s + 2 * TOKEN_WAIT_S
                    tick = _load_ticker(progress, done, steps, f"{mode}: {n} client(s)", duration_s)
                    timings, errors, wall = in_client_process(
                        lm_client_load, args, cancel, wait, tick
                    )
                    point = load_point(mode, n, timings, errors, wall)
                    report.load.append(point)
                    done += 1
                    log(point_line(point))
        finally:
            engine.close()
    progress(1.0, "done")
    return report


def _prompts(prompt_tokens: int, new_tokens: int, vocab: int, n: int) -> list[Any]:
    """``n`` seeded prompts of token ids (seed i for the i-th), as numpy arrays."""
    from accel.generate.settings import GenerateSettings, prompt_ids

    settings = GenerateSettings(prompt_tokens, new_tokens, 1)
    return [prompt_ids(settings, vocab, seed=i)[0].numpy() for i in range(n)]


def _load_ticker(
    progress: Callable[[float, str], None], done: int, steps: int, what: str, duration_s: float
) -> Callable[[float], None]:
    """A load's progress by its time bound, once a second: the clients stop sending at
    ``duration_s`` (or sooner, when their requests are done), so the bar never runs past the
    load's share."""
    last = [0.0]

    def tick(elapsed: float) -> None:
        if elapsed - last[0] < 1.0:
            return
        last[0] = elapsed
        share = min(elapsed / duration_s, 1.0) if duration_s > 0 else 1.0
        progress(
            (done + 0.99 * share) / steps,
            f"{what}, {elapsed:.0f} s (clients stop sending at {duration_s:.0f} s)",
        )

    return tick


def point_line(p: LMLoadPoint) -> str:
    return (
        f"{p.mode:22s} {p.clients:3d} clients: {p.tokens_per_s:8.1f} tokens/s, TTFT p50 "
        f"{p.ttft_p50_ms:.1f} ms p99 {p.ttft_p99_ms:.1f} ms, TPOT p50 {p.tpot_p50_ms:.2f} ms"
        + (f", {p.errors} errors" if p.errors else "")
    )


def serve_lm_run(
    job: Any, emit: Callable[[dict], None], cancel: Callable[[], bool] = _never
) -> LMServeReport:
    """The use case behind the ``serve_lm_test`` job (``accel.job_specs.ServeLMTestJob``)."""
    from accel.events import Log, Progress
    from accel.models.runtime import runtime_for_file

    runtime = runtime_for_file(Path(job.model_path))
    if runtime is None:
        raise DeployError(f"no runtime loads {job.model_path}")
    return serve_lm_test(
        runtime,
        Path(job.model_path),
        dict(job.options),
        prompt_tokens=job.prompt_tokens,
        new_tokens=job.new_tokens,
        clients=job.clients,
        requests=job.requests,
        duration_s=job.duration_s,
        port=job.port,
        log=lambda m: emit(Log("info", m).to_dict()),
        progress=lambda f, m: emit(Progress(-1, f, m).to_dict()),
        cancel=cancel,
    )
