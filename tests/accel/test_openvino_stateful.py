"""The stateful OpenVINO LM path (issue 31, part 3): a Hugging Face causal LM exported with its
KV cache in the infer request's state, generating through it; NNCF weights on top; refusals;
the exported script. Tiny decoders (tests/accel/tiny_decoder.py), no timing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("openvino")

from accel.errors import NotApplicable, PassError, RecipeError  # noqa: E402
from accel.generate.decoders import CacheDecoder, decoder_for  # noqa: E402
from accel.generate.parity import compare_generation_parity, reference_continuation  # noqa: E402
from accel.generate.settings import GenerateSettings, prompt_ids  # noqa: E402
from accel.generate.timing import time_generation  # noqa: E402
from accel.models.inputs import InputSpec  # noqa: E402
from accel.models.loaded import LoadedModel  # noqa: E402
from accel.parity import Tolerances  # noqa: E402
from accel.passes import PassContext, get_pass  # noqa: E402
from tests.accel.tiny_decoder import SPEC, gpt2, llama  # noqa: E402

TINY = str(Path(__file__).with_name("tiny_decoder.py"))
EXACT = {"precision": "f32", "kv_cache_precision": "f32"}


def _torch_lm(build) -> LoadedModel:
    return LoadedModel(source="t", kind="torch", input_spec=InputSpec.parse(SPEC), module=build())


def _apply(name: str, model: LoadedModel, params: dict, work: Path):
    cls = get_pass(name)
    ctx = PassContext(inputs=model.example_inputs(), work_dir=work, original=model)
    return cls().apply(model, cls.parse_config(params), ctx), ctx


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The tiny Llama and its stateful IR (f32, f32 KV cache), converted once."""
    lm = _torch_lm(llama)
    ir, ctx = _apply("openvino_stateful", lm, EXACT, tmp_path_factory.mktemp("stateful"))
    return lm, ir, ctx


def _reference(lm: LoadedModel, batch: int = 2):
    prompt = prompt_ids(GenerateSettings(12, 10, batch), 256)
    tokens, logits = reference_continuation(CacheDecoder(lm.module, 22), prompt, 10)
    return prompt, tokens, logits


def test_the_stateful_ir_generates_through_its_state_like_the_torch_lm(exported):
    from accel.runtimes.openvino.ir import read_ir
    from accel.runtimes.openvino.stateful import is_stateful_lm

    lm, ir, ctx = exported
    assert is_stateful_lm(read_ir(ir.runtime_file)) and ctx.details["state_variables"] == 4
    assert ir.session_options["kv_cache_precision"] == "f32"
    assert ctx.details["kv_cache_precision_ran"] == "f32"
    dec = decoder_for(ir, 22)
    assert dec.kv_cache == "stateful"
    prompt, tokens, logits = _reference(lm)
    par = compare_generation_parity(tokens, logits, dec, prompt, Tolerances(min_cosine=0.9999))
    m = par.metrics()
    assert par.passed and m["tf_cosine_min"] > 0.9999 and m["tf_top1"] == 1.0
    # prompt 12 + 9 tokens fed after it, 2 rows, 2 layers x (k, v) x 2 heads x 16, f32
    assert dec.kv_cache_bytes() == 21 * 2 * 2 * 2 * 2 * 16 * 4
    # The plain forward (the runner's parity, the forward workload): the whole sequence.
    with torch.no_grad():
        full = lm.module(input_ids=prompt).logits
    torch.testing.assert_close(ir.forward({"input_ids": prompt})[0], full, rtol=1e-4, atol=1e-4)


def test_two_generations_in_a_row_give_the_same_tokens(exported):
    lm, ir, _ = exported
    dec = decoder_for(ir, 30)
    one = prompt_ids(GenerateSettings(9, 8, 1), 256)
    first = time_generation(dec, one, 8).tokens
    other = prompt_ids(GenerateSettings(14, 8, 1), 256, seed=3)
    time_generation(dec, other, 8)  # a longer generation in between: the state is reset
    assert torch.equal(time_generation(dec, one, 8).tokens, first)
    assert torch.equal(time_generation(CacheDecoder(lm.module, 30), one, 8).tokens, first)


