"""Serving a language model that generates (issue 31, part 7): the client-side figures on fake
clocks, the engines with and without continuous batching on a tiny stateful LM (the same greedy
tokens as LLMPipeline), the server's refusals, the job's bounds, and one real PyTriton server on
loopback. No timing assertions."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from accel.deploy.serve_lm import (
    CB,
    NO_CB,
    LMServeReport,
    RequestTiming,
    _infer_func,
    check_lengths,
    load_point,
)
from accel.deploy.triton import DeployError
from accel.job_specs import JobParamsError, ServeLMTestJob


# -- the clients' figures ------------------------------------------------------------------------
def test_ttft_tpot_and_tokens_per_s_from_the_clients_clock():
    a = RequestTiming(sent=10.0, token_times=(10.5, 10.7, 10.9, 11.1))  # TTFT 0.5, TPOT 0.2
    b = RequestTiming(sent=11.0, token_times=(11.1, 11.5))  # TTFT 0.1, TPOT 0.4
    c = RequestTiming(sent=12.0, token_times=(13.0,))  # one token: no TPOT
    assert a.ttft_s == pytest.approx(0.5) and a.tpot_s == pytest.approx(0.2)
    assert math.isnan(c.tpot_s) and math.isnan(RequestTiming(1.0, ()).ttft_s)
    p = load_point(CB, 3, [a, b, c], errors=1, wall_s=3.5)
    assert (p.mode, p.clients, p.requests, p.errors, p.tokens) == (CB, 3, 3, 1, 7)
    assert p.tokens_per_s == pytest.approx(7 / 3.5)
    assert p.ttft_p50_ms == pytest.approx(500.0)  # median of 0.5, 0.1, 1.0
    assert p.ttft_p99_ms == pytest.approx(1000.0)
    assert p.tpot_p50_ms == pytest.approx(300.0)  # median of 0.2, 0.4
    empty = load_point(NO_CB, 2, [], errors=2, wall_s=0.0)
    assert empty.tokens_per_s == 0.0 and math.isnan(empty.ttft_p50_ms)


def test_the_report_round_trips_through_json_with_nan_as_null():
    rep = LMServeReport(32, 16)
    rep.load.append(load_point(NO_CB, 4, [RequestTiming(0.0, (1.0, 2.0))], 0, 2.0))
    rep.load.append(load_point(CB, 4, [RequestTiming(0.0, (0.5, 1.0))], 0, 0.5))
    d = rep.to_dict()
    assert d["workload"] == "generate" and rep.gain(4) == pytest.approx(4.0 / 1.0)
    d["load"][0]["tpot_p50_ms"] = None  # the worker protocol sends NaN as null
    back = LMServeReport.from_dict(d)
    assert back.point(CB, 4) == rep.point(CB, 4) and math.isnan(back.load[0].tpot_p50_ms)
    assert back.gain(1) is None


# -- refusals --------------------------------------------------------------------------------------
class _Echo:
    mode = CB

    def generate(self, ids, n):
        yield from range(n)


def test_the_server_answers_only_what_the_test_sends():
    infer = _infer_func(_Echo(), prompt_tokens=8, new_tokens=4, vocab=100)

    def ask(ids, n):
        req = {"input_ids": np.array(ids, dtype=np.int64), "new_tokens": np.array([n])}
        return [int(r[0]["token_id"][0]) for r in infer([req])]

    assert ask([1, 2, 3], 3) == [0, 1, 2]
    for ids, n, why in (
        ([1] * 9, 2, "9 prompt tokens"),
        ([1, 2], 5, "5 new tokens"),
        ([1, 2], -1, "-1 new tokens"),
        ([], 1, "0 prompt tokens"),
        ([1, 100], 1, "0..99"),
        ([-3], 1, "0..99"),
    ):
        with pytest.raises(ValueError, match=why):
            ask(ids, n)


def test_a_prompt_longer_than_the_context_is_refused_naming_the_settings():
    check_lengths({"vocab_size": 10, "max_position_embeddings": 64}, 48, 16)
    with pytest.raises(DeployError, match="prompt_tokens 48 \\+ new_tokens 17.*64 tokens"):
        check_lengths({"vocab_size": 10, "max_position_embeddings": 64}, 48, 17)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"clients": [1, 100000]}, "clients"),
        ({"clients": [0]}, "clients"),
        ({"new_tokens": -4}, "new_tokens"),
        ({"prompt_tokens": 0}, "prompt_tokens"),
        ({"requests": 10**9}, "requests"),
        ({"port": 70000}, "port"),
        ({"options": {"precision": "f32", "cache_dir": "/etc"}}, "cache_dir"),
        ({"options": {"kv_cache_precision": "__import__('os')"}}, "kv_cache_precision"),
    ],
)
def test_hostile_job_values_are_refused_naming_the_field(change, named):
    base = {"model_path": "/m.xml", "prompt_tokens": 8, "new_tokens": 4}
    ServeLMTestJob.from_params(base)
    with pytest.raises(JobParamsError, match=named):
        ServeLMTestJob.from_params({**base, **change})


def test_job_options_become_the_runtimes_session_options():
    job = ServeLMTestJob.from_params(
        {"model_path": "/m.xml", "prompt_tokens": 8, "new_tokens": 4,
         "options": {"precision": "bf16", "precision_auto": True, "threads": 2}}
    )  # fmt: skip
    opts = job.options.session_options()
    assert opts == {
        "device": "CPU",
        "performance_hint": "latency",
        "precision": "bf16",
        "precision_auto": True,
        "kv_cache_precision": "u8",
        "threads": 2,
    }
    assert (
        "precision_auto"
        not in ServeLMTestJob.from_params(
            {"model_path": "/m.xml", "prompt_tokens": 8, "new_tokens": 4}
        ).options.session_options()
    )


# -- the engines on a tiny stateful LM ---------------------------------------------------------------
@pytest.fixture(scope="module")
def stateful_ir(tmp_path_factory):
    pytest.importorskip("openvino_genai")
    from tests.accel.test_openvino_stateful import EXACT, _apply, _torch_lm
    from tests.accel.tiny_decoder import llama

    ir, _ = _apply("openvino_stateful", _torch_lm(llama), EXACT, tmp_path_factory.mktemp("lm"))
    return ir


def _prompts(k: int) -> list[np.ndarray]:
    from accel.generate.settings import GenerateSettings, prompt_ids

    return [prompt_ids(GenerateSettings(6 + i, 5, 1), 256, seed=i)[0].numpy() for i in range(k)]


def _pipeline_tokens(ir, ids, n):
    import openvino as ov
    import openvino_genai as ov_genai

    from accel.runtimes.openvino.genai import greedy_config, pipeline_for

    pipe = pipeline_for(ir.runtime_file, dict(ir.session_options))
    ids = np.asarray(ids, dtype=np.int64).reshape(1, -1)
    inputs = ov_genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
    return list(pipe.generate(inputs, greedy_config(pipe, n)).tokens[0])


@pytest.mark.parametrize("mode", [NO_CB, CB])
def test_both_engines_stream_llmpipelines_greedy_tokens_to_concurrent_requests(stateful_ir, mode):
    from accel.models.runtime import runtime_of

    prompts = _prompts(4)
    want = [_pipeline_tokens(stateful_ir, p, 7) for p in prompts]
    engine = runtime_of(stateful_ir).serve_lm(
        stateful_ir.runtime_file, dict(stateful_ir.session_options), mode
    )
    try:
        assert engine.mode == mode
        got: list = [None] * len(prompts)

        def client(i: int) -> None:
            got[i] = list(engine.generate(prompts[i], 7))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert got == want
        early = engine.generate(prompts[0], 7)  # a client that goes away after one token
        assert next(early) == want[0][0]
        early.close()
        assert list(engine.generate(prompts[1], 3)) == want[1][:3]  # the engine goes on
    finally:
        engine.close()


def test_the_continuous_pipeline_compiles_through_the_known_crash_check(stateful_ir, monkeypatch):
    from accel.runtimes.openvino import genai, known_crashes

    seen = []
    real = known_crashes.safe_config

    def spy(model, config, options, device="CPU"):
        seen.append((dict(config), dict(options), device))
        return real(model, config, options, device)

    monkeypatch.setattr(known_crashes, "safe_config", spy)
    opts = {**stateful_ir.session_options, "threads": 1, "precision_auto": True}
    genai.continuous_pipeline_for(stateful_ir.runtime_file, opts)
    ((config, options, device),) = seen
    assert device == "CPU" and config["INFERENCE_NUM_THREADS"] == 1
    assert options["precision_auto"] is True


def test_a_model_that_is_no_stateful_lm_gets_no_engine(tmp_path):
    pytest.importorskip("openvino_genai")
    import openvino as ov

    from accel.errors import AccelError
    from accel.models.runtime import get_runtime
    from accel.runtimes.openvino.ir import save_ir

    x = ov.opset13.parameter([1, 4], ov.Type.f32, name="x")
    w = ov.opset13.constant(np.full([1, 4], 2.0, dtype=np.float32))
    path = save_ir(ov.Model([ov.opset13.multiply(x, w)], [x], "plain"), tmp_path / "plain.xml")
    with pytest.raises(AccelError, match="not a stateful OpenVINO LM"):
        get_runtime("openvino").serve_lm(path, {}, CB)
    with pytest.raises(AccelError, match="cannot serve generation"):
        get_runtime("onnx").serve_lm(path, {}, CB)


# -- a real server on loopback -------------------------------------------------------------------------
@pytest.mark.slow  # two Triton servers, about 20 s
def test_served_by_triton_to_streaming_clients_with_and_without_continuous_batching(stateful_ir):
    pytest.importorskip("pytriton")
    from accel.deploy.serve_lm import serve_lm_test
    from accel.models.runtime import runtime_of

    lines: list[str] = []
    report = serve_lm_test(
        runtime_of(stateful_ir),
        stateful_ir.runtime_file,
        dict(stateful_ir.session_options),
        prompt_tokens=8,
        new_tokens=4,
        clients=[2],
        requests=2,
        duration_s=60,
        log=lines.append,
    )
    assert [(p.mode, p.clients) for p in report.load] == [(NO_CB, 2), (CB, 2)]
    for p in report.load:
        assert (p.requests, p.errors, p.tokens) == (4, 0, 16)
        assert p.tokens_per_s > 0 and 0 < p.ttft_p50_ms <= p.ttft_p99_ms and p.tpot_p50_ms > 0
    assert report.gain(2) is not None
    assert any("starting Triton (continuous batching) on 127.0.0.1" in line for line in lines)


def test_a_load_reports_progress_by_its_time_bound_once_a_second():
    """A long load moves the bar by time (the clients stop at the duration), never past the
    load's share, at most once a second."""
    from accel.deploy.serve_lm import _load_ticker

    seen: list[tuple[float, str]] = []
    tick = _load_ticker(lambda f, m: seen.append((f, m)), 1, 4, "cb: 2 client(s)", 100.0)
    for t in (0.1, 0.5, 1.0, 1.5, 50.0, 50.3, 250.0):
        tick(t)
    assert [round(f, 4) for f, _ in seen] == [
        round((1 + 0.99 * 0.01) / 4, 4),
        round((1 + 0.99 * 0.5) / 4, 4),
        round((1 + 0.99) / 4, 4),
    ]
    assert seen[1][1] == "cb: 2 client(s), 50 s (clients stop sending at 100 s)"
