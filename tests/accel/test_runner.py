"""The runner: events, metrics, parity, failures that keep earlier steps, cancellation."""

from __future__ import annotations

import pytest
import torch
from pydantic import Field

from accel.errors import PassError, RecipeError
from accel.events import event_from_dict
from accel.passes import Pass, PassConfig, ScriptStep, register_pass
from accel.runner import run_recipe


class _NoiseConfig(PassConfig):
    scale: float = Field(0.0, description="noise added to the last layer's bias")
    fail: bool = Field(False, description="raise a PassError")


@register_pass
class _Noise(Pass):
    name = "test_noise"
    summary = "test-only: perturb the model by a known amount"
    category = "test"
    Config = _NoiseConfig

    def apply(self, model, config, ctx):
        if config.fail:
            raise PassError("test_noise was told to fail; set fail: false")
        for i in range(3):
            ctx.check_cancelled()
            ctx.progress((i + 1) / 3, "perturbing")
        last = [m for m in model.module.modules() if isinstance(m, torch.nn.Linear)][-1]
        with torch.no_grad():
            last.bias += config.scale
        ctx.details["perturbed"] = "bias"
        return model

    def to_script(self, config):
        return ScriptStep(
            code=f"[m for m in model.modules() if isinstance(m, nn.Linear)][-1].bias.data += {config.scale}"
        )


def _recipe(*steps, **extra):
    return {
        "name": "t",
        "model": {"source": "zoo:mlp"},
        "benchmark": {"warmup": 1, "iters": 3},
        "steps": [{"pass": "test_noise", "params": s} for s in steps],
        **extra,
    }


def test_events_metrics_and_parity(tmp_path):
    events = []
    res = run_recipe(
        _recipe({"scale": 0.0}, {"scale": 0.25}), on_event=events.append, out_dir=tmp_path / "run"
    )
    kinds = [e.kind for e in events]
    assert kinds[0] == "progress" and "run_started" in kinds and kinds[-1] == "run_finished"
    assert kinds.count("step_started") == 2 and kinds.count("step_finished") == 2
    for e in events:  # every event survives the JSON round trip of the worker protocol
        assert event_from_dict(e.to_dict()) == e
    assert res.status == "succeeded"
    first, second = res.steps
    assert first.parity["passed"] and first.parity["outputs"][0]["max_abs"] == 0.0
    # the bias of the last layer moved by 0.25: every logit moves by exactly 0.25
    assert second.parity["outputs"][0]["max_abs"] == pytest.approx(0.25, abs=1e-6)
    assert second.status == "gate_failed" and not second.parity["passed"]
    assert first.timing.p50_step_ms > 0 and first.timing.speedup > 0
    assert first.timing.p50_ref_ms > 0 and first.timing.consistent()
    assert res.baseline_timing.p50_ref_ms > 0
    assert res.baseline["num_params"] == 2109450
    assert (tmp_path / "run" / "step_00_test_noise" / "outputs.pt").is_file()
    assert {a["kind"] for a in first.artifacts} >= {"outputs", "parity_report"}
    assert all(a["sha256"] and a["bytes"] for a in first.artifacts)
    assert res.environment["torch"].startswith("2.")


def test_gate_stop_ends_the_run_and_keeps_results(tmp_path):
    res = run_recipe(_recipe({"scale": 1.0}, {"scale": 0.0}, on_gate_fail="stop"), out_dir=tmp_path)
    assert res.status == "failed" and len(res.steps) == 1 and "parity gate" in res.error


def test_failing_step_keeps_earlier_results(tmp_path):
    events = []
    res = run_recipe(
        _recipe({"scale": 0.0}, {"fail": True}, {"scale": 0.0}),
        on_event=events.append,
        out_dir=tmp_path,
    )
    assert res.status == "failed"
    assert [s.status for s in res.steps] == ["succeeded", "failed"]
    assert "set fail: false" in res.steps[1].error
    failed = [e for e in events if e.kind == "run_failed"][0]
    assert failed.index == 1 and "step 2" in failed.error


def test_cancel_between_and_inside_steps(tmp_path):
    calls = {"n": 0}

    def cancel():
        calls["n"] += 1
        return calls["n"] > 4  # lets the baseline through, stops inside the first step

    res = run_recipe(_recipe({"scale": 0.0}, {"scale": 0.0}), cancel=cancel, out_dir=tmp_path)
    assert res.status == "cancelled" and len(res.steps) == 0


def test_empty_and_disabled_steps_are_an_error(tmp_path):
    with pytest.raises(RecipeError, match="no enabled steps"):
        run_recipe({"model": {"source": "zoo:mlp"}, "steps": []}, out_dir=tmp_path)
    r = _recipe({"scale": 0.0})
    r["steps"][0]["enabled"] = False
    with pytest.raises(RecipeError, match="no enabled steps"):
        run_recipe(r, out_dir=tmp_path)


def test_missing_model_fails_cleanly(tmp_path):
    events = []
    r = _recipe({"scale": 0.0})
    r["model"]["source"] = str(tmp_path / "nope.onnx")
    res = run_recipe(r, on_event=events.append, out_dir=tmp_path / "run")
    assert res.status == "failed" and "does not exist" in res.error
    assert events[-1].kind == "run_failed" and events[-1].index is None


def test_pass_on_wrong_model_kind_says_what_to_do(tmp_path):
    onnx_path = tmp_path / "m.onnx"
    m = torch.nn.Linear(4, 2).eval()
    torch.onnx.export(m, (torch.randn(1, 4),), str(onnx_path), input_names=["x"], dynamo=False)
    res = run_recipe(
        {"model": {"source": str(onnx_path)}, "steps": [{"pass": "test_noise"}]},
        out_dir=tmp_path / "r",
    )
    assert res.status == "failed" and "Move this step before the export_onnx step" in res.error


def test_torch_steps_save_a_loadable_model_once(tmp_path):
    from accel.models import load_model

    recipe = _recipe({"scale": 0.25})
    recipe["steps"] += [
        {"pass": "quantize_dynamic_int8", "params": {"backend": "eager"}},
        {"pass": "torchscript"},
    ]
    res = run_recipe(recipe, out_dir=tmp_path / "run", save_models=True)
    assert res.status == "succeeded", res.error
    noise, quant, script = res.steps
    # An in-memory step: its model saved as an ExportedProgram that reproduces its outputs.
    assert noise.details["saved_model"] == "model.pt2"
    saved = [a for a in noise.artifacts if a["kind"] == "model"]
    assert len(saved) == 1 and saved[0]["sha256"] and saved[0]["path"].endswith("model.pt2")
    step_dir = tmp_path / "run" / "step_00_test_noise"
    loaded = load_model(str(step_dir / "model.pt2"), res.model.input_spec)
    inputs = res.model.input_spec.sample(seed=0)
    want = torch.load(step_dir / "outputs.pt")
    assert torch.equal(loaded.forward(inputs), want)
    # Eager dynamic quantization (packed params) does not export: a note, not a failure.
    assert quant.details["saved_model"].startswith("not saved: torch.export failed")
    assert not any(a["kind"] == "model" for a in quant.artifacts)
    # The torchscript step saved its own model file: nothing saved twice.
    assert "saved_model" not in script.details
    files = sorted(p.name for p in (tmp_path / "run" / "step_02_torchscript").iterdir())
    assert [f for f in files if f.endswith((".pt2", ".ts"))] == ["model.ts"]