def test_int8_weights_on_top_keep_the_state_and_the_logits(exported, tmp_path):
    pytest.importorskip("nncf")
    lm, ir, _ = exported
    int8, _ = _apply("compress_weights_openvino", ir, {"mode": "int8_asym"}, tmp_path)
    assert int8.session_options["kv_cache_precision"] == "f32"  # kept from the export
    dec = decoder_for(int8, 22)
    assert dec.kv_cache == "stateful"
    prompt, tokens, logits = _reference(lm)
    m = compare_generation_parity(tokens, logits, dec, prompt, Tolerances()).metrics()
    assert m["tf_cosine_mean"] > 0.99 and m["tf_top1"] >= 0.9
    assert int8.size_bytes < 0.6 * ir.size_bytes


def test_int4_weights_adjust_the_group_where_it_does_not_divide(exported, tmp_path):
    pytest.importorskip("nncf")
    from accel.errors import PassError

    lm, ir, _ = exported
    int4 = {"mode": "int4_sym", "group_size": 128}  # the tiny LM's layers take 64 inputs
    with pytest.raises(PassError, match="group_size"):
        _apply("compress_weights_openvino", ir, {**int4, "group_size_fallback": "error"}, tmp_path)
    small, ctx = _apply("compress_weights_openvino", ir, int4, tmp_path / "adjust")
    assert ctx.details["group_size_fallback"] == "adjust"
    dec = decoder_for(small, 22)
    prompt, tokens, logits = _reference(lm)
    m = compare_generation_parity(tokens, logits, dec, prompt, Tolerances()).metrics()
    assert dec.kv_cache == "stateful" and m["tf_cosine_mean"] > 0.9
    assert small.size_bytes < 0.55 * ir.size_bytes  # embeddings stay int8 (backup)
    step = get_pass("compress_weights_openvino")
    script = step().to_script(step.parse_config(int4))
    assert "group_size_fallback_mode=GroupSizeFallbackMode.ADJUST" in script.code
    compile(script.code, "step", "exec")
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="group_size_fallback"):
        step.parse_config({"group_size_fallback": "os.system"})


def test_gpt2_exports_with_its_learned_positions(tmp_path):
    lm = _torch_lm(gpt2)
    ir, _ = _apply("openvino_stateful", lm, {**EXACT, "kv_cache_precision": "u8"}, tmp_path)
    prompt, tokens, logits = _reference(lm, batch=1)
    m = compare_generation_parity(tokens, logits, decoder_for(ir, 22), prompt, Tolerances())
    assert m.metrics()["tf_cosine_min"] > 0.999 and m.metrics()["tf_top1"] >= 0.9  # u8 cache


def test_the_forward_workload_times_the_whole_sequence_from_an_empty_state(exported, tmp_path):
    from accel.models.runtime import runtime_of

    _, ir, _ = exported
    target = runtime_of(ir).timing_target(ir, ir.example_inputs(), "cpu", None)
    request = target.first()
    logits = request.get_tensor("logits").data.copy()
    for _ in range(2):  # each call starts from an empty state: the same logits
        assert (target.call().get_tensor("logits").data == logits).all()


def test_calibrated_int8_refuses_a_stateful_lm(exported, tmp_path):
    pytest.importorskip("nncf")
    _, ir, _ = exported
    with pytest.raises(NotApplicable, match="compress_weights_openvino"):
        _apply("quantize_openvino", ir, {"samples": 1}, tmp_path)


