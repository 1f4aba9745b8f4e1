"""Recipe search: space from the passes, seeded determinism, prefix reuse, budgets."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from accel.passes import list_passes
from accel.search import (
    InProcessExecutor,
    PrefixCache,
    SearchConfig,
    SearchError,
    build_space,
    check_chain,
    pareto_front,
    run_search,
)
from accel.search.engine import seed_chains, trial_recipe

CHEAP = ("quantize_dynamic_int8", "export_onnx", "quantize_onnx_dynamic", "onnxruntime", "bf16")


def _config(tmp_path, **kw):
    base = dict(
        model="zoo:mlp",
        objective="size",
        max_trials=6,
        budget_s=None,
        passes=CHEAP,
        out_dir=str(tmp_path),
        bench_iters=4,
        bench_rounds=2,
        bench_min_time_s=0.0,
        bench_warmup=1,
        seed=3,
    )
    base.update(kw)
    return SearchConfig(**base)


def test_space_is_generated_from_pass_declarations():
    space = build_space("torch", "cpu", layer_types={"linear"})
    searchable = {p.name for p in list_passes(include_test=True) if p.search is not None}
    assert set(space.passes) <= searchable
    assert "export_onnx" in space.passes and "quantize_onnx_dynamic" in space.passes
    # pruning changes weights: only when the user allows it
    assert "prune_channels" not in space.passes
    assert "allow" in space.excluded["prune_channels"]
    assert "prune_channels" in build_space("torch", "cpu", allow=["prune"]).passes
    # every chain passes the pre-flight check, and visits stages in order
    for chain in space.chains:
        assert check_chain(chain, "torch", "cpu") is None
        stages = [space.passes[n].stage for n in chain]
        assert stages == sorted(set(stages))
    assert ("export_onnx", "quantize_onnx_dynamic", "onnxruntime") in space.chains
    # an int8 torch module is not exported to ONNX
    assert ("quantize_dynamic_int8", "export_onnx") not in space.chains
    # fp16 is not worth trying on a CPU, but is on CUDA
    assert "fp16" not in space.passes and "fp16" in build_space("torch", "cuda").passes
    # an ONNX model starts in the ONNX stages
    onnx_space = build_space("onnx", "cpu")
    # (the first step takes the ONNX model; later ones may take what it made, e.g. OpenVINO)
    assert all("onnx" in onnx_space.passes[c[0]].accepts for c in onnx_space.chains if c)
    assert ("openvino", "quantize_openvino") in onnx_space.chains
    assert ("quantize_onnx_dynamic",) in onnx_space.chains


def test_weight_only_int8_is_searched_where_the_linear_layers_hold_the_weights():
    """On a CNN weight-only quantization touches the classifier alone; every CNN search spent
    a trial on it (int4 failed on the pruned head's width)."""
    from accel.models.zoo import build_zoo_model
    from accel.search.space import model_layer_types

    cnn = model_layer_types(build_zoo_model("resnet"))
    assert "linear" in cnn and "linear_heavy" not in cnn
    space = build_space("torch", "cpu", layer_types=cnn)
    assert "quantize_weight_only" not in space.passes
    assert space.excluded["quantize_weight_only"] == (
        "the model has no Linear layers that hold more weights than its convolutions"
    )
    assert space.excluded["static_kv_cache"] == "the model has no attention layers"
    for name in ("mlp", "transformer"):
        layers = model_layer_types(build_zoo_model(name))
        assert "linear_heavy" in layers
        assert "quantize_weight_only" in build_space("torch", "cpu", layer_types=layers).passes
    # a conv net whose Linear layers outweigh its convolutions (ConvNeXt's pointwise MLPs)
    mixed = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8, 64)
    )
    assert "linear_heavy" in model_layer_types(mixed)


