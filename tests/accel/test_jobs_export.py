"""The export_onnx job (Netron's export) goes through the export_onnx pass."""

from __future__ import annotations

import torch

from accel.jobs import JOBS
from accel.models import load_model

export_onnx_job = JOBS["export_onnx"]


def test_export_job_writes_a_checked_file_with_dynamic_batch(tmp_path):
    events = []
    out = tmp_path / "exports" / "zoo_mlp" / "model.onnx"
    res = export_onnx_job(
        {"model": "zoo:mlp", "out": str(out), "exporter": "torchscript"},
        events.append,
        lambda: False,
    )
    assert res["path"] == str(out) and out.is_file()
    assert any(e.get("event") == "progress" for e in events)
    onnx_model = load_model(str(out))
    assert onnx_model.input_spec.inputs[0].shape[0] == "batch"
    torch_model = load_model("zoo:mlp")
    x = torch_model.input_spec.sample(dims={"batch": 3})
    (y,) = onnx_model.forward(x)
    torch.testing.assert_close(y, torch_model.forward(x), rtol=1e-4, atol=1e-5)


def test_export_job_returns_an_onnx_model_itself(tmp_path):
    out = tmp_path / "a" / "model.onnx"
    export_onnx_job(
        {"model": "zoo:mlp", "out": str(out), "exporter": "torchscript"},
        lambda e: None,
        lambda: False,
    )
    res = export_onnx_job(
        {"model": str(out), "out": str(tmp_path / "b.onnx")}, lambda e: None, lambda: False
    )
    assert res["path"] == str(out)
