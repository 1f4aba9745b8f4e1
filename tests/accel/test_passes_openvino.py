"""OpenVINO passes: openvino and quantize_openvino on zoo models, chains across kinds,
script export reproducing the runner, and the errors people hit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from accel.codegen import recipe_to_script
from accel.errors import PassError
from accel.models import load_model
from accel.passes import PassContext, get_pass
from accel.runner import run_recipe

BENCH = {"warmup": 0, "iters": 2, "threads": 1}
RESNET = "zoo:resnet(widths=(8, 16, 32), blocks=1)"
TRANSFORMER = "zoo:transformer(hidden=64, num_layers=2, ffn=128, vocab_size=500)"
TOKENS = "input_ids:int64[batch,seq]{0..500}; batch=1..16:2; seq=1..64:16"
LOOSE = {"rtol": 1.0, "atol": 1.0, "min_cosine": 0.99}


def _recipe(source, steps, spec=None, **extra):
    r = {"name": "ov", "model": {"source": source}, "benchmark": BENCH, "steps": steps}
    if spec:
        r["model"]["input_spec"] = spec
    r.update(extra)
    return r


def _cosine(step):
    return min(o["cosine"] for o in step.parity["outputs"])


def _top1(step):
    return min(o["top1"] for o in step.parity["outputs"])


def _apply(name, model, params, tmp_path, **ctx_kw):
    p = get_pass(name)
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path, original=model, **ctx_kw)
    return p().apply(model, p.parse_config(params), ctx), ctx


@pytest.mark.parametrize(
    "source,spec", [(RESNET, None), (TRANSFORMER, TOKENS)], ids=["resnet", "transformer"]
)
def test_openvino_then_int8_on_zoo_models(tmp_path, source, spec):
    steps = [
        {"pass": "openvino", "params": {"precision": "bf16"}},
        {"pass": "quantize_openvino", "params": {"samples": 16}},
    ]
    res = run_recipe(_recipe(source, steps, spec, gates=LOOSE), out_dir=tmp_path)
    assert res.status == "succeeded", res.error
    ov, q = res.steps
    assert ov.details["precision_ran"] in ("bf16", "f32")  # f32 where the CPU lacks bf16
    assert ov.metrics["compile_time_s"] > 0 and ov.metrics["convert_time_s"] > 0
    assert _cosine(ov) > 0.999
    assert q.details["fake_quantize_ops"] > 0 and q.details["calibration_batches"] == 16
    assert q.details["model_type"] == ("transformer" if spec else "default")
    assert _cosine(q) > 0.99 and _top1(q) >= 0.99
    files = {a["kind"]: a["path"] for a in q.artifacts}
    assert files["model"].endswith("model.xml") and files["weights"].endswith("model.bin")


def test_chain_torch_export_onnx_openvino(tmp_path):
    steps = [
        {"pass": "export_onnx", "params": {"exporter": "torchscript"}},
        # f32: the default (auto) runs bf16 on CPUs with bf16 kernels, outside 1e-4
        {"pass": "openvino", "params": {"precision": "f32"}},
    ]
    res = run_recipe(_recipe(RESNET, steps), out_dir=tmp_path)
    assert res.status == "succeeded", res.error
    assert res.steps[1].details["converted_from"] == "onnx"
    assert max(o["max_abs"] for o in res.steps[1].parity["outputs"]) < 1e-4


def test_chain_onnx_static_int8_then_openvino(tmp_path):
    # an .onnx source; OpenVINO runs the QDQ model ORT's static quantizer wrote
    src = load_model(RESNET)
    onnx_model, _ = _apply("export_onnx", src, {"exporter": "torchscript"}, tmp_path)
    steps = [{"pass": "quantize_onnx_static"}, {"pass": "openvino"}]
    res = run_recipe(
        _recipe(str(onnx_model.onnx_path), steps, gates=LOOSE), out_dir=tmp_path / "run"
    )
    assert res.status == "succeeded", res.error
    ov = res.steps[1]
    assert ov.details["converted_from"] == "onnx" and _cosine(ov) > 0.99


def test_wrong_order_says_what_to_add(tmp_path):
    res = run_recipe(_recipe(RESNET, [{"pass": "quantize_openvino"}]), out_dir=tmp_path)
    assert res.status == "failed"
    assert "quantize_openvino needs an openvino model, but the model is torch" in res.error
    assert "Add an openvino step before it" in res.error
    assert res.steps == []  # refused by the pre-flight plan, before any work


def test_bf16_fallback_warns_and_records_what_ran(tmp_path, monkeypatch):
    import accel.runtimes.openvino.ir as ovb

    monkeypatch.setattr(ovb, "bf16_supported", lambda device="CPU": False)
    m = load_model(RESNET)
    new, ctx = _apply("openvino", m, {"precision": "bf16"}, tmp_path)
    assert any("fell back to f32" in w for w in ctx.details["warnings"])
    assert ctx.details["precision_ran"] == "f32"
    assert new.session_options["precision"] == "f32"


def test_unconvertible_op_names_it_and_suggests_onnx(tmp_path):
    f = tmp_path / "odd.py"
    f.write_text(
        "import torch\n"
        "class Odd(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.special.bessel_j0(x)\n"
        "def build():\n"
        "    return Odd()\n"
    )
    m = load_model(f"{f}:build", "x:float32[2,8]")
    with pytest.raises(PassError) as err:
        _apply("openvino", m, {}, tmp_path / "w")
    msg = str(err.value)
    assert "aten::special_bessel_j0" in msg and "export_onnx" in msg
    assert not (tmp_path / "w" / "model.xml").exists()


def test_calibration_of_the_wrong_shape_is_rejected_before_work(tmp_path):
    m = load_model(RESNET)
    ov, _ = _apply("openvino", m, {}, tmp_path / "ov")

    class Wrong:
        def batches(self):
            yield {"x": torch.randn(2, 3, 32)}  # rank 3, the model takes 4-d images

    with pytest.raises(PassError, match=r"calibration batch 0: input 'x' has shape \[2, 3, 32\]"):
        _apply("quantize_openvino", ov, {}, tmp_path / "q", calibration=Wrong())
    assert not (tmp_path / "q" / "model.xml").exists()


def test_exclude_maps_to_ignored_scope(tmp_path):
    m = load_model(RESNET)
    ov, _ = _apply("openvino", m, {}, tmp_path / "ov")
    q, ctx = _apply("quantize_openvino", ov, {"samples": 4, "exclude": ["fc"]}, tmp_path / "q")
    assert ctx.details["ignored_ops"] and all(
        n.startswith("__module.fc/") for n in ctx.details["ignored_ops"]
    )
    with pytest.raises(PassError, match=r"exclude pattern\(s\) \['nope\.\*'\] match no op"):
        _apply("quantize_openvino", ov, {"exclude": ["nope.*"]}, tmp_path / "q2")


def test_accuracy_controlled_int8(tmp_path):
    steps = [
        {"pass": "openvino"},
        {"pass": "quantize_openvino", "params": {"samples": 8, "max_accuracy_drop": 0.01}},
    ]
    recipe = _recipe(
        "zoo:mlp(hidden=128)",
        steps,
        data={"eval": "synthetic-labelled(batches=4, batch=16)"},
        gates={**LOOSE, "max_accuracy_drop": 0.05},
    )
    res = run_recipe(recipe, out_dir=tmp_path)
    assert res.status == "succeeded", res.error
    q = res.steps[1]
    assert q.details["accuracy_control"] == {"metric": "top1", "max_drop": 0.01}
    assert q.metrics["accuracy"] >= res.baseline["accuracy"] - 0.05


def test_accuracy_control_needs_labelled_eval_data(tmp_path):
    m = load_model("zoo:mlp(hidden=128)")
    ov, _ = _apply("openvino", m, {}, tmp_path / "ov")
    with pytest.raises(PassError, match="needs labelled evaluation data"):
        _apply("quantize_openvino", ov, {"max_accuracy_drop": 0.01}, tmp_path / "q")


@pytest.mark.parametrize(
    "source,spec,exclude",
    [(RESNET, None, ["fc"]), (TRANSFORMER, TOKENS, [])],
    ids=["resnet", "transformer"],
)
def test_script_reproduces_the_runner(tmp_path, source, spec, exclude):
    steps = [
        {"pass": "openvino", "params": {"precision": "bf16"}},
        {"pass": "quantize_openvino", "params": {"samples": 8, "exclude": exclude}},
    ]
    recipe = _recipe(source, steps, spec, gates=LOOSE)
    res = run_recipe(recipe, out_dir=tmp_path / "run")
    assert res.status == "succeeded", res.error
    script = tmp_path / "recipe.py"
    script.write_text(recipe_to_script(recipe))
    text = script.read_text()
    assert "accel" not in text.replace("Accel Studio", "") and "import openvino as ov" in text
    out = _run_script(script, tmp_path)
    results = json.loads((out / "results.json").read_text())
    assert [r["step"] for r in results] == [s["pass"] for s in steps]
    _assert_same_outputs(tmp_path / "run", out, steps)


def _run_script(script, tmp_path):
    """Run an exported script with --out; its output folder."""
    out = tmp_path / "script_out"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _assert_same_outputs(run_dir, script_dir, steps):
    """Every step's saved outputs agree between the runner and the script."""
    for i, step in enumerate(steps):
        name = f"step_{i:02d}_{step['pass']}"
        want = torch.load(run_dir / name / "outputs.pt")
        got = torch.load(script_dir / name / "outputs.pt")
        want = want[0] if isinstance(want, tuple | list) else want
        got = got[0] if isinstance(got, tuple | list) else got
        assert torch.allclose(want, got, rtol=1e-4, atol=1e-5), name