def test_searched_pruning_aligns_cnn_widths_and_leaves_transformers_unrounded():
    """round_to 16 is a fixed value of the searched prune step; on a model with attention,
    where torch-pruning prunes per head and the pass would skip it with a warning in every
    trial, the search sets none."""
    from accel.search.space import steps_for

    def prune_params(layers):
        space = build_space("torch", "cpu", layer_types=layers, allow=["prune"])
        return steps_for(space, ("prune_channels",), {"prune_channels.ratio": 0.3})[0]["params"]

    assert prune_params({"conv2d", "batchnorm", "linear"}) == {
        "finetune_steps": 0,
        "round_to": 16,
        "ratio": 0.3,
    }
    assert prune_params({"attention", "linear", "linear_heavy"})["round_to"] is None
    assert (
        build_space("torch", "cpu", allow=["prune"]).passes["prune_channels"].fixed["round_to"]
        == 16
    )  # layer types unknown: the plain fixed values


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="needs openvino")
def test_a_pass_is_not_searched_after_one_whose_model_it_refuses():
    """A 1-thread decoder search sampled openvino_stateful+quantize_openvino five times; the
    quantizer refuses a stateful LM every time (it calibrates whole sequences)."""
    space = build_space("torch", "cpu", layer_types={"linear", "attention"})
    assert "openvino_stateful" in space.passes and "quantize_openvino" in space.passes
    assert ("openvino", "quantize_openvino") in space.chains
    assert ("openvino_stateful", "compress_weights_openvino") in space.chains
    assert not [c for c in space.chains if c[:2] == ("openvino_stateful", "quantize_openvino")]
    # the search's check is the plan's: the stateful LM is a model form quantize_openvino
    # does not accept, so a recipe's dry run refuses the same order with the same reason
    why = check_chain(["openvino_stateful", "quantize_openvino"], "torch", "cpu")
    assert why and "step 2 (quantize_openvino)" in why and "stateful OpenVINO LM" in why
    assert "compress_weights_openvino" in why
    assert check_chain(["openvino_stateful", "compress_weights_openvino"], "torch", "cpu") is None


def test_check_chain_rejects_with_reason():
    assert check_chain(["export_onnx", "quantize_onnx_dynamic"], "torch", "cpu") is None
    why = check_chain(["quantize_onnx_dynamic"], "torch", "cpu")
    assert why is not None and "onnx model" in why and "torch" in why
    why = check_chain(["export_onnx", "bf16"], "torch", "cpu")
    assert why is not None and "step 2 (bf16)" in why
    assert "unknown pass" in check_chain(["no_such_pass"], "torch", "cpu")


def test_unknown_pass_names_are_an_error():
    with pytest.raises(SearchError, match="unknown pass"):
        build_space("torch", "cpu", include=["exprot_onnx"])


def test_seeds_come_first_and_exist_in_space():
    space = build_space("torch", "cpu", layer_types={"linear"})
    seeds = seed_chains(space, "transformer")
    assert seeds[0] == ()
    assert ("export_onnx", "quantize_onnx_dynamic", "onnxruntime") in seeds
    assert all(s in space.chains for s in seeds)


def test_pareto_front():
    vectors = {0: [1.0, 0.0], 1: [0.5, 0.1], 2: [2.0, 0.2], 3: [0.5, 0.1]}
    assert pareto_front(vectors) == [0, 1]


@pytest.mark.slow
def test_seeded_search_on_mlp_returns_the_same_front_twice(tmp_path):
    a = run_search(_config(tmp_path / "a"), InProcessExecutor())
    b = run_search(_config(tmp_path / "b"), InProcessExecutor())
    assert a.status == b.status == "finished"
    assert len(a.trials) == 6
    assert [t.steps for t in a.trials] == [t.steps for t in b.trials]
    assert a.front == b.front and a.front
    assert a.best == b.best
    for n in a.front:
        ta, tb = a.trial(n), b.trial(n)
        assert ta.metrics["size_bytes"] == tb.metrics["size_bytes"]
        assert ta.metrics["cosine_drop"] == pytest.approx(tb.metrics["cosine_drop"], abs=1e-9)
    # the best (smallest) trial is int8: much smaller than the float original
    best = a.trial(a.best)
    assert best.metrics["size_bytes"] < 0.5 * a.trial(0).metrics["size_bytes"]
    # a different seed explores differently (after the same seeds)
    c = run_search(_config(tmp_path / "c", seed=11, max_trials=8), InProcessExecutor())
    assert [t.steps for t in c.trials[:5]] == [t.steps for t in a.trials[:5]]


def test_a_latency_search_gates_the_original_but_does_not_time_it_against_itself(tmp_path):
    """Latency is a ratio against the original timed in the same rounds: the original
    against itself is 1 by definition, so its trial is gated, not timed (the first real
    trial comes sooner); every timed trial still carries the original's p50. An objective
    of absolute figures (size) still measures the original."""
    res = run_search(
        _config(tmp_path / "lat", objective="latency", max_trials=2), InProcessExecutor()
    )
    original, first = res.trials[0], res.trials[1]
    assert original.status == "ok" and original.timing is None
    assert original.metrics.get("speedup") is None and original.metrics["cosine_drop"] == 0.0
    assert first.timing is not None and first.timing.p50_ref_ms > 0
    assert first.metrics["speedup"] == first.timing.speedup
    size = run_search(_config(tmp_path / "size", max_trials=1), InProcessExecutor())
    assert size.trials[0].timing is not None and size.trials[0].metrics["size_bytes"] > 0


