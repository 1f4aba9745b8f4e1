"""The ort_genai pass and runtime (issue 31, part 3): a Hugging Face causal LM built by ONNX
Runtime GenAI's model builder offline, generating through og.Generator; refusals; hostile
params; the exported script; telemetry off. Tiny decoders (tests/accel/tiny_decoder.py), no
timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

pytest.importorskip("onnxruntime_genai")

from accel.errors import NotApplicable  # noqa: E402
from accel.generate.decoders import CacheDecoder, decoder_for  # noqa: E402
from accel.generate.parity import compare_generation_parity, reference_continuation  # noqa: E402
from accel.generate.settings import GenerateSettings, prompt_ids  # noqa: E402
from accel.generate.timing import time_generation  # noqa: E402
from accel.models.inputs import InputSpec  # noqa: E402
from accel.models.loaded import LoadedModel  # noqa: E402
from accel.parity import Tolerances  # noqa: E402
from accel.passes import PassContext, get_pass  # noqa: E402
from tests.accel.tiny_decoder import SPEC, gpt2, llama  # noqa: E402


def _torch_lm(build) -> LoadedModel:
    return LoadedModel(source="t", kind="torch", input_spec=InputSpec.parse(SPEC), module=build())


def _apply(model: LoadedModel, params: dict, work: Path):
    cls = get_pass("ort_genai")
    ctx = PassContext(inputs=model.example_inputs(), work_dir=work, original=model)
    return cls().apply(model, cls.parse_config(params), ctx), ctx


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny Llama and its GenAI folders at fp32 and int4, built once."""
    lm = _torch_lm(llama)
    fp32, ctx = _apply(lm, {"precision": "fp32"}, tmp_path_factory.mktemp("fp32"))
    params = {"precision": "int4", "block_size": 16}  # the embedding quantized too (default)
    int4, _ = _apply(lm, params, tmp_path_factory.mktemp("int4"))
    return lm, fp32, int4, ctx


def _reference(lm: LoadedModel, batch: int = 1):
    prompt = prompt_ids(GenerateSettings(12, 10, batch), 256)
    tokens, logits = reference_continuation(CacheDecoder(lm.module, 22), prompt, 10)
    return prompt, tokens, logits


def test_fp32_generates_through_og_generator_like_the_torch_lm(built):
    lm, fp32, _, ctx = built
    assert fp32.kind == "ort_genai" and (fp32.runtime_file / "genai_config.json").is_file()
    assert not (ctx.work_dir / "hf_model").exists()  # the LM's copy is not kept
    dec = decoder_for(fp32, 22)
    assert dec.kv_cache == "stateful"
    prompt, tokens, logits = _reference(lm)
    par = compare_generation_parity(tokens, logits, dec, prompt, Tolerances(min_cosine=0.9999))
    m = par.metrics()
    assert par.passed and m["tf_cosine_min"] > 0.9999 and m["tf_top1"] == 1.0
    # prompt 12 + 9 tokens fed after it, 1 row, 2 layers x (k, v) x 2 heads x 16, f32
    assert dec.kv_cache_bytes() == 21 * 2 * 2 * 2 * 16 * 4
    with torch.no_grad():
        full = lm.module(input_ids=prompt).logits
    torch.testing.assert_close(fp32.forward({"input_ids": prompt})[0], full, rtol=1e-4, atol=1e-4)


def test_int4_stays_within_a_loose_budget_and_is_smaller(built):
    lm, fp32, int4, _ = built
    prompt, tokens, logits = _reference(lm)
    par = compare_generation_parity(tokens, logits, decoder_for(int4, 22), prompt, Tolerances())
    m = par.metrics()
    assert m["tf_cosine_mean"] > 0.95 and m["tf_top1"] >= 0.5
    assert m["tf_cosine_min"] < 0.99999  # int4 weights change the logits: not the fp32 model
    assert int4.size_bytes < 0.3 * fp32.size_bytes  # the embedding quantized too
    assert int4.format == "ort_genai_int4"
    import onnx

    graph = onnx.load(str(int4.runtime_file / "model.onnx"), load_external_data=False).graph
    ops = {n.op_type for n in graph.node}
    assert {"MatMulNBits", "GatherBlockQuantized"} <= ops


def test_two_generations_in_a_row_give_the_same_tokens(built):
    _, fp32, _, _ = built
    dec = decoder_for(fp32, 30)
    one = prompt_ids(GenerateSettings(9, 8, 1), 256)
    first = time_generation(dec, one, 8).tokens
    other = prompt_ids(GenerateSettings(14, 8, 1), 256, seed=3)
    time_generation(dec, other, 8)
    assert torch.equal(time_generation(dec, one, 8).tokens, first)


def test_a_model_the_builder_does_not_know_is_refused_naming_the_check(tmp_path):
    cls = get_pass("ort_genai")
    with pytest.raises(NotApplicable, match="does not know GPT2LMHeadModel"):
        cls().preflight(_torch_lm(gpt2), cls.parse_config({}))
    conv = LoadedModel(
        source="c",
        kind="torch",
        input_spec=InputSpec.parse("x:float32[1,3,8,8]"),
        module=torch.nn.Conv2d(3, 4, 3),
    )
    with pytest.raises(NotApplicable, match="causal language model"):
        cls().preflight(conv, cls.parse_config({}))


