"""Quantization exclude sets from the sensitivity analysis as a search dimension."""

from __future__ import annotations

import re

from accel.search import InProcessExecutor, SearchConfig, build_space, run_search
from accel.search.engine import trial_spec
from accel.search.sensitivity_space import AFTER, exclude_sets
from accel.search.space import steps_for

PASSES = ("quantize_dynamic_int8", "export_onnx", "quantize_onnx_dynamic")


def _config(tmp_path, allow=("sensitivity",), **kw):
    base = dict(
        model="zoo:mlp",
        objective="size",
        max_trials=6,  # the space has 5 distinct trials: all of them run
        budget_s=None,
        passes=("quantize_dynamic_int8",),
        allow=allow,
        out_dir=str(tmp_path),
        bench_iters=4,
        bench_rounds=2,
        bench_min_time_s=0.0,
        bench_warmup=1,
        seed=5,
    )
    base.update(kw)
    return SearchConfig(**base)


def test_exclude_sets_are_distinct_and_leave_a_layer_quantized():
    ranking = [f"l{i}" for i in range(30)]
    assert exclude_sets(ranking, 40) == {
        "none": [],
        "top1": ["l0"],
        "top3": ["l0", "l1", "l2"],
        "top10%": ["l0", "l1", "l2", "l3"],
    }
    # 3 layers: top3 would keep all of them float, top10% is top1 again.
    assert exclude_sets(ranking[:3], 3) == {"none": [], "top1": ["l0"]}
    assert exclude_sets(ranking[:1], 1) == {"none": []}


def test_labels_decode_to_layer_lists_in_the_steps():
    import dataclasses

    from accel.passes.base import Choice

    space = build_space("torch", "cpu", layer_types={"linear"}, include=("quantize_dynamic_int8",))
    p = space.passes["quantize_dynamic_int8"]
    sets = {"none": [], "top1": ["fc2"]}
    p = dataclasses.replace(
        p, params={**p.params, "exclude": Choice(tuple(sets))}, decode={"exclude": sets}
    )
    space = dataclasses.replace(space, passes={"quantize_dynamic_int8": p})
    steps = steps_for(space, ("quantize_dynamic_int8",), {"quantize_dynamic_int8.exclude": "top1"})
    assert steps[0]["params"]["exclude"] == ["fc2"]


def test_seeded_search_with_sensitivity_tries_exclude_sets(tmp_path):
    a = run_search(_config(tmp_path / "a"), InProcessExecutor())
    sens = a.space["sensitivity"]
    assert sens["pass"] == "quantize_dynamic_int8" and sens["method"] == "local"
    assert sorted(sens["ranking"]) == ["fc1", "fc2", "fc3"] and sens["duration_s"] > 0
    # zoo:mlp has 3 Linear layers: none or the most sensitive one (top3 would quantize nothing).
    top = sens["ranking"][0]
    assert sens["sets"] == {"quantize_dynamic_int8": {"none": [], "top1": [top]}}
    # The analysis ran after the first seeds (the original, then the known-good stack): the
    # first minute of a search goes to them, their steps carry no exclude set.
    n_first = min(AFTER, len(a.space["seeds"]))
    assert n_first == 2 and a.trials[1].chain == ("quantize_dynamic_int8",)
    assert all("exclude" not in st["params"] for t in a.trials[:n_first] for st in t.steps)
    qdyn = [t for t in a.trials if t.chain and t.chain[0] == "quantize_dynamic_int8"]
    later = [t for t in qdyn if t.number >= n_first]
    assert later and all("exclude" in t.steps[0]["params"] for t in later)
    excludes = [t.steps[0]["params"]["exclude"] for t in later]
    assert [] in excludes and [top] in excludes
    kept = next(t for t in later if t.steps[0]["params"]["exclude"] == [top])
    assert kept.status in ("ok", "gate_failed"), kept.error
    # Deterministic for a seed.
    b = run_search(_config(tmp_path / "b"), InProcessExecutor())
    assert [t.steps for t in b.trials] == [t.steps for t in a.trials]
    assert b.space["sensitivity"]["ranking"] == sens["ranking"]


