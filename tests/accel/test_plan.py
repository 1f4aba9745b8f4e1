"""The pre-flight plan: model forms through a recipe's steps, checked without loading it."""

from __future__ import annotations

import sys

import pytest
import torch
import yaml

from accel.errors import PassError
from accel.models import load_model
from accel.models.forms import COMPILED, EAGER, EXPORTED, ONNX, SCRIPTED, model_form, source_form
from accel.passes import get_pass
from accel.plan import PlanError, check, passes_after, plan


def _recipe(*passes, source="zoo:mlp", device="cpu"):
    return {"model": {"source": source}, "device": device, "steps": [{"pass": p} for p in passes]}


def test_a_good_order_gives_each_steps_forms():
    p = plan(_recipe("bf16", "compile", "export_onnx", "onnxruntime"))
    assert p.ok and p.errors == []
    assert [(s.receives, s.produces) for s in p.steps] == [
        (EAGER, EAGER),
        (EAGER, COMPILED),
        (COMPILED, ONNX),
        (ONNX, ONNX),
    ]
    assert p.final_form == ONNX and p.start_form == EAGER


def test_an_impossible_order_is_rejected_with_what_to_change():
    p = plan(_recipe("compile", "torch_export", "quantize_onnx_dynamic"))
    assert not p.ok
    bad = {s.index: s.problem for s in p.steps if s.problem}
    assert set(bad) == {1, 2}
    assert "before the compile step" in bad[1]
    assert "Add an export_onnx step" in bad[2]
    with pytest.raises(PlanError, match="step 2 \\(torch_export\\)"):
        check(_recipe("compile", "torch_export"))


def test_disabled_steps_are_not_planned_and_keep_their_index():
    r = _recipe("export_onnx", "bf16", "onnxruntime")
    r["steps"][1]["enabled"] = False
    p = plan(r)
    assert p.ok and [s.index for s in p.steps] == [0, 2]


def test_device_needs_are_checked():
    assert "CUDA" in plan(_recipe("cuda_graphs")).errors[0]


def test_passes_after_a_form():
    after_onnx = dict(passes_after(ONNX))
    assert after_onnx["onnxruntime"] is None and after_onnx["quantize_onnx_static"] is None
    assert "before the export_onnx step" in after_onnx["bf16"]
    after_script = dict(passes_after(SCRIPTED))
    assert after_script["export_onnx"] is None and after_script["channels_last"] is None
    assert "before the torchscript step" in after_script["quantize_dynamic_int8"]


def test_source_forms_are_read_without_loading(tmp_path):
    scripted = tmp_path / "m.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(scripted))
    assert source_form(str(scripted)) == SCRIPTED
    assert source_form("zoo:resnet") == EAGER and source_form("pkg.mod:make(n=2)") == EAGER
    assert source_form(str(tmp_path / "missing.onnx")) is None  # loading says what is wrong
    p = plan(_recipe("bf16", source=str(scripted)))
    assert not p.ok and "TorchScript" in p.errors[0]


def test_loaded_model_forms_and_the_runtime_check():
    mlp = load_model("zoo:mlp")
    assert model_form(mlp) == EAGER
    compiled = mlp.replace(module=torch.compile(mlp.module))
    assert model_form(compiled) == COMPILED
    with pytest.raises(PassError, match="before the compile step"):
        get_pass("torch_export")().check_requirements(compiled, "cpu")
    exported = mlp.replace(metadata={"exported_program": True})
    assert model_form(exported) == EXPORTED
    with pytest.raises(PassError, match="before the torch_export step"):
        get_pass("quantize_dynamic_int8")().check_requirements(exported, "cpu")


def test_runner_rejects_an_impossible_order_before_loading(tmp_path, monkeypatch):
    import accel.runner.loop as loop
    from accel.runner import run_recipe

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(loop, "load_original", no_load)
    events = []
    res = run_recipe(
        _recipe("export_onnx", "bf16"), on_event=events.append, out_dir=tmp_path / "run"
    )
    assert res.status == "failed" and "Move this step before the export_onnx step" in res.error
    assert [e.kind for e in events] == ["run_failed"]