@pytest.mark.parametrize(
    "params",
    [
        {"precision": "int3"},
        {"block_size": 33},
        {"block_size": "32; import os"},
        {"accuracy_level": 0},
        {"precision": "int4", "extra": "x"},
    ],
)
def test_hostile_params_are_refused(params):
    with pytest.raises(ValidationError):
        get_pass("ort_genai").parse_config(params)


def test_the_script_step_compiles_with_literals_only():
    step = get_pass("ort_genai")().to_script(get_pass("ort_genai").parse_config({"block_size": 64}))
    source = "\n".join([*step.imports, *step.helpers, step.code])
    compile(source, "<ort_genai step>", "exec")
    assert "'block_size=64'" in step.code and "accuracy_level=4" in step.code


TINY = str(Path(__file__).with_name("tiny_decoder.py"))


def _script_recipe(params: dict) -> dict:
    bench = {"workload": "generate", "prompt_tokens": 8, "new_tokens": 4, "rounds": 3}
    return {
        "model": {"source": f"{TINY}:llama", "input_spec": SPEC},
        "steps": [{"pass": "ort_genai", "params": params}],
        "benchmark": {**bench, "warmup": 0, "iters": 3},
    }


def test_the_exported_recipe_script_compiles_and_refuses_hostile_values():
    from accel.codegen import recipe_to_script
    from accel.errors import RecipeError

    text = recipe_to_script(_script_recipe({"precision": "int8", "block_size": 128}))
    compile(text, "recipe.py", "exec")
    assert "'block_size=128'" in text and "og.Generator" in text
    assert "og.disable_telemetry_events()" in text
    with pytest.raises((RecipeError, ValueError)):
        recipe_to_script(_script_recipe({"precision": "int4'); import os #"}))


@pytest.mark.slow
def test_the_exported_script_builds_and_generates_with_ort_genai(tmp_path):
    import json
    import subprocess

    from accel.codegen import recipe_to_script

    script = tmp_path / "recipe.py"
    script.write_text(recipe_to_script(_script_recipe({"precision": "fp32"})))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())
    assert len(rows) == 1 and rows[0]["step"] == "ort_genai" and rows[0]["tokens_per_s"] > 0
    assert rows[0]["tf_top1"] == 1.0 and rows[0]["tf_cosine_mean"] > 0.9999
    assert any(out.rglob("genai_config.json"))


def test_telemetry_is_off_when_the_studio_imports_onnxruntime_genai():
    import subprocess

    code = (
        "import accel.privacy as p; p.disable_telemetry(); import onnxruntime_genai as og; "
        "print(sorted(p.EVENTS_OFF))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "'onnxruntime_genai'" in out.stdout


def test_the_tokens_per_s_search_seeds_the_genai_build_and_drops_it_where_it_cannot_run(
    monkeypatch,
):
    from accel.search import space as space_mod
    from accel.search.engine import SearchConfig
    from accel.search.generation import SEEDS, objective_exclusions

    config = SearchConfig(model="hf:llama_small", objective="tokens_per_s")
    assert "ort_genai" not in objective_exclusions(config) and ("ort_genai",) in SEEDS
    from accel.search.generation import generation_seeds

    seeds = [(s.chain, s.values) for s in generation_seeds(config)]
    assert seeds[1:3] == [(("ort_genai",), {}), (("ort_genai",), {"ort_genai.precision": "int8"})]
    layers = space_mod.model_layer_types(llama())
    cpu = space_mod.build_space("torch", "cpu", layer_types=layers)
    assert ("ort_genai",) in cpu.chains and "ort_genai" not in cpu.excluded
    assert not any(c[:1] == ("ort_genai",) and len(c) > 1 for c in cpu.chains)  # terminal
    cuda = space_mod.build_space("torch", "cuda:0", layer_types=layers)
    assert "ort_genai" in cuda.excluded and ("ort_genai",) not in cuda.chains
    real = space_mod._have
    monkeypatch.setattr(space_mod, "_have", lambda lib: lib != "onnxruntime_genai" and real(lib))
    missing = space_mod.build_space("torch", "cpu", layer_types=layers)
    assert missing.excluded["ort_genai"] == "needs onnxruntime_genai (not installed)"


@pytest.mark.slow
@pytest.mark.parametrize("build", ["llama", "gpt2"])
def test_a_tokens_per_s_search_tries_the_genai_build_or_refuses_it_cleanly(tmp_path, build):
    from accel.search import InProcessExecutor, SearchConfig, run_search

    cfg = SearchConfig(
        model=f"{TINY}:{build}",
        input_spec=SPEC,
        objective="tokens_per_s",
        generate={"prompt_tokens": 8, "new_tokens": 4},
        passes=("ort_genai",),
        max_cosine_drop=0.05,
        max_trials=2,
        budget_s=None,
        max_steps=1,
        bench_rounds=3,
        out_dir=str(tmp_path),
    )
    res = run_search(cfg, InProcessExecutor())
    tried = [t for t in res.trials if t.chain == ("ort_genai",)]
    if build == "gpt2":  # refused by the pass's own check before any trial
        assert "does not know GPT2LMHeadModel" in res.space["excluded"]["ort_genai"]
        assert not tried
        return
    ok = [t for t in tried if t.status == "ok"]
    assert ok, [(t.label, t.status, t.error) for t in tried]
    assert ok[0].metrics["tokens_per_s_ratio"] > 0 and ok[0].metrics["tf_top1"] is not None
    assert ok[0].metrics["cosine_drop"] <= 0.05  # the gate it passed
