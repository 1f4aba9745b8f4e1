"""Small zoo models and an ONNX export helper shared by the quantization and pruning tests.

Uses torch.onnx.export(dynamo=False) directly so these tests do not depend on the
export_onnx pass.
"""

from __future__ import annotations

from pathlib import Path

import torch

# Small variants of the zoo models (fast on 2 CPU cores) with matching input specs.
SMALL = {
    "mlp": ("zoo:mlp(in_features=64, hidden=128)", "x:float32[batch,64]; batch=1..8:4"),
    "resnet": (
        "zoo:resnet(widths=(16, 32, 64), blocks=1)",
        "x:float32[batch,3,32,32]; batch=1..8:2",
    ),
    "transformer": (
        "zoo:transformer(vocab_size=1000, hidden=64, num_layers=2, num_heads=4, ffn=128, max_positions=64)",
        "input_ids:int64[batch,seq]{0..1000}; batch=1..8:2; seq=1..64:16",
    ),
    "lstm": (
        "zoo:lstm(vocab_size=500, embed=32, hidden=64)",
        "tokens:int64[batch,seq]{0..500}; batch=1..8:2; seq=1..64:16",
    ),
}


def export_module(module: torch.nn.Module, inputs: dict[str, torch.Tensor], path: Path) -> Path:
    """Export with dynamic symbolic dims (batch, and seq for token inputs)."""
    dynamic = {}
    for name, x in inputs.items():
        dynamic[name] = {0: "batch"} if x.is_floating_point() else {0: "batch", 1: "seq"}
    torch.onnx.export(
        module.eval(),
        tuple(inputs.values()),
        str(path),
        input_names=list(inputs),
        output_names=["logits"],
        dynamic_axes=dynamic,
        opset_version=17,
        dynamo=False,
    )
    return path


def export_small(name: str, folder: Path) -> tuple[str, str]:
    """ONNX file of a small zoo model: (path, input spec)."""
    from accel.models import load_model

    source, spec = SMALL[name]
    model = load_model(source, spec)
    path = export_module(model.module, model.example_inputs(), Path(folder) / f"{name}.onnx")
    return str(path), spec


def recipe(source: str, spec: str, steps: list[dict], **extra) -> dict:
    """A recipe dict with quick benchmark settings."""
    return {
        "name": "test",
        "model": {"source": source, "input_spec": spec},
        "steps": steps,
        "benchmark": {"warmup": 1, "iters": 3},
        **extra,
    }


def run_script(recipe_dict: dict, folder: Path, edit=None) -> Path:
    """Export the recipe as a script (``edit``: a function of its text, for a test that swaps
    in a failing library call), run it in a subprocess, return its --out folder."""
    import subprocess
    import sys

    from accel.codegen import recipe_to_script

    script = Path(folder) / "script.py"
    text = recipe_to_script(recipe_dict)
    script.write_text(edit(text) if edit else text)
    out = Path(folder) / "script_out"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out