def test_the_stateful_ir_is_its_own_model_form_and_the_plan_refuses_calibrated_int8(
    exported, tmp_path
):
    """openvino_stateful's model is the form ``openvino_stateful``: loaded (metadata) and as a
    file (its XML read, nothing compiled); quantize_openvino does not accept it, so a dry run
    of a recipe on the stored IR refuses it before anything loads, saying what to use."""
    pytest.importorskip("nncf")
    from accel.models.forms import model_form, source_form
    from accel.passes import get_pass
    from accel.plan import plan

    _, ir, _ = exported
    assert model_form(ir) == "openvino_stateful"
    path = Path(ir.runtime_file)
    assert source_form(str(path)) == "openvino_stateful"
    with pytest.raises(PassError, match="stateful OpenVINO LM"):
        get_pass("quantize_openvino")().check_requirements(ir, "cpu")
    get_pass("compress_weights_openvino")().check_requirements(ir, "cpu")  # accepts it
    refused = plan({"name": "q", "model": {"source": str(path)}, "steps": [
        {"pass": "quantize_openvino"}]})  # fmt: skip
    assert not refused.ok and "compress_weights_openvino" in refused.errors[0]
    ok = plan({"name": "c", "model": {"source": str(path)}, "steps": [
        {"pass": "compress_weights_openvino"}]})  # fmt: skip
    assert ok.ok, ok.errors
    # a plain IR (no state variables) stays the openvino form
    plain = tmp_path / "plain.xml"
    plain.write_text('<net name="m"><layers><layer type="Parameter"/></layers></net>')
    assert source_form(str(plain)) == "openvino"


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"kv_cache_precision": "i8"}, "kv_cache_precision"),
        ({"kv_cache_precision": "u8'); import os; ('"}, "kv_cache_precision"),
        ({"precision": "f16"}, "precision"),
        ({"device": "GPU"}, "device"),
    ],
)
def test_invalid_or_hostile_parameters_are_refused_naming_them(params, named):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=named):
        get_pass("openvino_stateful").parse_config(params)


def test_a_model_without_a_kv_cache_is_refused_before_any_work(tmp_path):
    from accel.models import load_model

    mlp = load_model("zoo:mlp")
    cls = get_pass("openvino_stateful")
    with pytest.raises(NotApplicable, match="causal language model"):
        cls().preflight(mlp, cls.parse_config({}))
    with pytest.raises(NotApplicable, match="causal language model"):
        _apply("openvino_stateful", mlp, {}, tmp_path)


def test_generation_objectives_search_the_stateful_export():
    from accel.search.engine import SearchConfig, _seed_params
    from accel.search.generation import SEEDS, objective_exclusions, seed_values
    from accel.search.space import build_space

    config = SearchConfig(model="hf:llama_small", objective="tokens_per_s")
    excluded = objective_exclusions(config)
    assert "openvino" in excluded and "openvino_stateful" not in excluded
    assert ("openvino_stateful", "compress_weights_openvino") in SEEDS
    space = build_space("torch", "cpu", layer_types={"attention", "linear"}, exclude=excluded)
    assert ("openvino_stateful", "compress_weights_openvino") in space.chains
    chain = ("openvino_stateful", "compress_weights_openvino")
    enqueued = _seed_params(space, chain, seed_values(chain))
    assert enqueued["compress_weights_openvino.mode"] == "int8_asym"  # int4 is sampled later
    gpu = build_space("torch", "cuda", layer_types={"attention", "linear"}, exclude=excluded)
    assert not any("openvino_stateful" in chain for chain in gpu.chains)
    assert "static_kv_cache" not in excluded  # a generation objective searches it


def test_a_forward_objective_does_not_search_generation_only_passes():
    """static_kv_cache speeds up decoding only: a latency search of a decoder's forward
    leaves it out (saying why) unless --passes names it."""
    from accel.search.engine import SearchConfig, search_exclusions

    excluded = search_exclusions(SearchConfig(model="hf:llama_small", objective="latency"))
    assert "generation only" in excluded["static_kv_cache"]
    assert "compile" not in excluded and "openvino_stateful" not in excluded
    named = SearchConfig(model="hf:llama_small", passes=("static_kv_cache", "compile"))
    assert "static_kv_cache" not in search_exclusions(named)
    # a generation objective's exclusions are not lifted by --passes: no KV cache to time
    gen = SearchConfig(model="hf:llama_small", objective="tokens_per_s", passes=("openvino",))
    assert "openvino" in search_exclusions(gen)


def _script_recipe() -> dict:
    bench = {"workload": "generate", "prompt_tokens": 8, "new_tokens": 4, "rounds": 3}
    steps = [
        {"pass": "openvino_stateful", "params": EXACT},
        {"pass": "compress_weights_openvino", "params": {"mode": "int8_asym"}},
    ]
    return {
        "model": {"source": f"{TINY}:llama", "input_spec": SPEC},
        "steps": steps,
        "benchmark": {**bench, "warmup": 0, "iters": 3},
    }


