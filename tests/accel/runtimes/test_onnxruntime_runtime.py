"""The ONNX Runtime runtime: forward parity with torch, graph, profile, taps, save/load."""

from __future__ import annotations

import pytest
import torch

from accel.models import load_model
from accel.models.runtime import ProfileRequest, runtime_of
from accel.parity import Tolerances, compare


def _first(out):
    return out[0] if isinstance(out, tuple | list) else out


@pytest.mark.parametrize("name", ["mlp", "resnet"])
def test_onnx_runtime(torch_models, onnx_models, name, tmp_path):
    m, ref = onnx_models[name], torch_models[name]
    b = runtime_of(m)
    assert b.kind == "onnx" and b.model_file(m) == m.onnx_path
    inputs = ref.example_inputs()
    rep = compare(ref.forward(inputs), m.forward(inputs), Tolerances(rtol=1e-3, atol=1e-4))
    assert rep.passed, rep.first_failure
    g = b.graph(m, None)
    assert any(n.module_path for n in g.nodes)
    prof = b.profile(m, inputs, ProfileRequest(iters=2, warmup=1, ops=True, threads=1))
    assert prof.kind == "onnx" and len(prof.rows) > 1
    taps, _ = b.layer_outputs(m, inputs)
    assert taps
    saved = b.save(m, tmp_path / "copy")
    again = load_model(str(saved))
    assert again.kind == "onnx" and again.content_hash == m.content_hash
    assert torch.equal(_first(again.forward(inputs)), _first(m.forward(inputs)))
