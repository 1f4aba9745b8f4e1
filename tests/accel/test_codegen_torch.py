"""Exported scripts of recipes with the torch passes reproduce the runner's outputs.

Each recipe is run by the runner and exported with ``recipe_to_script``; the script runs in a
subprocess (``python script.py --out DIR``) and every ``DIR/step_XX_name/outputs.pt`` is compared
with the runner's within the step's gates.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accel.codegen import recipe_to_script
from accel.parity import Tolerances, compare
from accel.recipe import load_recipe
from accel.runner import run_recipe
from tests.timing_rows import assert_table_agrees

RESNET = "zoo:resnet(widths=(8, 16, 32), blocks=1)"
RESNET_SPEC = "x:float32[batch,3,32,32]; batch=1..16:2"
MLP = "zoo:mlp(in_features=64, hidden=64)"
MLP_SPEC = "x:float32[batch,64]; batch=1..64:4"
TRANSFORMER = "zoo:transformer(vocab_size=100, hidden=32, num_layers=1, num_heads=2, ffn=64)"
TRANSFORMER_SPEC = "input_ids:int64[batch,seq]{0..100}; batch=1..8:1; seq=1..64:16"
LOW = {"rtol": 0.05, "atol": 0.05, "min_cosine": 0.99}


def _recipe(name, source, spec, steps, device="cpu"):
    return {
        "name": name,
        "model": {"source": source, "input_spec": spec},
        "device": device,
        "steps": steps,
        "benchmark": {"warmup": 1, "iters": 3},
        "on_gate_fail": "stop",
    }


RECIPES = {
    # fold_batchnorm, channels_last, bf16 and torchscript (trace)
    "resnet": _recipe(
        "resnet",
        RESNET,
        RESNET_SPEC,
        [
            {"pass": "fold_batchnorm"},
            {"pass": "channels_last"},
            {"pass": "bf16", "gates": LOW},
            {"pass": "torchscript"},
        ],
    ),
    # fp16 with the head kept in fp32, then torch.export with a dynamic batch
    "mlp_fp16_export": _recipe(
        "mlp",
        MLP,
        MLP_SPEC,
        [
            {"pass": "fp16", "params": {"keep_last_fp32": True}, "gates": LOW},
            {"pass": "torch_export"},
        ],
    ),
    # autocast then torch.compile; batch 1 exercises the export-on-2 path elsewhere
    "mlp_autocast_compile": _recipe(
        "mlp2",
        MLP,
        MLP_SPEC,
        [
            {"pass": "autocast", "gates": LOW},
            {"pass": "compile", "params": {"backend": "aot_eager"}},
        ],
    ),
    # integer inputs, norms and a whole attention block (keep pattern) kept in fp32, export
    # with batch 1 (exported on a batch-2 example)
    "transformer": _recipe(
        "transformer",
        TRANSFORMER,
        TRANSFORMER_SPEC,
        [
            {"pass": "bf16", "params": {"keep": ["layers.0.attention"]}, "gates": LOW},
            {"pass": "torch_export"},
        ],
    ),
}


def _check_script_matches_runner(recipe: dict, tmp_path: Path) -> list[str]:
    res = run_recipe(recipe, out_dir=tmp_path / "run")
    assert res.ok, res.error
    script = tmp_path / "recipe.py"
    script.write_text(recipe_to_script(recipe))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FAIL" not in proc.stdout, proc.stdout
    r = load_recipe(recipe)
    ref_runner = torch.load(tmp_path / "run" / "reference_outputs.pt")
    ref_script = torch.load(out / "reference_outputs.pt")
    assert torch.equal(ref_runner, ref_script)
    compared = []
    for index, step in r.enabled_steps():
        name = f"step_{index:02d}_{step.pass_name}"
        a = torch.load(tmp_path / "run" / name / "outputs.pt")
        b = torch.load(out / name / "outputs.pt")
        g = r.gates_for(step)
        report = compare(a, b, Tolerances(rtol=g.rtol, atol=g.atol, min_cosine=g.min_cosine))
        assert report.passed, f"{name}: {report.first_failure}"
        compared.append(name)
    return compared


@pytest.mark.parametrize(
    "name", ["resnet", "mlp_fp16_export", "mlp_autocast_compile", "transformer"]
)
def test_script_reproduces_runner(name, tmp_path):
    compared = _check_script_matches_runner(RECIPES[name], tmp_path)
    assert len(compared) == len(RECIPES[name]["steps"])
    script = (tmp_path / "recipe.py").read_text()
    assert "accel" not in script.replace("Accel Studio", "")  # public libraries only


def test_script_has_the_passes_code():
    script = recipe_to_script(RECIPES["resnet"])
    assert "def fold_batchnorm(model, example_args=None):" in script
    assert "def conv_bn_pairs_from_export(" in script
    assert "class KeepFloat32(nn.Module):" in script
    assert "torch.jit.save(" in script and "torch.jit.load(" in script
    assert "gates=(0.05, 0.05, 0.99)" in script
    export = recipe_to_script(RECIPES["transformer"])
    assert (
        "torch.export.Dim(" in export
        and "DIMS = {'batch': (1, 8, 1), 'seq': (1, 64, 16)}" in export
    )
    compiled = recipe_to_script(RECIPES["mlp_autocast_compile"])
    assert "torch.compile(model, backend='aot_eager')" in compiled
    assert "class AutocastForward(nn.Module):" in compiled


def test_cuda_graphs_script_text():
    recipe = _recipe("g", MLP, MLP_SPEC, [{"pass": "cuda_graphs"}], device="cuda:0")
    script = recipe_to_script(recipe)
    assert "class CUDAGraphRunner(nn.Module):" in script
    assert (
        "model = CUDAGraphRunner(model, prepared_args(inputs, input_casts, device), warmup=3)"
        in script
    )
    compile(script, "recipe.py", "exec")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graphs_script_reproduces_runner(tmp_path):
    recipe = _recipe(
        "g",
        RESNET,
        RESNET_SPEC,
        [{"pass": "bf16", "gates": LOW}, {"pass": "cuda_graphs", "gates": LOW}],
        "cuda:0",
    )
    _check_script_matches_runner(recipe, tmp_path)


def test_script_times_each_step_against_the_original_in_alternating_rounds(tmp_path):
    """The script prints and records each step's speedup with its interval, computed like the
    studio's (median of per-round ratios, bootstrap interval), from plain code in the script."""
    import ast
    import json

    import numpy as np

    from accel.timing import ratio_interval

    recipe = _recipe("resnet", RESNET, RESNET_SPEC, [{"pass": "fold_batchnorm"}])
    recipe["benchmark"] = {"warmup": 1, "iters": 4, "rounds": 4, "min_time_s": 0}
    text = recipe_to_script(recipe)
    assert "accel" not in text.replace("Accel Studio", "")
    assert "ROUNDS, MIN_TIME_S = 4, 0.0" in text  # recipe values as literals
    script = tmp_path / "recipe.py"
    script.write_text(text)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads((out / "results.json").read_text())
    assert 0 < row["speedup_low"] <= row["speedup"] <= row["speedup_high"]
    # both p50s come from the rounds of the speedup: their ratio lies inside its interval
    ratio = row["p50_ref_ms"] / row["p50_step_ms"]
    assert row["speedup_low"] <= ratio <= row["speedup_high"]
    line = next(ln for ln in proc.stdout.splitlines() if "fold_batchnorm" in ln)
    assert f"{row['speedup']:.2f}x [{row['speedup_low']:.2f}-{row['speedup_high']:.2f}]" in line
    assert_table_agrees(line, 1)
    assert "original" in proc.stdout and "1.00x" in proc.stdout
    # The script's interval is the studio's on the same rounds.
    fn = next(
        n
        for n in ast.parse(text).body
        if isinstance(n, ast.FunctionDef) and n.name == "ratio_interval"
    )
    env = {"np": np, "SEED": 0}
    exec(compile(ast.Module([fn], []), "script", "exec"), env)
    ref, cand = [10.0, 12.0, 30.0, 11.0, 10.5], [5.0, 6.5, 14.0, 5.0, 5.5]
    want = ratio_interval(ref, cand, seed=0)
    assert env["ratio_interval"](ref, cand, seed=0) == pytest.approx(
        (want.value, want.low, want.high)
    )


