"""Per-layer sensitivity analysis, auto_exclude, `studio analyze` and the analyze job."""

from __future__ import annotations

import json

import pytest
import torch

from accel.errors import Cancelled, PassError
from accel.models import load_model
from accel.sensitivity import SensitivityReport, analyze_sensitivity, auto_exclude

MLP = "zoo:mlp(in_features=64, hidden=128)"
MLP_SPEC = "x:float32[batch,64]; batch=1..64:8"
DATA = "synthetic-labelled(batches=2, batch=32)"


@pytest.fixture(scope="module")
def mlp():
    return load_model(MLP, MLP_SPEC)


@pytest.fixture(scope="module")
def report(mlp):
    # int4 weights make per-layer differences large and deterministic.
    return analyze_sensitivity(mlp, "quantize_weight_only", DATA, {"bits": 4, "group_size": 32})


def test_ranking_orders_layers_by_measured_error(report, mlp):
    assert sorted(report.ranking()) == ["fc1", "fc2", "fc3"]
    assert report.baseline_accuracy == 1.0 and report.num_samples == 64
    drops = [layer.accuracy_drop for layer in report.layers]
    assert drops == sorted(drops, reverse=True)
    for layer in report.layers:
        assert layer.error is None and 0 < layer.max_abs and 0.9 < layer.cosine < 1.0
        assert layer.num_params == sum(
            p.numel() for p in mlp.module.get_submodule(layer.name).parameters()
        )
    # Quantizing every layer moves the outputs more than quantizing any single one.
    assert report.full["max_abs"] >= min(layer.max_abs for layer in report.layers)
    assert report.full["cosine"] <= max(layer.cosine for layer in report.layers)


def test_report_round_trips_through_json(report):
    d = json.loads(json.dumps(report.to_dict()))
    assert d["ranking"] == report.ranking()
    back = SensitivityReport.from_dict(d)
    assert back == report


def test_auto_exclude_finds_the_smallest_prefix_and_verifies_it(report, mlp):
    singles = sorted(layer.max_abs for layer in report.layers)
    gate = (
        (singles[0] + report.full["max_abs"]) / 2
        if singles[0] < report.full["max_abs"]
        else singles[0] * 1.01
    )
    result = auto_exclude(report, max_error=gate, model=mlp)
    assert result.met and result.metrics["max_abs"] <= gate
    assert result.exclude == report.ranking()[: len(result.exclude)]
    # Each shorter prefix was tried and failed the gate.
    assert [t["exclude"] for t in result.tried] == [
        report.ranking()[:k] for k in range(len(result.exclude) + 1)
    ]
    assert all(t["max_abs"] > gate for t in result.tried[:-1])
    impossible = auto_exclude(report, max_error=0.0, model=mlp)
    assert not impossible.met
    with pytest.raises(ValueError, match="give a gate"):
        auto_exclude(report, model=mlp)


def test_auto_exclude_from_a_model_with_accuracy_gate(mlp):
    result = auto_exclude(mlp, max_accuracy_drop=0.0, pass_name="quantize_dynamic_int8", data=DATA)
    assert result.met and result.metrics["accuracy_drop"] <= 0.0


def test_static_pass_user_exclude_and_cancel(mlp):
    r = analyze_sensitivity(
        mlp,
        "quantize_static_int8",
        "synthetic(batches=2)",
        {"exclude": ["fc3"], "calibration_batches": 2},
    )
    assert sorted(r.ranking()) == ["fc1", "fc2"] and r.baseline_accuracy is None
    with pytest.raises(Cancelled):
        analyze_sensitivity(mlp, "quantize_dynamic_int8", cancel=lambda: True)
    with pytest.raises(PassError, match="exclude list"):
        analyze_sensitivity(mlp, "channels_last")


