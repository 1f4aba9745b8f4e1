"""The generation workload (issue 31): its settings and their errors, TTFT/TPOT on a fake
clock, teacher-forced parity, and a recipe run with ``workload: generate``."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from accel.errors import RecipeError
from accel.generate.decoders import CacheDecoder, RecomputeDecoder, decoder_for
from accel.generate.parity import (
    compare_generation_parity,
    first_divergence,
    reference_continuation,
)
from accel.generate.settings import GenerateError, GenerateSettings, check_fits, prompt_ids
from accel.generate.step_timing import comparison_timing
from accel.generate.timing import compare_generation, time_alone, time_generation
from accel.models.loaded import LoadedModel
from accel.parity import Tolerances
from accel.recipe import load_recipe

TINY = str(Path(__file__).with_name("tiny_decoder.py"))
from tests.accel.tiny_decoder import SPEC, gpt2, llama  # noqa: E402


def _recipe(bench: dict, steps: list | None = None) -> dict:
    return {
        "model": {"source": f"{TINY}:llama", "input_spec": SPEC},
        "steps": steps or [],
        "benchmark": {"workload": "generate", **bench},
    }


# -- settings -------------------------------------------------------------------------------


def test_defaults_are_128_64_1_and_unset_values_stay_out_of_the_stored_recipe():
    r = load_recipe(_recipe({}))
    assert GenerateSettings.from_bench(r.benchmark) == GenerateSettings(128, 64, 1)
    stored = r.to_dict()["benchmark"]
    assert stored["workload"] == "generate" and "prompt_tokens" not in stored
    plain = load_recipe({"model": {"source": "zoo:mlp"}})
    assert not {"workload", "new_tokens", "batch"} & set(plain.to_dict()["benchmark"])


@pytest.mark.parametrize(
    ("bench", "named"),
    [
        ({"new_tokens": 0}, "benchmark.new_tokens"),
        ({"prompt_tokens": -3}, "benchmark.prompt_tokens"),
        ({"batch": 0}, "benchmark.batch"),
        ({"workload": "generate_fast"}, "benchmark.workload"),
        ({"new_tokens": 10**18}, "benchmark.new_tokens"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(bench, named):
    with pytest.raises(RecipeError) as e:
        load_recipe(_recipe(bench))
    assert named in str(e.value)


def test_a_prompt_longer_than_the_context_names_the_setting():
    config = llama().config  # 64 positions
    with pytest.raises(
        GenerateError, match=r"benchmark.prompt_tokens is 64, longer than the model's context of 64"
    ):
        check_fits(GenerateSettings(64, 1, 1), config)
    with pytest.raises(GenerateError, match=r"prompt_tokens \+ new_tokens is 70.*at most 24"):
        check_fits(GenerateSettings(40, 30, 1), config)
    check_fits(GenerateSettings(40, 24, 1), config)  # exactly fits
    with pytest.raises(GenerateError, match="benchmark.new_tokens must be at least 1"):
        GenerateSettings(16, 0, 1)


def test_hostile_values_cannot_reach_code_through_the_new_settings():
    for value in ("1; import os", "__import__('os')", 1.5, True, [1]):
        with pytest.raises(RecipeError):
            load_recipe(_recipe({"prompt_tokens": value}))
    with pytest.raises(RecipeError):
        load_recipe(_recipe({"workload": "generate\nimport os"}))
    with pytest.raises(GenerateError):
        GenerateSettings.from_bench({"batch": "2"})


def test_prompts_are_seeded_token_ids_in_the_vocabulary():
    s = GenerateSettings(12, 4, 3)
    a, b, c = prompt_ids(s, 50, seed=1), prompt_ids(s, 50, seed=1), prompt_ids(s, 50, seed=2)
    assert a.shape == (3, 12) and a.dtype == torch.int64 and int(a.max()) < 50
    assert torch.equal(a, b) and not torch.equal(a, c)


# -- timing on a fake clock -------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeDecoder:
    """Prefill costs ``prefill_s`` on the clock, each step ``step_s``; always predicts 3."""

    kv_cache = "none"

    def __init__(self, clock: FakeClock, prefill_s: float, step_s: float, vocab: int = 8):
        self.clock, self.prefill_s, self.step_s, self.vocab = clock, prefill_s, step_s, vocab

    def _logits(self, batch: int) -> torch.Tensor:
        x = torch.zeros(batch, self.vocab)
        x[:, 3] = 1.0
        return x

    def prefill(self, ids):
        self.clock.now += self.prefill_s
        return self._logits(ids.shape[0])

    def step(self, ids):
        self.clock.now += self.step_s
        return self._logits(ids.shape[0])

    def kv_cache_bytes(self) -> int:
        return 0


def test_ttft_tpot_and_tokens_per_s_on_a_fake_clock():
    clock = FakeClock()
    t = time_generation(
        FakeDecoder(clock, 0.5, 0.1), torch.zeros(2, 4, dtype=torch.long), 11, clock
    )
    assert t.ttft_s == pytest.approx(0.5)
    assert t.tpot_s == pytest.approx(0.1)
    assert t.total_s == pytest.approx(1.5)
    assert t.tokens_per_s == pytest.approx(2 * 11 / 1.5)  # both rows of the batch count
    assert t.tokens.shape == (2, 11) and bool((t.tokens == 3).all())
    one = time_generation(
        FakeDecoder(clock, 0.5, 0.1), torch.zeros(1, 4, dtype=torch.long), 1, clock
    )
    assert one.tpot_s is None and one.tokens_per_s == pytest.approx(2.0)


def test_alternating_rounds_give_ratios_with_intervals():
    clock = FakeClock()
    slow, fast = FakeDecoder(clock, 0.4, 0.2), FakeDecoder(clock, 0.1, 0.1)
    cmp = compare_generation(slow, fast, torch.zeros(1, 4, dtype=torch.long), 5, 4, clock=clock)
    m = cmp.metrics()
    assert m["ttft_ms"] == pytest.approx(100.0) and m["baseline_ttft_ms"] == pytest.approx(400.0)
    assert m["tpot_ms"] == pytest.approx(100.0) and m["baseline_tpot_ms"] == pytest.approx(200.0)
    assert m["ttft_speedup"] == pytest.approx(4.0)
    assert m["tokens_per_s_ratio"] == pytest.approx((0.4 + 4 * 0.2) / (0.1 + 4 * 0.1))
    assert m["tokens_per_s_ratio_low"] <= m["tokens_per_s_ratio"] <= m["tokens_per_s_ratio_high"]
    assert m["generation_noisy"] == 0.0 and len(cmp.candidate.ttft_s) == 4
    alone = time_alone(fast, torch.zeros(1, 4, dtype=torch.long), 3, rounds=2, clock=clock)
    assert alone.metrics()["tpot_ms"] == pytest.approx(100.0)


def test_shorter_rounds_project_tokens_per_s_from_ttft_and_tpot():
    clock = FakeClock()
    slow, fast = FakeDecoder(clock, 0.4, 0.2), FakeDecoder(clock, 0.1, 0.1)

    class Counted(FakeDecoder):
        prefills = 0

        def prefill(self, ids):
            Counted.prefills += 1
            return super().prefill(ids)

    ref = Counted(clock, 0.4, 0.2)
    prompt = torch.zeros(1, 4, dtype=torch.long)
    cmp = compare_generation(
        ref, fast, prompt, 64, 3, clock=clock, timed_tokens=8, reference_warm=True
    )
    assert Counted.prefills == 3  # no warm-up round for a warm reference, 8 tokens a round
    assert cmp.timed_tokens == 8 and cmp.reference.projected_to == 64
    m = cmp.metrics()
    # the figures are for 64 new tokens: n / (TTFT + (n - 1) * TPOT)
    assert m["baseline_tokens_per_s"] == pytest.approx(64 / (0.4 + 63 * 0.2))
    assert m["tokens_per_s"] == pytest.approx(64 / (0.1 + 63 * 0.1))
    assert m["tokens_per_s_ratio"] == pytest.approx((0.4 + 63 * 0.2) / (0.1 + 63 * 0.1))
    assert m["tpot_ms"] == pytest.approx(100.0) and m["ttft_speedup"] == pytest.approx(4.0)
    timing = comparison_timing(cmp)
    assert "projected to 64 new tokens" in timing.note and "timed over 8" in timing.note
    # rounds as long as the generation: measured, nothing projected
    full = compare_generation(slow, fast, prompt, 8, 2, clock=clock, timed_tokens=16)
    assert full.timed_tokens is None and full.reference.projected_to is None
    assert "projected" not in comparison_timing(full).note
    assert full.metrics()["tokens_per_s"] == pytest.approx(8 / (0.1 + 7 * 0.1))


# -- decoders and parity ----------------------------------------------------------------------


@pytest.mark.parametrize("build", [llama, gpt2])
def test_cache_decoding_matches_the_full_forward(build):
    model = build()
    ids = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(input_ids=ids).logits
    for static in (False, True):
        model.generation_config.cache_implementation = "static" if static else None
        dec = CacheDecoder(model, 24)
        assert dec.kv_cache == ("static" if static else "dynamic")
        for _ in range(2):  # a second generation reuses (static) or renews (dynamic) the cache
            last = dec.prefill(ids[:, :12])
            torch.testing.assert_close(last, full[:, 11], rtol=1e-4, atol=1e-4)
            for i in range(12, 20):
                last = dec.step(ids[:, i : i + 1])
            torch.testing.assert_close(last, full[:, 19], rtol=1e-4, atol=1e-4)
        assert dec.kv_cache_bytes() > 0


def test_recompute_decoder_agrees_with_the_cache_decoder():
    from accel.models.inputs import InputSpec

    module = llama()
    lm = LoadedModel(source="t", kind="torch", input_spec=InputSpec.parse(SPEC), module=module)
    prompt = prompt_ids(GenerateSettings(10, 6, 1), 256)
    cache = decoder_for(lm, 16)
    assert isinstance(cache, CacheDecoder)
    a = time_generation(cache, prompt, 6).tokens
    b = time_generation(RecomputeDecoder(lm), prompt, 6).tokens
    assert torch.equal(a, b)
    with pytest.raises(GenerateError, match="input_ids"):
        RecomputeDecoder(lm.replace(input_spec=InputSpec.parse("x:float32[1,4]")))


def test_teacher_forced_parity_is_exact_against_itself_and_catches_a_perturbed_copy():
    model = llama()
    prompt = prompt_ids(GenerateSettings(12, 10, 2), 256)
    ref = CacheDecoder(model, 22)
    tokens, logits = reference_continuation(ref, prompt, 10)
    assert tokens.shape == (2, 10) and logits.shape == (2, 10, 256)
    tol = Tolerances(min_cosine=0.999)
    same = compare_generation_parity(tokens, logits, CacheDecoder(model, 22), prompt, tol)
    assert same.passed and same.first_divergence is None
    m = same.metrics()
    assert m["tf_cosine_min"] == pytest.approx(1.0) and m["tf_top1"] == 1.0
    assert m["tf_kl_max"] == pytest.approx(0.0, abs=1e-9) and m["greedy_agree_tokens"] == 10

    bent = copy.deepcopy(model)
    with torch.no_grad():
        w = bent.model.layers[1].mlp.down_proj.weight
        w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(1)) * w.std() * 3)
    diff = compare_generation_parity(tokens, logits, CacheDecoder(bent, 22), prompt, tol)
    assert not diff.passed and "logits_teacher_forced" in (diff.report.first_failure or "")
    dm = diff.metrics()
    assert dm["tf_cosine_mean"] < 0.999 and dm["tf_kl_mean"] > 1e-4
    assert len(diff.to_dict()["teacher_forced"]["cosine"]) == 10


def test_a_stored_continuation_is_reused_and_a_wrong_one_is_computed_again(tmp_path, monkeypatch):
    from accel.generate import evaluate
    from accel.models.inputs import InputSpec

    lm = LoadedModel(source="t", kind="torch", input_spec=InputSpec.parse(SPEC), module=llama())
    bench = {"prompt_tokens": 8, "new_tokens": 5}
    store = tmp_path / "generation" / "ref.pt"
    first = evaluate.generation_baseline(lm, bench, seed=3, timed=False, store=store)
    assert store.is_file() and first.warm

    def must_not_run(*a, **k):
        raise AssertionError("the stored continuation was not used")

    monkeypatch.setattr(evaluate, "reference_continuation", must_not_run)
    again = evaluate.generation_baseline(lm, bench, seed=3, timed=False, store=store)
    assert not again.warm  # read back: its decoder has not generated in this process
    assert torch.equal(again.tokens, first.tokens) and torch.equal(again.logits, first.logits)
    monkeypatch.undo()

    # other settings than the stored ones, or a file that is not tensors: computed again
    longer = evaluate.generation_baseline(
        lm, {"prompt_tokens": 8, "new_tokens": 6}, seed=3, timed=False, store=store
    )
    assert longer.warm and longer.tokens.shape == (1, 6)
    store.write_bytes(b"not a tensor file")
    redone = evaluate.generation_baseline(lm, bench, seed=3, timed=False, store=store)
    assert redone.warm and torch.equal(redone.tokens, first.tokens)


def test_first_divergence_is_the_first_differing_position_of_any_row():
    a = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert first_divergence(a, a.clone()) is None
    b = a.clone()
    b[1, 2] = 0
    assert first_divergence(a, b) == 2


# -- a recipe run -----------------------------------------------------------------------------


def test_a_recipe_with_workload_generate_times_and_gates_each_step(tmp_path):
    from accel.runner import run_recipe

    bench = {"prompt_tokens": 16, "new_tokens": 8, "rounds": 3, "warmup": 0, "iters": 3}
    steps = [{"pass": "quantize_weight_only", "params": {"bits": 8}}]
    r = _recipe(bench, steps)
    r["gates"] = {"min_cosine": 0.99, "min_top1": 0.9}
    result = run_recipe(r, out_dir=tmp_path, trust_recipe_code=True)
    assert result.status == "succeeded", result.error
    assert result.baseline["ttft_ms"] > 0 and result.baseline["kv_cache_bytes"] > 0
    (step,) = result.steps
    m = step.metrics
    assert step.status == "succeeded" and step.parity["passed"]
    assert m["tf_top1"] >= 0.9 and m["tf_cosine_min"] > 0.99
    assert m["tokens_per_s_ratio_low"] <= m["tokens_per_s_ratio"] <= m["tokens_per_s_ratio_high"]
    t = step.timing  # the row's one timing: speedup = the tokens/s ratio
    assert t.speedup == m["tokens_per_s_ratio"] and t.consistent()
    assert t.p50_ref_ms > 0 and t.p50_step_ms > 0 and "generation" in t.note
    assert result.baseline_timing.mode == "baseline" and result.baseline_timing.p50_ms > 0
    assert m["weights_bytes"] < result.baseline["weights_bytes"]
    saved = list(result.run_dir.glob("step_*/generation.json"))
    assert len(saved) == 1 and "teacher_forced" in saved[0].read_text()


def test_a_prompt_too_long_for_the_model_fails_the_run_naming_the_setting(tmp_path):
    from accel.runner import run_recipe

    bench = {"prompt_tokens": 60, "new_tokens": 8, "rounds": 3}
    steps = [{"pass": "bf16"}]
    result = run_recipe(_recipe(bench, steps), out_dir=tmp_path, trust_recipe_code=True)
    assert result.status == "failed"
    assert "prompt_tokens + new_tokens is 68" in (result.error or "")


# -- passes on a tiny decoder, timed generating ------------------------------------------------


def _run_generate(tmp_path, steps, gates=None, new_tokens=6):
    from accel.runner import run_recipe

    bench = {"prompt_tokens": 12, "new_tokens": new_tokens, "rounds": 3, "warmup": 0, "iters": 3}
    r = _recipe(bench, steps)
    r["gates"] = gates or {"min_cosine": 0.99}
    return run_recipe(r, out_dir=tmp_path, trust_recipe_code=True)


def test_int4_weight_only_torch_keeps_teacher_forced_logits_close(tmp_path):
    steps = [{"pass": "quantize_weight_only", "params": {"bits": 4, "group_size": 32}}]
    result = _run_generate(tmp_path, steps, {"min_cosine": 0.95})
    assert result.status == "succeeded", result.error
    (step,) = result.steps
    assert step.status == "succeeded", step.parity
    m = step.metrics
    assert 0.95 < m["tf_cosine_mean"] < 1.0  # int4 rounding is seen, and small
    assert m["weights_bytes"] < 0.6 * result.baseline["weights_bytes"]


def test_static_kv_cache_captures_a_fixed_shape_decode_step(tmp_path):
    steps = [{"pass": "static_kv_cache", "params": {"backend": "eager"}}]
    result = _run_generate(tmp_path, steps)
    assert result.status == "succeeded", result.error
    (step,) = result.steps
    assert step.status == "succeeded" and step.details["cache_implementation"] == "static"
    m = step.metrics
    assert m["tf_cosine_min"] > 0.99999 and m["greedy_agree_tokens"] == 6
    assert m["kv_cache_bytes"] > result.baseline["kv_cache_bytes"]  # preallocated full length


def test_static_kv_cache_refuses_a_model_without_a_kv_cache(tmp_path):
    from accel.runner import run_recipe

    r = {
        "model": {"source": "zoo:mlp(in_features=8, hidden=8)", "input_spec": "x:float32[2,8]"},
        "steps": [{"pass": "static_kv_cache"}],
    }
    result = run_recipe(r, out_dir=tmp_path)
    assert result.status == "failed" or result.steps[0].status in ("failed", "skipped")
    text = (result.error or "") + " ".join(s.error or "" for s in result.steps)
    assert "static_kv_cache needs a Hugging Face causal language model" in text


def test_static_kv_cache_is_not_applicable_to_an_encoder_decoder():
    """hf:t5_small: static_kv_cache was refused as 'torch.compile (inductor) failed:
    ValueError: You must specify exactly one of input_ids or inputs_embeds'. The cause is not
    the compiler: its warm-up generation calls the model as a decoder-only LM (input_ids and a
    cache), and T5's decoder then has no decoder_input_ids. Reproduced, then the pass says so
    before any work."""
    from transformers import T5Config, T5ForConditionalGeneration

    from accel.errors import NotApplicable
    from accel.passes.static_cache import _lm

    torch.manual_seed(0)
    cfg = T5Config(
        vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, use_cache=True
    )
    model = T5ForConditionalGeneration(cfg).eval()
    ids = torch.randint(0, 64, (1, 5))
    with pytest.raises(
        ValueError, match="You must specify exactly one of input_ids or inputs_embeds"
    ):
        time_generation(CacheDecoder(model, 8), ids, 2)
    with pytest.raises(NotApplicable, match="T5ForConditionalGeneration is an encoder-decoder"):
        _lm(model)


@pytest.mark.slow
def test_openvino_int8_weights_generate_without_a_kv_cache(tmp_path):
    pytest.importorskip("nncf")
    steps = [
        {"pass": "export_onnx"},
        {"pass": "openvino", "params": {"precision": "f32"}},
        {"pass": "compress_weights_openvino", "params": {"mode": "int8_asym"}},
    ]
    result = _run_generate(tmp_path, steps, {"min_cosine": 0.99}, new_tokens=4)
    assert result.status == "succeeded", result.error
    _onnx, ov, compressed = result.steps
    assert compressed.status == "succeeded", compressed.parity
    assert "KV cache: original dynamic, step none" in compressed.timing.note
    assert compressed.metrics["tf_top1"] >= 0.75
    assert compressed.metrics["weights_bytes"] < 0.6 * ov.metrics["weights_bytes"]


# -- search ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_tokens_per_s_search_gates_on_teacher_forced_logits(tmp_path):
    from accel.search import InProcessExecutor, SearchConfig, run_search

    cfg = SearchConfig(
        model=f"{TINY}:llama",
        input_spec=SPEC,
        objective="tokens_per_s",
        generate={"prompt_tokens": 8, "new_tokens": 20},
        passes=("quantize_weight_only", "bf16", "export_onnx"),
        max_cosine_drop=0.05,
        max_trials=3,
        budget_s=None,
        max_steps=1,
        bench_rounds=3,
        out_dir=str(tmp_path),
    )
    res = run_search(cfg, InProcessExecutor())
    assert (
        "export_onnx" in res.space["excluded"]
        and "KV cache" in res.space["excluded"]["export_onnx"]
    )
    done = [t for t in res.trials if t.status in ("ok", "gate_failed")]
    assert done, [(t.label, t.status, t.error) for t in res.trials]
    for t in done:
        assert t.metrics["tf_top1"] is not None and t.metrics["cosine_drop"] is not None
    # the original is the reference: gated against itself, not timed against itself
    original = res.trials[0]
    assert original.chain == () and original.timing is None
    assert original.metrics.get("tokens_per_s_ratio") is None
    ok = [t for t in done if t.status == "ok" and t.chain]
    assert all(t.metrics["tokens_per_s_ratio"] > 0 for t in ok)
    for t in ok:  # 16 new tokens a round, tokens/s projected to the 20 asked for
        assert "projected to 20 new tokens" in t.timing.note, t.timing.note
    # the original's continuation was generated once and kept for the other trials
    assert len(list((tmp_path / "cache" / "generation").glob("*.pt"))) == 1
    recipe = res.recipe_for(res.best) if res.best is not None else None
    if recipe is not None:
        assert recipe["benchmark"]["workload"] == "generate"
        assert recipe["benchmark"]["prompt_tokens"] == 8


# -- script export ----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_exported_script_generates_and_reports_the_same_figures(tmp_path):
    import json
    import subprocess
    import sys

    from accel.codegen import recipe_to_script
    from accel.runner import run_recipe

    bench = {"prompt_tokens": 10, "new_tokens": 5, "rounds": 3, "warmup": 0, "iters": 3}
    steps = [
        {"pass": "quantize_weight_only", "params": {"bits": 8}},
        {"pass": "static_kv_cache", "params": {"backend": "eager"}},
    ]
    recipe = _recipe(bench, steps)
    res = run_recipe(recipe, out_dir=tmp_path / "run", trust_recipe_code=True)
    assert res.ok, res.error
    script = tmp_path / "recipe.py"
    script.write_text(recipe_to_script(recipe))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("generate: TTFT") == 2, proc.stdout
    rows = json.loads((out / "results.json").read_text())
    for row, step in zip(rows, res.steps, strict=True):
        for key in ("ttft_ms", "tpot_ms", "tokens_per_s", "tokens_per_s_ratio"):
            assert row[key] > 0 and step.metrics[key] > 0
        assert row["tf_top1"] == pytest.approx(step.metrics["tf_top1"])
        assert row["tf_cosine_mean"] == pytest.approx(step.metrics["tf_cosine_mean"], abs=1e-6)


def test_the_corpus_decoders_fit_the_default_workload():
    import transformers

    from accel.models.corpus import CORPUS
    from accel.models.corpus_decoders import DECODERS

    for d in DECODERS:
        entry = CORPUS[d.name]
        assert entry.task == "causal-lm" and f"{{0..{d.vocab}}}" in entry.input_spec
        config = getattr(transformers, d.config_cls)(vocab_size=d.vocab, **d.config)
        check_fits(GenerateSettings(), config)  # prompt 128 + 64 new fits every context
    llama = next(d for d in DECODERS if d.name == "hf:tinyllama_1b")
    assert llama.config["num_hidden_layers"] == 22 and llama.config["hidden_size"] == 2048