def test_prefix_reuse_is_counted(tmp_path):
    cfg = _config(tmp_path, passes=("export_onnx", "quantize_onnx_dynamic", "onnxruntime"))
    res = run_search(cfg, InProcessExecutor())
    onnx_trials = [t for t in res.trials if t.chain and t.chain[0] == "export_onnx"]
    assert len(onnx_trials) >= 3
    # the first ONNX trial exported; the later ones started from its cached export
    assert onnx_trials[0].reused_steps == 0
    assert all(t.reused_steps >= 1 for t in onnx_trials[1:])
    assert res.cache["hits"] == sum(1 for t in res.trials if t.reused_steps)
    assert res.cache["reused_steps"] == sum(t.reused_steps for t in res.trials)
    assert res.cache["stored"] >= 1
    # a reused trial recorded no export step work of its own
    reused = onnx_trials[1]
    assert not (tmp_path / "trials" / f"trial_{reused.number:03d}" / "step_00_export_onnx").exists()


def test_prefix_cache_is_bounded(tmp_path):
    from accel.models import load_model

    model = load_model("zoo:mlp")
    cache = PrefixCache(tmp_path / "cache", max_entries=2)
    for i in range(4):
        f = tmp_path / f"m{i}" / "model.onnx"
        f.parent.mkdir()
        f.write_bytes(b"x" * 10)
        assert cache.put(f"k{i}", model.replace(kind="onnx", module=None, onnx_path=f))
    assert len(cache.entries()) == 2
    assert cache.stats.evicted == 2
    assert cache.get("k0", model) is None
    got = cache.get("k3", model)
    assert got is not None and got.kind == "onnx" and got.onnx_path.read_bytes() == b"x" * 10
    assert not cache.put("k3", model.replace(kind="onnx", module=None, onnx_path=f))  # present


def test_no_feasible_reports_closest_gates(tmp_path):
    cfg = _config(
        tmp_path, max_cosine_drop=0.0, max_trials=3, passes=("bf16", "quantize_dynamic_int8")
    )
    res = run_search(cfg, InProcessExecutor())
    assert res.status == "no_feasible" and res.best is None
    assert res.trial(0).status == "ok"  # the original meets any budget but is no answer
    gated = [t for t in res.trials if t.status == "gate_failed"]
    assert len(gated) == 2 and all("cosine" in (t.gate or "") for t in gated)
    assert all(t.timing is None and "speedup" not in t.metrics for t in gated)  # not timed
    assert "closest" in res.reason and gated[0].label in res.reason


def test_trial_recipe_reproduces_steps(tmp_path):
    from accel.recipe import load_recipe

    res = run_search(_config(tmp_path, max_trials=3), InProcessExecutor())
    recipe = load_recipe(trial_recipe(res.config, res.trial(res.best)))
    assert [s.pass_name for s in recipe.steps] == list(res.trial(res.best).chain)
    assert recipe.gates.min_cosine == pytest.approx(1 - res.config.max_cosine_drop)


def test_trial_recipe_never_carries_trust_pickle():
    """A recipe cannot opt in to unpickling (`studio run` ignores it); the CLI tells the user
    to pass --trust-pickle again instead."""
    from accel.search.engine import TrialRecord

    config = SearchConfig(model="zoo:mlp", max_trials=1, trust_pickle=True)
    trial = TrialRecord(0, ("bf16",), [{"pass": "bf16", "params": {}}], origin="seed")
    assert "trust_pickle" not in trial_recipe(config, trial)["model"]


def test_bad_config_is_rejected():
    with pytest.raises(SearchError, match="objective"):
        SearchConfig(model="zoo:mlp", objective="speed").validate()
    with pytest.raises(SearchError, match="budget"):
        SearchConfig(model="zoo:mlp", budget_s=None, max_trials=None).validate()
    with pytest.raises(SearchError, match="--data"):
        SearchConfig(model="zoo:mlp", max_accuracy_drop=0.01).validate()


