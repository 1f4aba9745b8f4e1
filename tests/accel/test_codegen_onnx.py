"""Script export of the ONNX passes: the script reproduces the runner's outputs step by step."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from accel.codegen import recipe_to_script
from accel.runner import run_recipe

BENCH = {"warmup": 0, "iters": 2}

RECIPES = {
    # every option of the three passes that changes the script appears in one of these
    "lstm-torchscript": {
        "name": "lstm-onnx",
        "model": {
            "source": "zoo:lstm(vocab_size=500, embed=32, hidden=64)",
            "input_spec": "tokens:int64[batch,seq]{0..500}; batch=1..16:2; seq=1..64:16",
        },
        "benchmark": BENCH,
        "steps": [
            {
                "pass": "export_onnx",
                "params": {"exporter": "torchscript", "simplify": True, "external_data": True},
            },
            {"pass": "onnxruntime", "params": {"intra_op_threads": 1}},
            {"pass": "onnx_fp16"},
        ],
    },
    "mlp-dynamo": {
        "name": "mlp-onnx",
        "model": {"source": "zoo:mlp(hidden=128)"},
        "benchmark": BENCH,
        "steps": [
            {"pass": "export_onnx", "params": {"exporter": "dynamo", "opset": 18}},
            {"pass": "onnx_fp16", "params": {"op_block_list": [], "node_block_list": []}},
            {
                "pass": "onnxruntime",
                "params": {
                    "graph_optimization_level": "basic",
                    "providers": ["cpu"],
                    "execution_mode": "parallel",
                    "inter_op_threads": 1,
                    "save_optimized": False,
                },
            },
        ],
    },
}


@pytest.mark.parametrize("key", list(RECIPES))
def test_script_reproduces_the_runner(tmp_path, key):
    recipe = RECIPES[key]
    res = run_recipe(recipe, out_dir=tmp_path / "run")
    assert res.status == "succeeded", res.error
    script = tmp_path / "recipe.py"
    script.write_text(recipe_to_script(recipe))
    text = script.read_text()
    assert "accel" not in text.replace("Accel Studio", "") and "studio." not in text
    out = tmp_path / "script_out"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert [r["step"] for r in results] == [s["pass"] for s in recipe["steps"]]
    assert all(r["passed"] for r in results), results
    for i, step in enumerate(recipe["steps"]):
        name = f"step_{i:02d}_{step['pass']}"
        want = torch.load(tmp_path / "run" / name / "outputs.pt")
        got = torch.load(out / name / "outputs.pt")
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3, msg=f"{key} {name}")
    assert (out / "step_00_export_onnx" / "model.onnx").is_file()
    if key == "lstm-torchscript":
        assert (out / "step_00_export_onnx" / "model.onnx.data").is_file()
    fp16_dir = next(out.glob("step_*_onnx_fp16"))
    assert (fp16_dir / "model_fp16.onnx").is_file() and not (fp16_dir / "fp16_probe.onnx").exists()
    if key == "lstm-torchscript":  # the optimized graph is an artifact of the script too
        assert (out / "step_01_onnxruntime" / "model.optimized.onnx").is_file()


@pytest.mark.parametrize(
    "steps",
    [
        [
            {
                "pass": "export_onnx",
                "params": {
                    "exporter": "dynamo",
                    "dynamic": False,
                    "simplify": True,
                    "external_data": True,
                },
            }
        ],
        [
            {
                "pass": "export_onnx",
                "params": {"exporter": "torchscript", "opset": 13, "dynamic": False},
            }
        ],
        [
            {"pass": "export_onnx"},
            {
                "pass": "onnxruntime",
                "params": {
                    "graph_optimization_level": "disabled",
                    "providers": ["tensorrt", "cuda", "cpu"],
                },
            },
            {
                "pass": "onnx_fp16",
                "params": {
                    "keep_io_types": False,
                    "op_block_list": ["Softmax"],
                    "node_block_list": ["n1"],
                },
            },
        ],
    ],
)
def test_every_option_writes_valid_python(steps):
    """Options not run end to end above still give a script that compiles, with their values."""
    text = recipe_to_script({"model": {"source": "zoo:mlp"}, "steps": steps})
    compile(text, "recipe.py", "exec")
    params = {k: v for s in steps for k, v in s.get("params", {}).items()}
    if "opset" in params:
        assert "opset_version=13" in text and "dynamic_axes=None," in text
    if params.get("external_data"):
        assert 'location="model.onnx.data"' in text and "onnxslim.slim" in text
    if "providers" in params:
        assert (
            "ORT_DISABLE_ALL" in text
            and "'TensorrtExecutionProvider', 'CUDAExecutionProvider'" in text
        )
        assert "keep_io_types=False" in text and "['Softmax']" in text and "['n1']" in text


def test_script_runs_with_a_relative_out_from_another_folder(tmp_path):
    """The docstring's own command (``--out results/``, relative), run from a folder other
    than the script's: the quantization step's scratch folder must not break the paths."""
    recipe = {
        "name": "mlp-onnx-int8",
        "model": {"source": "zoo:mlp(hidden=64)"},
        "benchmark": BENCH,
        "steps": [{"pass": "export_onnx"}, {"pass": "quantize_onnx_dynamic"}],
    }
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "s.py"
    script.write_text(recipe_to_script(recipe))
    (tmp_path / "elsewhere").mkdir()
    proc = subprocess.run(
        [sys.executable, "../scripts/s.py", "--out", "results_script/"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path / "elsewhere",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "elsewhere" / "results_script"
    results = json.loads((out / "results.json").read_text())
    assert [r["step"] for r in results] == ["export_onnx", "quantize_onnx_dynamic"]
    assert (out / "step_01_quantize_onnx_dynamic" / "model_int8_dynamic.onnx").is_file()
