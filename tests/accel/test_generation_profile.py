"""The per-layer generation profile (issue 31, part 4): prefill / decode split per layer and
group, its sums against the plain TTFT and TPOT (fake clock), the grouping of a llama-style
and a gpt2-style model, the KV cache's growth against its closed form, and old profiles."""

from __future__ import annotations

import itertools

import pytest
import torch

from accel.generate.decoders import CacheDecoder
from accel.generate.profiling import GreedyWork, kv_bytes_per_token, kv_growth
from accel.generate.settings import GenerateSettings, prompt_ids
from accel.models.runtime import adopt
from accel.profile import ModelProfile, profile_generation_layers
from accel.profile.generation import (
    GROUPS,
    UNATTRIBUTED_GROUP,
    GenerationLayers,
    LayerSplit,
    layer_group,
)
from accel.runtimes.torch.generation_profile import profile_generation_torch
from tests.accel.tiny_decoder import gpt2, llama


def _groups_of(module) -> dict[str, str]:
    types = {p: type(m).__name__ for p, m in module.named_modules()}
    return {p: layer_group(p, types) for p in types}


def test_llama_modules_fall_into_attention_mlp_norm_embedding_lm_head():
    g = _groups_of(llama())
    assert g["model.embed_tokens"] == "embedding"
    assert g["model.layers.0.self_attn"] == g["model.layers.1.self_attn.q_proj"] == "attention"
    assert g["model.layers.0.mlp"] == g["model.layers.0.mlp.act_fn"] == "mlp"
    assert g["model.layers.0.mlp.down_proj"] == "mlp"
    assert g["model.layers.0.input_layernorm"] == g["model.norm"] == "norm"
    assert g["lm_head"] == "lm_head"
    assert g[""] == g["model"] == g["model.layers.0"] == "other"


def test_gpt2_modules_fall_into_the_same_groups():
    g = _groups_of(gpt2())
    assert g["transformer.wte"] == g["transformer.wpe"] == "embedding"
    assert g["transformer.h.0.attn.c_attn"] == g["transformer.h.1.attn.c_proj"] == "attention"
    assert g["transformer.h.0.mlp.c_proj"] == g["transformer.h.0.mlp.act"] == "mlp"
    assert g["transformer.h.0.ln_1"] == g["transformer.ln_f"] == "norm"
    assert g["lm_head"] == "lm_head"
    assert g["transformer.drop"] == g["transformer.h.0"] == "other"


def _fake_clock(step_ns: int = 1000):
    counter = itertools.count(0, step_ns)
    return lambda: next(counter)


def _work(module, prompt_tokens=8, new_tokens=5):
    settings = GenerateSettings(prompt_tokens, new_tokens, 1)
    decoder = CacheDecoder(module, settings.total_tokens)
    return GreedyWork(decoder, prompt_ids(settings, 256), new_tokens)


@pytest.mark.parametrize("build", [llama, gpt2])
def test_the_split_adds_up_to_the_headline_on_a_fake_clock(build):
    module = build()
    work = _work(module, new_tokens=5)
    prof = profile_generation_torch(
        module, work, rounds=2, warmup=1, clock_ns=_fake_clock(1000), hook_cost_ns=0.0
    )
    # Plain rounds read the clock around the prefill and around the 4 decode steps only.
    assert prof.ttft_ms == pytest.approx(0.001)
    assert prof.tpot_ms == pytest.approx(0.001 / 4)
    root = next(r for r in prof.rows if r.name == "")
    # Self times add up to the root's inclusive time, in each phase.
    assert prof.prefill_sum_ms == pytest.approx(root.prefill_inclusive_ms)
    assert prof.decode_sum_ms == pytest.approx(root.decode_inclusive_ms)
    assert prof.hooked_ttft_ms == pytest.approx(root.prefill_inclusive_ms)
    groups = prof.groups()
    assert [g.group for g in groups] == [*GROUPS, UNATTRIBUTED_GROUP]
    assert sum(g.prefill_ms for g in groups) == pytest.approx(prof.ttft_ms)
    assert sum(g.decode_ms for g in groups) == pytest.approx(prof.tpot_ms)
    by = {g.group: g for g in groups}
    assert by["attention"].decode_ms > 0 and by["mlp"].decode_ms > 0
    assert by["lm_head"].prefill_ms > 0
    # Each decoder layer runs once per decode step.
    calls = {r.name: r.calls for r in prof.rows}
    assert calls["lm_head"] == 1
    assert prof.decode_coverage == pytest.approx(prof.decode_sum_ms / prof.tpot_ms)