def test_budget_too_small_for_the_seeds_says_so(tmp_path):
    cfg = _config(tmp_path, budget_s=0.01, max_trials=None)
    res = run_search(cfg, InProcessExecutor(), model_info=("torch", frozenset({"linear"})))
    assert len(res.trials) <= 1  # at most the first trial starts before the budget is spent
    assert res.status == "no_feasible" and res.best is None
    assert "budget was too small for the seeds" in res.reason
    assert f"{len(res.trials)} of 5 known-good" in res.reason


class _SpecsExecutor:
    """Records each trial's spec and ends it at once as failed (nothing runs)."""

    slots = 1

    def __init__(self):
        self.specs = []

    def submit(self, number, spec):
        self.specs.append(spec)
        done = {"status": "failed", "result": {}, "error": "not run", "run_id": None}
        return type(
            "H", (), {"result": lambda self, timeout=None: done, "cancel": lambda self: None}
        )()

    def close(self):
        pass


def test_the_budget_counts_from_when_the_search_started_for_its_user(tmp_path):
    """Time spent before the trial loop (the model's inspection: 18 s for a ResNet-50 from
    transformers on a busy machine) is budget spent: a search whose budget went there runs
    no trial, and one started late gives its trial only what is left of budget + timeout."""
    import time

    cfg = _config(tmp_path, budget_s=100.0, max_trials=None, trial_timeout_s=60.0)
    info = ("torch", frozenset({"linear"}))
    spent = _SpecsExecutor()
    run_search(cfg, spent, model_info=info, started=time.monotonic() - 101.0)
    assert spent.specs == []
    late = _SpecsExecutor()
    cfg = _config(tmp_path, budget_s=100.0, max_trials=1, trial_timeout_s=60.0)
    run_search(cfg, late, model_info=info, started=time.monotonic() - 90.0)
    assert len(late.specs) == 1
    assert 30.0 <= late.specs[0]["timeout_s"] <= 100.0 + 60.0 - 90.0


def test_trials_in_one_process_share_one_load_of_the_original_and_never_change_it(tmp_path):
    import torch

    from accel.models import load_model
    from accel.search.engine import trial_spec
    from accel.search.trial import run_trial

    cfg = _config(tmp_path, bench_threads=1)
    held = []
    for n, steps in enumerate(([{"pass": "bf16", "params": {}}], [])):
        spec = trial_spec(cfg, n, steps)
        spec["cache"] = None
        spec["benchmark"]["skip"] = True
        hold: dict = {}
        out = run_trial(spec, lambda e: None, lambda: False, hold=hold)
        assert out["trial_status"] == "ok"
        held.append(hold)
    assert held[0]["original"] is held[1]["original"]  # loaded once
    assert held[1]["model"].module is not held[1]["original"].module  # a trial builds on a copy
    torch.manual_seed(cfg.seed)
    fresh = load_model("zoo:mlp").module.state_dict()
    kept = held[1]["original"].module.state_dict()
    assert all(torch.equal(fresh[k], kept[k]) for k in fresh)  # the bf16 trial left it as loaded
    other = trial_spec(_config(tmp_path, seed=4), 2, [])
    other["cache"], other["benchmark"]["skip"] = None, True
    hold = {}
    run_trial(other, lambda e: None, lambda: False, hold=hold)
    assert hold["original"] is not held[0]["original"]  # another seed: another load


def test_prefix_cache_keeps_an_openvino_ir_with_its_weights(tmp_path):
    """OpenVINO IRs were not cached (ONNX only), so the final re-timing built every
    OpenVINO + NNCF trial again (40 s and more each) and ran out of its share of the budget."""
    pytest.importorskip("openvino")
    from accel.models import load_model
    from accel.passes import PassContext, get_pass

    model = load_model("zoo:mlp")
    p = get_pass("openvino")
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path / "ov")
    ov_model = p().apply(model, p.parse_config({"precision": "f32"}), ctx)
    cache = PrefixCache(tmp_path / "cache")
    assert cache.put("k", ov_model)
    entry = tmp_path / "cache" / "k"
    assert sorted(f.name for f in entry.iterdir()) == ["entry.json", "model.bin", "model.xml"]
    got = cache.get("k", model)
    assert got.kind == "openvino" and got.module is None and got.onnx_path is None
    assert got.runtime_file == entry / "model.xml"
    assert got.session_options == ov_model.session_options
    assert got.num_params == ov_model.num_params
    x = model.example_inputs()
    assert torch.allclose(torch.as_tensor(got.forward(x)[0]), model.forward(x), atol=1e-4)
    folder = tmp_path / "genai"
    folder.mkdir()
    assert not cache.put("g", ov_model.replace(kind="ort_genai", runtime_file=folder))