def test_compress_weights_adjusts_a_group_size_that_does_not_divide_a_layer(tmp_path):
    """diffusers:unet2d_condition was refused ('InvalidGroupSizeError: Failed to apply
    group-wise quantization with group size 128'): some layers' input size is not a multiple.
    The default fallback gives those layers a group that divides them; 'error' keeps NNCF's
    refusal, which names the check."""
    pytest.importorskip("nncf")
    model = load_model("zoo:mlp(in_features=96, hidden=96)", "x:float32[batch,96]; batch=1..8:2")
    ov_model, _ = _apply("openvino", model, {"precision": "f32"}, tmp_path / "ov")
    params = {"mode": "int4_sym", "group_size": 64}
    out, ctx = _apply("compress_weights_openvino", ov_model, params, tmp_path / "c")
    assert ctx.details["group_size_fallback"] == "adjust"
    assert out.size_bytes < ov_model.size_bytes
    ref = model.forward(model.example_inputs())
    got = torch.as_tensor(out.forward(model.example_inputs())[0])
    assert torch.nn.functional.cosine_similarity(got.flatten(), ref.flatten(), dim=0) > 0.9
    with pytest.raises(PassError, match="InvalidGroupSizeError"):
        _apply(
            "compress_weights_openvino",
            ov_model,
            {**params, "group_size_fallback": "error"},
            tmp_path / "e",
        )


