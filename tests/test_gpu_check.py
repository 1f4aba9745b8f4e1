"""`make gpu-check` cannot rot: its dry run lists the gpu tests it would run and plans every
bench recipe (CI has no GPU, so this is what CI can check), and without a GPU the real run
says so in one line and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.py"


@pytest.mark.slow
def test_dry_run_lists_the_gpu_tests_and_plans_every_bench_recipe():
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "would run" in r.stdout and "gpu tests" in r.stdout
    assert "test_cuda_graphs_on_gpu" in r.stdout
    for variant in ("fp16", "torch.compile", "CUDA graphs", "ORT CUDA EP", "TensorRT fp16"):
        assert variant in r.stdout
    assert "report format ok" in r.stdout


def test_without_a_gpu_it_says_so_and_exits_0(monkeypatch, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_gpu_check", mod)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "nvidia_gpus", lambda: [])
    monkeypatch.setattr(sys, "argv", ["gpu_check.py"])
    assert mod.main() == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        "gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing to check"
    ]
