"""The tensorrt pass: refused with the reason where it cannot run; on a GPU with the
[tensorrt] extra, ONNX models through ORT's TensorRT provider and torch models through
torch-tensorrt, checked against the original."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from accel.models.runtime import get_runtime
from accel.runner import run_recipe

BENCH = {"warmup": 0, "iters": 2}
RESNET = "zoo:resnet(widths=(8, 16, 32), blocks=1)"
HAS_TRT = importlib.util.find_spec("tensorrt") is not None
needs_trt = pytest.mark.skipif(not HAS_TRT, reason="needs the [tensorrt] extra (tensorrt)")


@pytest.mark.skipif(torch.cuda.is_available() and HAS_TRT, reason="TensorRT can run here")
def test_tensorrt_step_fails_with_the_reason_on_this_machine(tmp_path):
    recipe = {
        "name": "trt",
        "model": {"source": RESNET},
        "benchmark": BENCH,
        "steps": [{"pass": "export_onnx"}, {"pass": "tensorrt"}],
    }
    res = run_recipe(recipe, out_dir=tmp_path)
    assert res.status == "failed"
    assert "tensorrt" in res.error and ("not installed" in res.error or "CUDA" in res.error)
    if not HAS_TRT:  # refused before any work: no step ran, not even the export
        assert "step 2 (tensorrt): tensorrt needs" in res.error  # CUDA or the library
        assert res.steps == [] and res.baseline == {}
    # nothing of the step looks like a TensorRT artifact
    assert not list(tmp_path.rglob("trt_cache/*"))


def test_the_handler_says_why_it_is_unavailable():
    reason = get_runtime("tensorrt").unavailable_reason("cpu")
    assert reason is not None  # never on a CPU device
    assert "tensorrt" in reason or "GPU" in reason


@pytest.mark.gpu
@needs_trt
@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_onnx_through_the_tensorrt_provider(tmp_path, precision):
    recipe = {
        "name": "trt",
        "model": {"source": RESNET},
        "device": "cuda:0",
        "benchmark": BENCH,
        "gates": {"rtol": 1.0, "atol": 1.0, "min_cosine": 0.99},
        "steps": [
            {"pass": "export_onnx", "params": {"exporter": "torchscript"}},
            {"pass": "tensorrt", "params": {"precision": precision}},
        ],
    }
    res = run_recipe(recipe, out_dir=tmp_path)
    assert res.status == "succeeded", res.error
    step = res.steps[1]
    assert step.details["providers_active"][0] == "TensorrtExecutionProvider"
    assert step.metrics["engine_build_s"] > 0
    assert any(a["kind"] == "tensorrt_cache" for a in step.artifacts)
    assert min(o["cosine"] for o in step.parity["outputs"]) > 0.99


@pytest.mark.gpu
@pytest.mark.skipif(
    importlib.util.find_spec("torch_tensorrt") is None, reason="needs torch-tensorrt"
)
def test_torch_through_torch_tensorrt(tmp_path):
    recipe = {
        "name": "trt-torch",
        "model": {"source": RESNET},
        "device": "cuda:0",
        "benchmark": BENCH,
        "gates": {"rtol": 1.0, "atol": 1.0, "min_cosine": 0.99},
        "steps": [{"pass": "tensorrt", "params": {"precision": "fp16"}}],
    }
    res = run_recipe(recipe, out_dir=tmp_path)
    assert res.status == "succeeded", res.error
    assert min(o["cosine"] for o in res.steps[0].parity["outputs"]) > 0.99
