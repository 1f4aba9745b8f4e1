"""Per-layer parity: torch vs torch, torch vs ONNX, fused layers, CLI parity and bisect."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from accel.graph.layer_parity import (
    LayerParityReport,
    bisect_run,
    compare_layers,
    step_model_artifacts,
)
from accel.models import load_model
from accel.runtimes.onnxruntime.layers import onnx_layer_outputs
from studio.cli import main as cli


@pytest.fixture(scope="module")
def resnet():
    return load_model("zoo:resnet")


def perturbed(module: nn.Module, path: str, factor: float = 1.01) -> nn.Module:
    m = copy.deepcopy(module)
    with torch.no_grad():
        m.get_submodule(path).weight.mul_(factor)
    return m


def test_identical_models_pass_every_layer(resnet):
    rep = compare_layers(resnet, copy.deepcopy(resnet.module))
    assert rep.passed and rep.first_failure is None
    assert len(rep.layers) == len([p for p, _ in resnet.module.named_modules() if p])
    assert all(r.max_abs == 0.0 for r in rep.layers)
    # Execution order: a layer comes before the block that contains it.
    names = [r.name for r in rep.layers]
    assert names.index("layer1.0.conv1") < names.index("layer1.0") < names.index("layer1")


def test_first_failing_layer_is_the_perturbed_one(resnet):
    rep = compare_layers(resnet, perturbed(resnet.module, "layer2.1.conv2"))
    assert rep.first_failure == "layer2.1.conv2"
    before = [r for r in rep.layers if r.index < rep.first_failing().index]
    assert before and all(r.passed for r in before)
    errs = rep.module_errors()
    assert errs["layer1.0.conv1"] == 0.0 and errs["layer2.1.conv2"] > 0
    # A looser gate lets it through.
    loose = compare_layers(resnet, perturbed(resnet.module, "layer2.1.conv2"), atol=1.0, rtol=1.0)
    assert loose.passed


def test_fused_conv_bn_is_compared_as_one_layer(resnet):
    fused = copy.deepcopy(resnet.module)
    fused.stem[0] = fuse_conv_bn_eval(fused.stem[0], fused.stem[1])
    fused.stem[1] = nn.Identity()
    rep = compare_layers(resnet, fused)
    assert rep.passed, rep.format_table(only_failures=True)
    row = next(r for r in rep.layers if r.name.startswith("stem.0"))
    assert row.name == "stem.0+stem.1" and row.module_paths == ["stem.0", "stem.1"]


def test_fp16_model_with_input_casts_drifts_measurably():
    m = load_model("zoo:mlp")
    # What the fp16 pass produces: a half module whose inputs are cast by the LoadedModel.
    half = m.replace(module=copy.deepcopy(m.module).half(), input_casts={"x": "float16"})
    rep = compare_layers(m, half, atol=1e-6, rtol=1e-6)
    assert [r.name for r in rep.layers] == ["fc1", "act1", "fc2", "act2", "fc3"]
    assert all(r.max_abs is not None and 0 < r.max_abs < 0.1 for r in rep.layers)
    assert rep.first_failure == "fc1"
    assert compare_layers(m, half, atol=0.05, rtol=0.05).passed


def test_torch_vs_onnx_layers(resnet, tmp_path):
    inputs = resnet.example_inputs()
    good = tmp_path / "good.onnx"
    bad = tmp_path / "bad.onnx"
    torch.onnx.export(
        resnet.module, tuple(inputs.values()), str(good), input_names=list(inputs), dynamo=False
    )
    broken = perturbed(resnet.module, "layer3.0.conv1")
    torch.onnx.export(
        broken, tuple(inputs.values()), str(bad), input_names=list(inputs), dynamo=False
    )
    outs = onnx_layer_outputs(good, inputs)
    assert "layer2.0.downsample.0" in outs and outs["fc"].shape == (1, 10)
    rep = compare_layers(resnet, load_model(str(good)), inputs)
    assert rep.passed, rep.format_table(only_failures=True)
    # BatchNorm is folded into the conv by the exporter: compared as conv+bn runs.
    assert "layer1.0.conv1+layer1.0.bn1" in [r.name for r in rep.layers]
    assert "layer1.0.bn1" in rep.only_a
    rep_bad = compare_layers(resnet, bad, inputs)
    assert rep_bad.first_failure == "layer3.0.conv1+layer3.0.bn1"
    assert LayerParityReport.from_dict(json.loads(json.dumps(rep_bad.to_dict()))) == rep_bad


@pytest.mark.parametrize("src", ["zoo:transformer", "zoo:lstm"])
def test_other_zoo_models_against_their_onnx(src, tmp_path):
    m = load_model(src)
    inputs = m.example_inputs(seq=16)
    path = tmp_path / "m.onnx"
    torch.onnx.export(
        m.module, tuple(inputs.values()), str(path), input_names=list(inputs), dynamo=False
    )
    rep = compare_layers(m, path, inputs, atol=1e-4, rtol=1e-3)
    assert len(rep.layers) >= 3
    assert rep.passed, rep.format_table(only_failures=True)


def test_cli_parity_reports_first_failing_layer(tmp_path, capsys):
    m = load_model("zoo:mlp")
    inputs = m.example_inputs()
    bad = tmp_path / "bad.onnx"
    # No input_names: the file calls its input "input.1", the CLI feeds it by position.
    torch.onnx.export(
        perturbed(m.module, "fc2", 1.05), tuple(inputs.values()), str(bad), dynamo=False
    )
    out_json = tmp_path / "rep.json"
    rc = cli(["parity", "zoo:mlp", str(bad), "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "first failing layer: fc2 (not allclose" in out
    assert json.loads(out_json.read_text())["first_failure"] == "fc2"
    rc = cli(["parity", "zoo:mlp", str(bad), "--atol", "10", "--rtol", "10"])
    assert rc == 0 and "within atol 10.0" in capsys.readouterr().out


def make_run(tmp_path) -> tuple:
    m = load_model("zoo:mlp")
    inputs = m.example_inputs()
    run = tmp_path / "20260101-000000-000000-demo"
    (run / "step_00_export_onnx").mkdir(parents=True)
    (run / "step_01_quantize").mkdir()
    (run / "step_02_bf16").mkdir()
    (run / "recipe.json").write_text(
        json.dumps(
            {"model": {"source": "zoo:mlp"}, "seed": 0, "gates": {"atol": 1e-4, "rtol": 1e-3}}
        )
    )
    torch.onnx.export(
        m.module,
        tuple(inputs.values()),
        str(run / "step_00_export_onnx" / "model.onnx"),
        input_names=list(inputs),
        dynamo=False,
    )
    torch.onnx.export(
        perturbed(m.module, "fc2", 1.02),
        tuple(inputs.values()),
        str(run / "step_01_quantize" / "model.onnx"),
        input_names=list(inputs),
        dynamo=False,
    )
    torch.save({"out": torch.zeros(1)}, run / "step_02_bf16" / "outputs.pt")  # not a model
    return run


def test_bisect_run_folder(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path)
    assert [s for s, _ in step_model_artifacts(run)] == [
        "step_00_export_onnx",
        "step_01_quantize",
        "step_02_bf16",
    ]
    steps = bisect_run(run)
    assert steps[0].report.passed
    assert steps[1].report.first_failure == "fc2"
    assert steps[2].report is None and "no saved model" in steps[2].error
    rc = cli(["bisect", str(run)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "step_01_quantize: first failing layer fc2" in out
    assert "step_00_export_onnx: all" in out
    # By id, from the folder that holds runs/.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    run.rename(tmp_path / "runs" / run.name)
    assert cli(["bisect", "20260101-000000"]) == 1
    assert cli(["bisect", "nope"]) == 2
    assert "no run folder" in capsys.readouterr().err


def test_bisect_compares_in_memory_steps_layer_by_layer(tmp_path):
    """bf16 and int8 steps change the model only in memory: the runner saves each as
    model.pt2, so bisect compares their layers. (quantize_dynamic_int8 refuses a bf16 model,
    so they run as two recipes.)"""
    from accel.runner import run_recipe

    runs = []
    for name, step in (
        ("bf16", {"pass": "bf16"}),
        ("int8", {"pass": "quantize_dynamic_int8", "params": {"backend": "torchao"}}),
    ):
        recipe = {
            "name": name,
            "model": {"source": "zoo:mlp"},
            "benchmark": {"warmup": 1, "iters": 2},
            "steps": [step],
        }
        res = run_recipe(recipe, out_dir=tmp_path / name, save_models=True)
        assert res.status == "succeeded", res.error
        runs.append(res.run_dir)
    for run in runs:
        steps = bisect_run(run, atol=0.05, rtol=0.05)
        assert len(steps) == 1 and steps[0].error is None, steps
        (low,) = steps
        assert low.artifact.endswith("model.pt2")
        assert [r.name for r in low.report.layers] == ["fc1", "act1", "fc2", "act2", "fc3"]
        # The low-precision step drifts measurably in every layer, within loose tolerances.
        assert all(r.max_abs > 0 for r in low.report.layers) and low.report.passed
        strict = bisect_run(run)[0].report  # the recipe's default gates: fc1 drifts first
        assert strict.first_failure == "fc1"


def test_exported_program_layers_come_from_nn_module_stack(tmp_path):
    m = load_model("zoo:mlp")
    inputs = m.example_inputs()
    bad = perturbed(m.module, "fc3", 1.05)
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(bad, tuple(inputs.values())), str(path))
    loaded = load_model(str(path))
    rep = compare_layers(m, loaded, inputs)
    assert [r.name for r in rep.layers] == ["fc1", "act1", "fc2", "act2", "fc3"]
    assert rep.first_failure == "fc3"
    assert rep.layers[0].max_abs == 0.0


def test_compiled_model_is_compared_eagerly():
    m = load_model("zoo:mlp")
    compiled = m.replace(module=torch.compile(copy.deepcopy(m.module), backend="eager"))
    rep = compare_layers(m, compiled)
    assert rep.passed and len(rep.layers) == 5
    assert any("torch.compile" in n for n in rep.notes)


def test_quantized_onnx_layers_compare_float_tensors(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()
    ).eval()
    inputs = {"x": torch.randn(1, 3, 16, 16)}
    fp32 = tmp_path / "fp32.onnx"
    int8 = tmp_path / "int8.onnx"
    torch.onnx.export(net, (inputs["x"],), str(fp32), input_names=["x"], dynamo=False)
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    for original in (net, fp32):  # torch -> ONNX and ONNX -> ONNX
        rep = compare_layers(original, int8, inputs, atol=1e-6, rtol=1e-6)
        # Layers are tapped at float tensors (not the uint8 of DynamicQuantizeLinear).
        assert [r.name for r in rep.layers] == ["0", "1", "2", "3"]
        assert all(r.max_abs is not None and r.max_abs > 0 for r in rep.layers), rep.format_table()
        assert rep.first_failure == "0"
        assert compare_layers(original, int8, inputs, atol=1.0, rtol=1.0).passed


def test_cli_graph_summary_json_and_diff(tmp_path, capsys):
    from accel.graph import Graph

    m = load_model("zoo:mlp")
    inputs = m.example_inputs()
    onnx_path = tmp_path / "m.onnx"
    torch.onnx.export(
        m.module, tuple(inputs.values()), str(onnx_path), input_names=list(inputs), dynamo=False
    )
    out_json = tmp_path / "g.json"
    assert cli(["graph", "zoo:mlp", "--json", str(out_json), "--diff", str(onnx_path)]) == 0
    out = capsys.readouterr().out
    assert "built with torch.export" in out
    assert "fc1" in out and "1,049,600 params" in out
    # Gemm+Relu: the relus stay separate nodes in the exported ONNX, nothing fused or lost.
    assert "diff: 5 matched, 0 added, 0 removed, 0 fused" in out
    g = Graph.from_dict(json.loads(out_json.read_text()))
    assert g.num_params == m.num_params


def test_torchscript_model_gets_a_clear_note(tmp_path):
    m = load_model("zoo:mlp")
    inputs = m.example_inputs()
    path = tmp_path / "m.ts"
    torch.jit.trace(m.module, tuple(inputs.values())).save(str(path))
    rep = compare_layers(m, load_model(str(path), m.input_spec), inputs)
    assert rep.layers == [] and rep.passed is True
    assert any("TorchScript" in n for n in rep.notes)