@pytest.mark.parametrize("mode,kinds", [("int8_asym", {"u8"}), ("int4_sym", {"i4", "u4"})])
def test_compressed_weights_are_counted_as_parameters(tmp_path, mode, kinds):
    """The Model panel showed 82,208 parameters for an int8 Llama IR of 43.8 M: only real
    constants were counted, so NNCF's integer weights were not, and their scales were."""
    pytest.importorskip("nncf")
    spec = "x:float32[batch,128]; batch=1..8:2"
    model = load_model("zoo:mlp(in_features=128, hidden=256)", spec)
    ov_model, _ = _apply("openvino", model, {"precision": "f32"}, tmp_path / "ov")
    params = {"mode": mode, "ratio": 1.0, "group_size": 32}
    out, _ = _apply("compress_weights_openvino", ov_model, params, tmp_path / "c")
    n_torch = sum(p.numel() for p in model.module.parameters() if p.dim() > 1 or p.numel() > 1)
    assert ov_model.num_params == n_torch
    dtypes = out.metadata["param_dtypes"]
    assert set(dtypes) & kinds, dtypes
    assert sum(v for k, v in dtypes.items() if k in kinds) >= 0.9 * n_torch  # the matrices
    assert out.num_params == n_torch  # the same weights, in fewer bits
    assert out.runtime.info(out)["param_dtypes"] == dtypes


def _tracer_fails(monkeypatch, export_fails=False):
    """OpenVINO's converter fails on traced torch modules (as on aten::diff in transformers'
    causal mask); ``export_fails``: on torch.export programs too."""
    import openvino as ov

    real = ov.convert_model

    def convert(obj, **kw):
        if isinstance(obj, torch.nn.Module) or export_fails:
            raise RuntimeError("No conversion rule found for operations: aten::diff")
        return real(obj, **kw)

    monkeypatch.setattr(ov, "convert_model", convert)


def test_a_failed_traced_conversion_falls_back_to_torch_export(tmp_path, monkeypatch):
    _tracer_fails(monkeypatch)
    model = load_model(RESNET)
    out, ctx = _apply("openvino", model, {}, tmp_path)
    assert ctx.details["converted_via"].startswith("torch.export (the traced conversion failed")
    from accel.parity import compare, normalize_outputs

    x = model.example_inputs()
    report = compare(normalize_outputs(model.forward(x)), normalize_outputs(out.forward(x)))
    assert report.worst()["min_cosine"] > 0.999