def test_the_exported_script_compiles_with_the_values_as_literals():
    from accel.codegen import recipe_to_script

    recipe = _script_recipe()
    recipe["steps"][1]["params"] = {"mode": "int4_sym", "group_size": 64}
    text = recipe_to_script(recipe)
    compile(text, "recipe.py", "exec")
    assert "group_size_fallback_mode=GroupSizeFallbackMode.ADJUST" in text
    assert "\"KV_CACHE_PRECISION\": 'f32'" in text and "make_ir_stateful" in text
    bad = _script_recipe()
    bad["steps"][0]["params"] = {"kv_cache_precision": "f32'}; import os #"}
    with pytest.raises((RecipeError, ValueError)):
        recipe_to_script(bad)


@pytest.mark.slow
def test_the_exported_script_generates_through_the_state(tmp_path):
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


@pytest.mark.slow
def test_a_generate_recipe_runs_the_stateful_export_and_int8_on_top(tmp_path):
    pytest.importorskip("nncf")
    from accel.runner import run_recipe

    recipe = _script_recipe()
    recipe["gates"] = {"min_cosine": 0.99}
    result = run_recipe(recipe, out_dir=tmp_path, trust_recipe_code=True)
    assert result.status == "succeeded", result.error
    stateful, int8 = result.steps
    for step in (stateful, int8):
        assert step.status == "succeeded", step.parity
        # a cache that grew (a model recomputing the sequence holds none)
        assert step.metrics["kv_cache_bytes"] > 0 and step.metrics["tokens_per_s_ratio"] > 0
    assert stateful.metrics["tf_top1"] == 1.0 and int8.metrics["tf_top1"] >= 0.75


def test_a_stored_stateful_ir_generates_and_splits_per_layer_without_its_torch_model(exported):
    """What generation needs of the config travels in the IR (rt_info), so a stored stateful
    IR opened alone profiles its generation per layer from OpenVINO's performance counters."""
    from accel.generate.profiling import layer_split_problem
    from accel.models import load_model
    from accel.profile import profile_generation_layers

    _lm, ir, _ctx = exported
    loaded = load_model(str(ir.runtime_file))
    assert loaded.kind == "openvino" and loaded.module is None
    assert loaded.metadata["lm_config"] == {"vocab_size": 256, "max_position_embeddings": 64}
    assert layer_split_problem(loaded) is None
    gen = profile_generation_layers(loaded, {"prompt_tokens": 8, "new_tokens": 4}, rounds=1)
    assert gen.kv_cache == "stateful" and gen.prompt_tokens == 8
    groups = {g.group: g for g in gen.groups()}
    for group in ("attention", "mlp", "lm_head"):
        assert groups[group].decode_ms > 0 and groups[group].prefill_ms > 0, group
    rows = {r.name: r for r in gen.rows}
    assert rows["lm.lm_head"].group == "lm_head"
    assert rows["lm.model.layers.0.self_attn.q_proj"].group == "attention"
    # the root's inclusive time is every row's self time (ops no module claims included)
    assert rows[""].decode_inclusive_ms == pytest.approx(gen.decode_sum_ms)
    # 2 layers x (k, v) x 2 heads x 16 per position, in the KV precision the plugin runs (a
    # stored IR keeps no KV precision: the CPU plugin's default, u8 on recent CPUs)
    from accel.runtimes.openvino.stateful import KV_BYTES, kv_precision_of

    per = 2 * 2 * 2 * 16 * KV_BYTES[kv_precision_of(loaded.session()[0])]
    assert gen.kv_bytes_per_token == per and gen.kv_bytes == [per * n for n in gen.kv_lengths]
    # the graph overlay paints decode time per token on the IR's own graph, by module
    from types import SimpleNamespace

    from accel.graph.overlays import overlay_values
    from accel.models.runtime import runtime_of

    graph = runtime_of(loaded).graph(loaded, None)
    painted = overlay_values(
        graph, graph.nodes, "latency", SimpleNamespace(kind="openvino", generation=gen, rows=[])
    )
    q_proj = [n.id for n in graph.nodes if n.module_path == "lm.model.layers.0.self_attn.q_proj"]
    assert q_proj and sum(painted.get(i, 0.0) for i in q_proj) == pytest.approx(
        rows["lm.model.layers.0.self_attn.q_proj"].decode_inclusive_ms
    )
    # beyond the context the IR carries, the settings are refused before any work
    with pytest.raises(Exception, match="context of 64 tokens"):
        profile_generation_layers(loaded, {"prompt_tokens": 60, "new_tokens": 8})