def test_onnx_quantizer_gets_the_same_torch_module_names(tmp_path):
    from accel.search.sensitivity_space import add_exclude_sets

    config = _config(tmp_path, passes=PASSES)
    space = build_space("torch", "cpu", layer_types={"linear"}, include=PASSES)
    space, sens = add_exclude_sets(space, config, lambda: False)
    top = sens["ranking"][0]
    sets = {"none": [], "top1": [top]}
    assert sens["sets"] == {"quantize_dynamic_int8": sets, "quantize_onnx_dynamic": sets}
    assert space.passes["quantize_onnx_dynamic"].decode["exclude"] == sets
    # the ONNX Runtime quantizer's cost set was measured in ONNX Runtime (here: no new set,
    # the only high-error layer of three is the top1 one)
    costs = sens["costs"]["quantize_onnx_dynamic"]
    assert {c["name"] for c in costs} == set(sens["ranking"])
    assert all(c["float_ms"] > 0 and c["int8_ms"] > 0 for c in costs)
    # OpenVINO: torch module names hold after a torch->OpenVINO conversion, not after ONNX.
    ov = ("openvino", "quantize_openvino")
    ov_space = build_space("torch", "cpu", layer_types={"linear"}, include=ov + ("export_onnx",))
    ov_space, ov_sens = add_exclude_sets(ov_space, config, lambda: False)
    assert ov_sens["sets"]["quantize_openvino"] == sets
    key = {"quantize_openvino.exclude": "top1"}
    assert steps_for(ov_space, ov, key)[1]["params"]["exclude"] == [top]
    after_onnx = steps_for(ov_space, ("export_onnx", *ov), key)
    assert after_onnx[2]["params"]["exclude"] == []
    # The ONNX quantizer matches the torch module names to nodes after export_onnx.
    steps = [
        {"pass": "export_onnx", "params": {}},
        {"pass": "quantize_onnx_dynamic", "params": {"exclude": [top]}},
    ]
    out = InProcessExecutor().submit(99, trial_spec(config, 99, steps)).result()
    assert out["result"]["trial_status"] in ("ok", "gate_failed"), out
    excluded = re.findall(r"'excluded_nodes': \[([^\]]*)\]", str(out["events"]))
    assert excluded and all(excluded)  # the nodes of that torch module stayed float


def test_no_exclude_domain_without_the_option(tmp_path):
    res = run_search(_config(tmp_path, allow=(), max_trials=3), InProcessExecutor())
    assert "sensitivity" not in res.space
    for t in res.trials:
        for step in t.steps:
            assert "exclude" not in step["params"]


def test_cost_sets_are_not_measured_once_the_budget_is_spent(monkeypatch):
    from accel.models import load_model
    from accel.search import layer_costs
    from accel.search.sensitivity_space import _exclude_targets, _with_exclude_choices

    def measured(*a, **k):
        raise AssertionError("a cost set was measured after the budget ran out")

    monkeypatch.setattr(layer_costs, "cost_exclude_set", measured)
    space = build_space("torch", "cpu", layer_types={"linear"}, include=PASSES)
    targets = _exclude_targets(space, {})
    assert "quantize_onnx_dynamic" in targets

    class Report:
        layers = [type("L", (), {"name": n, "type": "Linear"}) for n in ("fc1", "fc2", "fc3")]

        def ranking(self):
            return ["fc2", "fc1", "fc3"]

    summary = {"sets": {}, "skipped": {}}
    passes = _with_exclude_choices(
        space, targets, load_model("zoo:mlp"), Report(), summary, lambda: True
    )
    assert summary["cost_skipped"] == {"quantize_onnx_dynamic": "the budget ran out (or cancel)"}
    # the sets from the ranking are still there (no measurement needed)
    assert passes["quantize_onnx_dynamic"].decode["exclude"] == {"none": [], "top1": ["fc2"]}


def test_the_analysis_takes_at_most_half_of_the_budget_left():
    from accel.search.sensitivity_space import analysis_deadline

    assert analysis_deadline(None, 100.0, 150.0) is None
    # a 600 s search, 200 s in: 400 s left, the analysis may take 200 of them
    assert analysis_deadline(600.0, 100.0, 300.0) == 500.0
    assert analysis_deadline(600.0, 100.0, 800.0) == 800.0  # the budget is spent: stop now