def test_script_batches_tiny_models_by_the_studios_own_rule():
    """The exported script embeds accel.timing.batching's rule (its source, its constants),
    so a sub-millisecond model is timed in the same batches in the script and the studio."""
    import ast
    import inspect

    from accel.timing import batching

    text = recipe_to_script(_recipe("mlp", MLP, MLP_SPEC, [{"pass": "fold_batchnorm"}]))
    assert inspect.getsource(batching.calls_per_sample).strip() in text
    consts = (
        f"TINY_CALL_S, TARGET_SAMPLE_S = {batching.TINY_CALL_S!r}, {batching.TARGET_SAMPLE_S!r}"
    )
    assert consts in text
    fn = next(
        n
        for n in ast.parse(text).body
        if isinstance(n, ast.FunctionDef) and n.name == "calls_per_sample"
    )
    env = {"math": math, "TINY_CALL_S": batching.TINY_CALL_S}
    env.update(TARGET_SAMPLE_S=batching.TARGET_SAMPLE_S, MAX_BATCH=batching.MAX_BATCH)
    exec(compile(ast.Module([fn], []), "script", "exec"), env)
    for call_s in (2e-6, 1e-4, 4e-4, 9.99e-4, 1e-3, 0.02):
        assert env["calls_per_sample"](call_s) == batching.calls_per_sample(call_s)
    assert batching.calls_per_sample(4e-4) > 1  # sub-millisecond: batched
