"""The stateful OpenVINO LM generating through OpenVINO GenAI's LLMPipeline (issue 31, part 3):
``openvino_stateful`` with ``pipeline: genai``. Token ids in, no tokenizer; greedy, exactly
the asked tokens; teacher-forced parity through the same IR's infer request; refusals; the
exported script. Tiny decoders (tests/accel/tiny_decoder.py), no timing."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("openvino_genai")

from accel.errors import AccelError, NotApplicable  # noqa: E402
from accel.generate.decoders import CacheDecoder, decoder_for  # noqa: E402
from accel.generate.parity import compare_generation_parity, reference_continuation  # noqa: E402
from accel.generate.settings import GenerateSettings, prompt_ids  # noqa: E402
from accel.generate.timing import time_generation  # noqa: E402
from accel.parity import Tolerances  # noqa: E402
from accel.passes import get_pass  # noqa: E402
from tests.accel.test_openvino_stateful import EXACT, TINY, _apply, _torch_lm  # noqa: E402
from tests.accel.tiny_decoder import SPEC, gpt2, llama  # noqa: E402

GENAI = {**EXACT, "pipeline": "genai"}


@pytest.fixture(scope="module")
def piped(tmp_path_factory):
    """The tiny Llama and its stateful IR generating through LLMPipeline (f32, f32 KV)."""
    lm = _torch_lm(llama)
    ir, ctx = _apply("openvino_stateful", lm, GENAI, tmp_path_factory.mktemp("genai"))
    return lm, ir, ctx


def _prompt(n: int, batch: int = 1, seed: int = 0):
    return prompt_ids(GenerateSettings(n, 8, batch), 256, seed=seed)


@pytest.mark.parametrize("attention", ["sdpa", "paged"])
def test_the_pipeline_generates_the_torch_lms_greedy_tokens(tmp_path, attention):
    lm = _torch_lm(llama)
    ir, ctx = _apply("openvino_stateful", lm, {**GENAI, "attention": attention}, tmp_path)
    assert ir.session_options["pipeline"] == "genai"
    assert ir.session_options["attention"] == attention
    assert ctx.metrics["pipeline_build_time_s"] > 0
    dec = decoder_for(ir, 40)
    assert type(dec).__name__ == "PipelineDecoder" and dec.kv_cache == "stateful"
    for n, seed in ((12, 0), (5, 3)):  # two calls in a row: nothing carried over
        prompt = _prompt(n, seed=seed)
        want = time_generation(CacheDecoder(lm.module, 40), prompt, 10).tokens
        got = time_generation(dec, prompt, 10)
        assert torch.equal(got.tokens, want)
        assert len(got.token_times) == 10 and got.token_times[0] >= got.start
        assert list(got.token_times) == sorted(got.token_times)


def test_timing_reads_the_clock_before_the_call_and_at_each_streamed_token(piped):
    _, ir, _ = piped
    ticks = iter(range(100))
    timing = time_generation(decoder_for(ir, 30), _prompt(9), 6, clock=lambda: next(ticks))
    assert timing.start == 0 and timing.token_times == (1, 2, 3, 4, 5, 6)
    assert timing.ttft_s == 1 and timing.tpot_s == 1 and timing.tokens.shape == (1, 6)


def test_teacher_forced_parity_runs_the_same_ir_through_the_request(piped):
    lm, ir, _ = piped
    prompt = _prompt(12)
    tokens, logits = reference_continuation(CacheDecoder(lm.module, 22), prompt, 10)
    dec = decoder_for(ir, 22)
    par = compare_generation_parity(tokens, logits, dec, prompt, Tolerances(min_cosine=0.9999))
    m = par.metrics()
    assert par.passed and m["tf_top1"] == 1.0 and m["greedy_agree_tokens"] == 10
    # a perturbed copy is caught by the same path
    bad = _torch_lm(llama)
    with torch.no_grad():
        bad.module.lm_head.weight.mul_(-1.0)
    bad_tokens, bad_logits = reference_continuation(CacheDecoder(bad.module, 22), prompt, 10)
    assert not compare_generation_parity(bad_tokens, bad_logits, dec, prompt, Tolerances()).passed
    # prompt 12 + 9 fed after it, 1 row, 2 layers x (k, v) x 2 heads x 16, f32
    assert dec.kv_cache_bytes() == 21 * 2 * 2 * 2 * 16 * 4


def test_int8_weights_on_top_keep_the_pipeline(piped, tmp_path):
    pytest.importorskip("nncf")
    lm, ir, _ = piped
    int8, _ = _apply("compress_weights_openvino", ir, {"mode": "int8_asym"}, tmp_path)
    assert int8.session_options["pipeline"] == "genai"
    dec = decoder_for(int8, 30)
    assert type(dec).__name__ == "PipelineDecoder"
    assert time_generation(dec, _prompt(7), 5).tokens.shape == (1, 5)


def test_a_batch_is_refused_naming_the_setting(piped):
    _, ir, _ = piped
    with pytest.raises(AccelError, match="batch 1"):
        time_generation(decoder_for(ir, 30), _prompt(6, batch=2), 4)


def test_gpt2_generates_through_the_pipeline(tmp_path):
    lm = _torch_lm(gpt2)
    ir, _ = _apply("openvino_stateful", lm, GENAI, tmp_path)
    prompt = _prompt(10)
    want = time_generation(CacheDecoder(lm.module, 30), prompt, 8).tokens
    assert torch.equal(time_generation(decoder_for(ir, 30), prompt, 8).tokens, want)


def test_without_openvino_genai_the_pass_refuses_naming_the_package(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "openvino_genai" else real(name, *a),
    )
    with pytest.raises(NotApplicable, match="openvino-genai"):
        _apply("openvino_stateful", _torch_lm(llama), GENAI, tmp_path)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"pipeline": "vllm"}, "pipeline"),
        ({"pipeline": "genai'); import os; ('"}, "pipeline"),
        ({"attention": "flash"}, "attention"),
    ],
)
def test_invalid_or_hostile_pipeline_settings_are_refused_naming_them(params, named):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=named):
        get_pass("openvino_stateful").parse_config(params)


def _script_recipe() -> dict:
    bench = {"workload": "generate", "prompt_tokens": 8, "new_tokens": 4, "rounds": 3}
    steps = [
        {"pass": "openvino_stateful", "params": {**GENAI, "attention": "paged"}},
        {"pass": "compress_weights_openvino", "params": {"mode": "int8_asym"}},
    ]
    return {
        "model": {"source": f"{TINY}:llama", "input_spec": SPEC},
        "steps": steps,
        "benchmark": {**bench, "warmup": 0, "iters": 3},
    }


def test_the_exported_script_builds_the_pipeline_with_literals():
    from accel.codegen import recipe_to_script

    text = recipe_to_script(_script_recipe())
    compile(text, "recipe.py", "exec")
    assert "ov_genai_attention = 'PA'" in text and "openvino_genai.LLMPipeline" in text
    assert text.count("ov_pipe = ov_pipeline(ov_path, ov_config, ov_genai_attention)") == 2


@pytest.mark.slow
def test_the_exported_script_generates_through_the_pipeline(tmp_path):
    import json
    import subprocess
    import sys

    from accel.codegen import recipe_to_script

    script = tmp_path / "recipe.py"
    script.write_text(recipe_to_script(_script_recipe()))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())
    assert len(rows) == 2 and rows[0]["tf_top1"] == 1.0 and rows[0]["tf_cosine_mean"] > 0.9999
    assert rows[1]["tf_top1"] >= 0.75 and rows[1]["tokens_per_s"] > 0


def test_the_tokens_per_s_search_starts_from_the_pipeline_at_batch_1_only():
    from accel.search.engine import SearchConfig, _seed_params
    from accel.search.generation import generation_seeds
    from accel.search.space import build_space

    chain = ("openvino_stateful", "compress_weights_openvino")
    one = SearchConfig(model="hf:llama_small", objective="tokens_per_s")
    first = generation_seeds(one)[0]
    assert first.chain == chain and first.values["openvino_stateful.pipeline"] == "genai"
    space = build_space("torch", "cpu", layer_types={"attention", "linear"})
    enqueued = _seed_params(space, chain, first.values)
    assert enqueued["openvino_stateful.pipeline"] == "genai"
    assert enqueued["compress_weights_openvino.mode"] == "int8_asym"
    batched = SearchConfig(model="hf:llama_small", objective="tokens_per_s", generate={"batch": 2})
    seed = next(s for s in generation_seeds(batched) if s.chain == chain)
    assert seed.values["openvino_stateful.pipeline"] == "infer_request"