def test_studio_analyze_prints_the_ranking(capsys):
    from studio.cli import main

    rc = main(
        [
            "analyze",
            MLP,
            "--input",
            MLP_SPEC,
            "--pass",
            "quantize_weight_only",
            "--params",
            '{"bits": 4, "group_size": 32}',
            "--data",
            DATA,
            "--max-accuracy-drop",
            "0.1",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "rank" in out and "acc_drop" in out and "fc1" in out and "fc3" in out
    assert "keep in float:" in out and "meets the gate" in out
    rc = main(
        [
            "analyze",
            MLP,
            "--input",
            MLP_SPEC,
            "--pass",
            "quantize_dynamic_int8",
            "--max-layers",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "local method" in out and "not analysed (1 of 3, --max-layers 2)" in out
    rc = main(["analyze", MLP, "--input", MLP_SPEC, "--pass", "quantize_dynamic_int8", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and sorted(d["ranking"]) == ["fc1", "fc2", "fc3"]


def test_analyze_job_uses_the_same_names():
    from accel.jobs import JOBS

    events = []
    result = JOBS["analyze"](
        {
            "model": MLP,
            "input_spec": MLP_SPEC,
            "pass_name": "quantize_dynamic_int8",
            "data": "synthetic(batches=1)",
        },
        events.append,
        lambda: False,
    )
    assert sorted(result["ranking"]) == ["fc1", "fc2", "fc3"]
    assert any(e.get("event") == "progress" for e in events)


@pytest.mark.parametrize(
    "pass_name, params",
    [("quantize_dynamic_int8", {}), ("quantize_weight_only", {"bits": 4, "group_size": 32})],
)
def test_local_method_gives_the_full_methods_numbers(mlp, pass_name, params):
    full = analyze_sensitivity(mlp, pass_name, DATA, params, method="full")
    local = analyze_sensitivity(mlp, pass_name, DATA, params)  # auto: local for these passes
    assert full.method == "full" and local.method == "local"
    assert local.ranking() == full.ranking()
    for a, b in zip(local.layers, full.layers):
        assert a.max_abs == pytest.approx(b.max_abs, rel=1e-5, abs=1e-7)
        assert a.cosine == pytest.approx(b.cosine, abs=1e-7)
        assert a.accuracy_drop == b.accuracy_drop
    # The working copy is swapped back: the user's model is untouched.
    assert all(isinstance(mlp.module.get_submodule(n), torch.nn.Linear) for n in ("fc1", "fc3"))
    with pytest.raises(PassError, match="method full"):
        analyze_sensitivity(mlp, "quantize_static_int8", method="local")


def test_max_layers_analyses_a_sample_and_lists_the_rest(mlp):
    messages = []
    r = analyze_sensitivity(
        mlp,
        "quantize_dynamic_int8",
        "synthetic(batches=1)",
        max_layers=2,
        progress=lambda f, m: messages.append(m),
    )
    assert len(r.layers) == 2 and len(r.skipped) == 1
    assert sorted(r.ranking() + r.skipped) == ["fc1", "fc2", "fc3"]
    assert "sample of 2 of 3" in messages[0]
    assert any(m.startswith("layer 2 of 2:") and "left" in m for m in messages)
    assert SensitivityReport.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    with pytest.raises(ValueError, match="max_layers"):
        analyze_sensitivity(mlp, "quantize_dynamic_int8", max_layers=0)


def test_pick_layers_covers_every_kind_and_the_depth():
    from accel.sensitivity import pick_layers

    kinds = {"q": 10, "k": 10, "v": 10, "up": 40, "down": 40}
    layers = [(f"block.{b}.{k}", n) for b in range(12) for k, n in kinds.items()]
    layers.append(("head", 5))
    picked = pick_layers(layers, 12)
    assert len(picked) == 12 and picked == [n for n, _ in layers if n in picked]  # model order
    # Every kind (head included) is there, the big ones first and spread over the depth.
    assert {p.split(".")[-1] for p in picked} == {"q", "k", "v", "up", "down", "head"}
    assert {"block.0.up", "block.11.up", "block.0.down", "block.11.down"} <= set(picked)
    assert pick_layers(layers, 100) == [n for n, _ in layers]
