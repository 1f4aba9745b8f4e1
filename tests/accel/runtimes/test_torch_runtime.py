"""The torch runtime on the zoo models: load, forward, stats, graph, profile, taps."""

from __future__ import annotations

import pytest
import torch
from runtime_models import SOURCES

from accel.models.runtime import ProfileRequest, runtime_of


def _first(out):
    return out[0] if isinstance(out, tuple | list) else out


@pytest.mark.parametrize("name", list(SOURCES))
def test_torch_runtime(torch_models, name):
    m = torch_models[name]
    b = runtime_of(m)
    assert b.kind == "torch" and m.num_params > 0 and len(m.content_hash) == 64
    inputs = m.example_inputs()
    out = _first(m.forward(inputs))
    assert torch.isfinite(out).all()
    g = b.graph(m, inputs)
    assert len(g.nodes) > 3 and g.inputs and g.outputs
    prof = b.profile(m, inputs, ProfileRequest(iters=2, warmup=1, ops=False, threads=1))
    assert prof.kind == "torch" and prof.rows and prof.total_ms > 0
    taps, _ = b.layer_outputs(m, inputs)
    assert taps and all(isinstance(k, str) for k in taps)