def test_cli_dry_run_prints_the_plan_or_rejects(tmp_path, capsys):
    from studio.cli import main

    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(_recipe("fold_batchnorm", "torch_export")))
    bad.write_text(yaml.safe_dump(_recipe("export_onnx", "fp16")))
    assert main(["run", str(good), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "torch_export" in out and "eager -> exported" in out
    assert main(["run", str(bad), "--dry-run"]) == 1
    captured = capsys.readouterr()
    assert "CANNOT RUN" in captured.out and "step 2 (fp16)" in captured.err


def test_dry_run_does_not_import_torch(tmp_path):
    import subprocess

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_recipe("export_onnx", "fp16")))
    code = (
        "import sys; from studio.cli import main; rc = main(['run', sys.argv[1], '--dry-run']); "
        "print('torch' in sys.modules); sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout.strip().endswith("False"), proc.stderr


def test_combinations_that_run_but_mislead_are_warnings():
    p = plan(_recipe("bf16", "export_onnx"))
    assert p.ok and len(p.warnings) == 1 and "float32" in p.warnings[0]


def test_with_on_step_error_skip_an_impossible_step_is_skipped(tmp_path):
    from accel.runner import run_recipe

    r = _recipe("export_onnx", "bf16", "onnxruntime")
    r["on_step_error"] = "skip"
    r["benchmark"] = {"rounds": 1, "iters": 1, "warmup": 0, "min_time_s": 0}
    res = run_recipe(r, out_dir=tmp_path / "run", save_models=False)
    assert res.status == "succeeded", res.error
    assert [s.status for s in res.steps] == ["succeeded", "skipped", "succeeded"]
    assert "before the export_onnx step" in res.steps[1].error


def test_forms_along_for_the_gui():
    from accel.plan import forms_along
    from accel.recipe import load_recipe

    steps = load_recipe(_recipe("compile", "export_onnx", "onnxruntime")).steps
    steps[2] = steps[2].model_copy(update={"enabled": False})
    assert forms_along(steps, EAGER) == [EAGER, COMPILED, ONNX, ONNX]


def test_step_problems_never_raise_and_name_each_steps_problem():
    from accel.plan import step_problems
    from accel.recipe import Step

    steps = [
        Step.model_validate({"pass": "prune_channels", "params": {"ratio": 7}}),
        Step.model_validate({"pass": "compile"}),
        Step.model_validate({"pass": "torch_export"}),
        Step.model_validate({"pass": "no_such_pass"}),
    ]
    first, second, third, fourth = step_problems(steps, EAGER, "cpu")
    assert first.startswith("invalid parameters:") and "ratio" in first
    assert second is None and "before the compile step" in third
    assert fourth == "unknown pass 'no_such_pass'"


def test_placement_appends_inserts_before_the_export_or_says_why_not():
    from accel.plan import palette, placement
    from accel.recipe import Step

    steps = [Step.model_validate({"pass": p}) for p in ("bf16", "export_onnx", "onnxruntime")]
    assert placement(steps, "quantize_onnx_dynamic", EAGER, "cpu").index is None  # appended
    torch_pass = placement(steps, "channels_last", EAGER, "cpu")
    assert torch_pass.ok and torch_pass.index == 1  # before the export
    again = placement(steps, "export_onnx", EAGER, "cpu")  # a second export breaks the first
    assert not again.ok and again.problem == dict(passes_after(ONNX))["export_onnx"]
    assert "CUDA" in placement([], "cuda_graphs", EAGER, "cpu").problem
    assert [p.pass_name for p in palette(steps, EAGER, "cpu")] == [
        name for name, _ in passes_after(ONNX)
    ]


MLP_LAYERS = [
    ("fc1", "Linear"), ("act1", "ReLU"), ("fc2", "Linear"), ("act2", "ReLU"), ("fc3", "Linear")
]  # fmt: skip


def _step(pass_name, **params):
    return {"pass": pass_name, "params": params}


def test_a_typo_in_a_layer_list_is_the_steps_problem_with_close_names():
    r = _recipe()
    r["steps"] = [_step("quantize_dynamic_int8", exclude=["fc9", "fc1"])]
    p = plan(r, layers=MLP_LAYERS)
    assert not p.ok and p.steps[0].problem.startswith("quantize_dynamic_int8: exclude pattern")
    assert "['fc9']" in p.steps[0].problem and "Close names: fc1, fc2, fc3" in p.steps[0].problem
    with pytest.raises(PlanError, match="step 1 .*fc9"):
        check(r, layers=MLP_LAYERS)
    # Without the layers nothing is checked; the plan says when it will be.
    quiet = plan(r)
    assert quiet.ok and any("step 1 exclude" in w and "when it loads" in w for w in quiet.warnings)


def test_type_names_prefixes_and_globs_select_layers():
    r = _recipe()
    r["steps"] = [
        _step("prune_unstructured", ignore=["fc*"]),
        _step("bf16", keep=["Linear"]),
        _step("quantize_dynamic_int8", exclude=["fc3", "act2"]),
    ]
    p = plan(r, layers=MLP_LAYERS)
    assert p.ok, p.errors
    assert not any("when it loads" in w for w in p.warnings)


def test_only_steps_on_the_original_layer_names_are_checked():
    from accel.plan import layer_problems
    from accel.recipe import Step

    r = _recipe()
    # quantize_dynamic_int8 swaps modules: bf16 after it names layers the plan cannot know.
    r["steps"] = [_step("quantize_dynamic_int8", exclude=["fc1"]), _step("bf16", keep=["nope"])]
    assert plan(r, layers=MLP_LAYERS).ok
    # ONNX patterns can be op types or node names: an ONNX quantizer is never checked here.
    r["steps"] = [{"pass": "export_onnx"}, _step("quantize_onnx_dynamic", exclude=["Gather"])]
    assert plan(r, layers=MLP_LAYERS).ok
    # A pass that keeps names (prune) does not stop the check of the steps after it.
    r["steps"] = [_step("prune_unstructured"), _step("fp16", keep=["fc0"])]
    p = plan(r, layers=MLP_LAYERS)
    assert [s.problem is None for s in p.steps] == [True, False] and "keep pattern" in p.errors[0]
    # A model that does not start as a plain torch module: nothing is checked.
    steps = [Step.model_validate(s) for s in r["steps"]]
    assert layer_problems(steps, SCRIPTED, MLP_LAYERS) == {}
    assert list(layer_problems(steps, EAGER, MLP_LAYERS)) == [1]


def test_step_problems_checks_layer_lists_when_given():
    from accel.plan import step_problems
    from accel.recipe import Step

    steps = [
        Step.model_validate(_step("fp16", keep=["fc1"])),
        Step.model_validate(_step("quantize_static_int8", exclude=["fc_1"])),
    ]
    assert step_problems(steps, EAGER, "cpu") == [None, None]
    problems = step_problems(steps, EAGER, "cpu", layers=MLP_LAYERS)
    assert problems[0] is None and "exclude pattern(s) ['fc_1']" in problems[1]
    assert "fc1" in problems[1].split("Close names:")[1]


def test_runner_fails_on_a_typo_before_the_baseline(tmp_path, monkeypatch):
    import accel.runner.loop as loop
    from accel.runner import run_recipe

    def no_baseline(*a, **k):
        raise AssertionError("the baseline ran")

    monkeypatch.setattr(loop, "evaluate_baseline", no_baseline)
    r = _recipe()
    r["steps"] = [_step("fold_batchnorm"), _step("quantize_dynamic_int8", exclude=["fc_2"])]
    events = []
    res = run_recipe(r, on_event=events.append, out_dir=tmp_path / "run")
    assert res.status == "failed" and "step 2 (quantize_dynamic_int8)" in res.error
    assert "['fc_2']" in res.error and "Close names:" in res.error and "fc2" in res.error
    assert events[-1].kind == "run_failed"