def test_groups_add_rows_and_keep_the_rest_unattributed():
    rows = [
        LayerSplit("a", "Linear", "attention", prefill_ms=2.0, decode_ms=0.5),
        LayerSplit("b", "Linear", "attention", prefill_ms=1.0, decode_ms=0.25),
        LayerSplit("m", "MLP", "mlp", prefill_ms=3.0, decode_ms=1.0),
    ]
    prof = GenerationLayers(8, 4, ttft_ms=10.0, tpot_ms=2.0, rows=rows)
    by = {g.group: g for g in prof.groups()}
    assert (by["attention"].prefill_ms, by["attention"].decode_ms) == (3.0, 0.75)
    assert (by[UNATTRIBUTED_GROUP].prefill_ms, by[UNATTRIBUTED_GROUP].decode_ms) == (4.0, 0.25)
    assert prof.prefill_coverage == 0.6 and prof.decode_coverage == 0.875
    assert [r.name for r in prof.top(2, "prefill")] == ["m", "a"]


@pytest.mark.parametrize(("build", "per_token"), [(llama, 2 * 2 * 2 * 16 * 4), (gpt2, 1024)])
def test_kv_growth_is_monotone_and_equals_the_closed_form(build, per_token):
    module = build()
    assert kv_bytes_per_token(module.config, 4) == per_token
    assert kv_bytes_per_token(module.config, 4, batch=3) == 3 * per_token
    lengths, sizes = kv_growth(_work(module, prompt_tokens=8, new_tokens=6))
    assert lengths == list(range(8, 14))
    assert sizes == [n * per_token for n in lengths]
    assert all(a < b for a, b in itertools.pairwise(sizes))


def test_profile_generation_layers_fills_the_settings_and_the_kv_line():
    model = adopt(llama(), {"input_ids": torch.zeros(1, 8, dtype=torch.long)})
    bench = {"prompt_tokens": 8, "new_tokens": 3, "batch": 2}
    prof = profile_generation_layers(model, bench, rounds=1, threads=1)
    assert (prof.prompt_tokens, prof.new_tokens, prof.batch) == (8, 3, 2)
    assert prof.kv_cache == "dynamic" and prof.kv_bytes_per_token == 2 * 512
    assert prof.kv_lengths == [8, 9, 10]
    assert prof.kv_bytes == [n * 1024 for n in prof.kv_lengths]
    assert not any("differs" in n for n in prof.notes)
    assert {r.group for r in prof.rows} == set(GROUPS)


def test_old_profiles_load_and_new_ones_round_trip():
    old = {"kind": "torch", "device": "cpu", "rows": [], "total_ms": 1.5}
    assert ModelProfile.from_dict(old).generation is None
    gen = GenerationLayers(
        8, 4, ttft_ms=3.0, tpot_ms=1.0, rows=[LayerSplit("lm_head", "Linear", "lm_head", 1, 2)]
    )
    gen.kv_lengths, gen.kv_bytes = [8, 9], [80, 90]
    prof = ModelProfile(kind="torch", device="cpu", generation=gen)
    back = ModelProfile.from_dict(prof.to_dict())
    assert back.generation == gen
    # A newer writer's unknown keys are ignored.
    d = prof.to_dict()
    d["generation"]["future"] = 1
    d["generation"]["rows"][0]["future"] = 2
    assert ModelProfile.from_dict(d).generation == gen


def test_the_profile_job_adds_the_split_and_it_crosses_the_worker_boundary():
    from accel.job_results import ProfileResult
    from accel.job_specs import JobParamsError, ProfileJob
    from accel.jobs import profile
    from tests.accel.test_generate import TINY
    from tests.accel.tiny_decoder import SPEC

    model = {"source": f"{TINY}:llama", "input_spec": SPEC}
    params = {"model": model, "iters": 1, "warmup": 0, "ops": False, "threads": 1}
    gen = {"generate": True, "prompt_tokens": 8, "new_tokens": 3, "gen_rounds": 1}
    job = ProfileJob.from_params({**params, **gen})
    result = profile(job, lambda event: None, lambda: False)
    back = ProfileResult.from_dict(result.to_dict()).profile
    assert back.rows and back.generation is not None
    assert (back.generation.prompt_tokens, back.generation.new_tokens) == (8, 3)
    assert back.generation.kv_lengths == [8, 9, 10]
    with pytest.raises(JobParamsError, match="needs layers"):
        ProfileJob.from_params({**params, **gen, "layers": False, "benchmark": True})


def test_only_a_decoder_lm_with_a_kv_cache_can_be_split():
    from accel.generate.profiling import layer_split_problem

    ids = {"input_ids": torch.zeros(1, 8, dtype=torch.long)}
    assert layer_split_problem(adopt(llama(), ids)) is None
    assert layer_split_problem(adopt(gpt2(), ids)) is None
    mlp = adopt(torch.nn.Linear(4, 4), {"x": torch.zeros(1, 4)})
    assert "not a decoder language model" in layer_split_problem(mlp)