def test_both_conversions_failing_report_the_traced_error(tmp_path, monkeypatch):
    _tracer_fails(monkeypatch, export_fails=True)
    with pytest.raises(PassError, match="no conversion rule for aten::diff"):
        _apply("openvino", load_model(RESNET), {}, tmp_path)


DETECTIONS = """
import torch


class Detections(torch.nn.Module):
    # as torchvision's detectors: a list of dicts out, as many boxes as pass a score threshold
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        out = []
        for scores in self.fc(x):
            kept = scores[scores > 0]
            if kept.shape[0] > 2:  # a Python branch on a count read from the data
                kept = kept[:2]
            out.append({"scores": kept})
        return out


def build():
    torch.manual_seed(0)
    return Detections().eval()
"""


def test_openvino_says_why_both_conversion_routes_failed(tmp_path):
    """tv:ssdlite320_mobilenet_v3_large: tracing fails on its list-of-dicts output and the
    torch.export route on its data-dependent box count; the refusal named only the first."""
    (tmp_path / "det.py").write_text(DETECTIONS)
    model = load_model(f"{tmp_path / 'det.py'}:build", "x:float32[batch,8]; batch=1..4:2")
    p = get_pass("openvino")()
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path)
    with pytest.raises(PassError) as err:
        p.apply(model.runtime.copy(model), p.parse_config({}), ctx)
    text = str(err.value)
    assert "Couldn't get TorchScript module by tracing" in text
    assert "The torch.export route failed too:" in text and "data-dependent" in text, text


POOLER = """
import torch


class Pooler(torch.nn.Module):
    # Hugging Face EfficientNet's pooler: AvgPool2d(hidden_dim, ceil_mode=True) on a small map
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.pooler = torch.nn.AvgPool2d(16, ceil_mode=True)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(self.pooler(self.conv(x)).flatten(1))


def build():
    torch.manual_seed(0)
    return Pooler().eval()
"""


def test_openvino_converts_a_pool_whose_kernel_covers_the_map_as_a_global_pool(tmp_path):
    """hf:efficientnet_b0: openvino and compress_weights_openvino crashed at the first
    inference and quantize_openvino was refused: OpenVINO rejects an AvgPool kernel (1280)
    larger than its input map, which torch averages whole. Reproduced on OpenVINO directly,
    then the pass converts such a pool as a global one (same outputs)."""
    import openvino as ov

    (tmp_path / "pooler.py").write_text(POOLER)
    spec = "x:float32[batch,3,8,8]; batch=1..4:2"
    model = load_model(f"{tmp_path / 'pooler.py'}:build", spec)
    x = model.example_inputs()["x"]
    with torch.no_grad():
        want = model.module(x)
    raw = ov.Core().compile_model(ov.convert_model(model.module, example_input=(x,)), "CPU")
    with pytest.raises(RuntimeError, match="larger than the data shape after padding"):
        raw(x.numpy())
    p = get_pass("openvino")()
    ctx = PassContext(inputs={"x": x}, work_dir=tmp_path)
    new = p.apply(model.runtime.copy(model), p.parse_config({"precision": "f32"}), ctx)
    assert ctx.details["global_pools_as_mean"] == ["pooler"]
    out = new.forward({"x": x})
    out = out[0] if isinstance(out, (tuple, list)) else out
    assert torch.allclose(out, want, atol=1e-5)
    assert type(model.module.pooler) is torch.nn.AvgPool2d  # the source module is unchanged


@pytest.mark.parametrize(
    "steps",
    [[{"pass": "openvino", "params": {"precision": "f32"}}], [{"pass": "export_onnx"}]],
    ids=["openvino", "export_onnx"],
)
def test_the_exported_script_converts_a_covering_pool_as_the_studio_does(tmp_path, steps):
    """The studio converts such a pool as a mean; the exported script carries the same
    rewrite (without it the script's OpenVINO model failed at its first inference)."""
    (tmp_path / "pooler.py").write_text(POOLER)
    spec = "x:float32[batch,3,8,8]; batch=1..4:2"
    recipe = _recipe(f"{tmp_path / 'pooler.py'}:build", steps, spec, gates=LOOSE)
    res = run_recipe(recipe, out_dir=tmp_path / "run", trust_recipe_code=True)
    assert res.status == "succeeded", res.error
    assert res.steps[0].details["global_pools_as_mean"] == ["pooler"]
    script = tmp_path / "recipe.py"
    script.write_text(recipe_to_script(recipe))
    assert "def exact_global_pools(module, run, fixed_maps=True):" in script.read_text()
    _assert_same_outputs(tmp_path / "run", _run_script(script, tmp_path), steps)