def test_the_ir_facts_are_positive_integers_or_ignored(exported, tmp_path):
    """The IR is data: a vocabulary size that is not a plain positive integer is ignored
    (the logits' static last dimension says it instead), never evaluated."""
    import openvino as ov

    from accel.runtimes.openvino.ir import read_ir
    from accel.runtimes.openvino.stateful import RT_KEY, lm_facts

    _lm, ir, _ctx = exported
    ov_model = read_ir(ir.runtime_file)
    ov_model.set_rt_info("__import__('os').system('false')", [RT_KEY, "vocab_size"])
    ov_model.set_rt_info("-5", [RT_KEY, "max_position_embeddings"])
    ov.save_model(ov_model, str(tmp_path / "m.xml"), compress_to_fp16=False)
    assert lm_facts(read_ir(tmp_path / "m.xml")) == {"vocab_size": 256}


def test_counters_sum_into_module_rows_and_ops_no_module_claims_go_to_the_root():
    from datetime import timedelta
    from types import SimpleNamespace

    from accel.runtimes.openvino.generation_profile import _Phase, _rows

    class Info(SimpleNamespace):
        Status = SimpleNamespace(EXECUTED="run", NOT_RUN="skip")

    def info(name: str, us: float, kind: str = "FullyConnected", status: str = "run"):
        return Info(
            node_name=name, node_type=kind, status=status, real_time=timedelta(microseconds=us)
        )

    ops = [
        info("ReadValue_1", 10, "ReadValue"),
        info("__module.m.layers.0.self_attn.q_proj/aten::linear/MatMul", 300),
        info("__module.m.layers.0.self_attn/aten::sdpa/SDPA", 200, "SDPA"),
        info("__module.m.layers.0.mlp.down_proj/aten::linear/MatMul", 400, "LLMMLP"),
        info("__module.m.layers.0.mlp.up_proj/aten::linear/MatMul", 999, status="skip"),
        info("__module.lm_head/aten::linear/MatMul", 100),
    ]
    prefill, decode = _Phase(), _Phase()
    prefill.add_counters(ops)
    decode.add_counters(ops, 0.5)
    rows = {r.name: r for r in _rows(prefill, decode)}
    assert rows[""].prefill_ms == pytest.approx(0.010) and rows[""].type == "Model"
    assert rows[""].prefill_inclusive_ms == pytest.approx(1.010)  # the skipped op is not counted
    assert rows["m.layers.0.self_attn"].prefill_inclusive_ms == pytest.approx(0.5)
    assert rows["m.layers.0.self_attn"].decode_ms == pytest.approx(0.1)
    assert rows["m.layers.0.mlp.down_proj"].type == "LLMMLP"
    assert [rows[n].group for n in ("m.layers.0.self_attn", "m.layers.0.mlp", "lm_head")] == [
        "attention",
        "mlp",
        "lm_head",
    ]
    assert "m.layers.0.mlp.up_proj" not in rows
    assert list(rows)[:3] == ["", "m", "m.layers"]  # ancestors before their children


def test_the_forward_profile_of_a_stateful_ir_runs_the_sequence_from_an_empty_state(exported):
    """The Profile panel's per-op profile feeds the whole sequence with a matching mask,
    positions and beam_idx, from an empty state each run (random example inputs for
    beam_idx / attention_mask made OpenVINO refuse it)."""
    from accel.models import load_model
    from accel.profile import profile_model

    _lm, ir, _ctx = exported
    loaded = load_model(str(ir.runtime_file))
    inputs = loaded.example_inputs()
    assert "beam_idx" in inputs
    prof = profile_model(loaded, inputs, iters=2, warmup=1)
    names = [r.name for r in prof.rows]
    assert any("self_attn" in n for n in names) and prof.plain_forward_ms > 0
    assert any(r.type == "ReadValue" for r in prof.rows)  # the state was read, from empty
