"""Profile rows and per-layer parity painted on graphs of the same model."""

from __future__ import annotations

import copy

import pytest
import torch

from accel.graph import aggregate_by_module, graph_from_model, paint
from accel.graph.layer_parity import compare_layers
from accel.models import load_model
from accel.runtimes.onnxruntime.graph import graph_from_onnx


@pytest.fixture(scope="module")
def mlp():
    return load_model("zoo:mlp")


def test_profile_rows_paint_onto_torch_graph(mlp):
    from accel.profile import profile_model

    prof = profile_model(mlp, iters=3, warmup=1, ops=False)
    g = graph_from_model(mlp)
    values = {r.name: r.inclusive_ms for r in prof.rows}
    per_node, per_group = aggregate_by_module(g, values)
    # Every op node gets a time; group totals equal the profile's inclusive times.
    ops = [n.id for n in g.nodes if n.op not in ("input", "output")]
    assert set(per_node) == set(ops)
    for path in ("fc1", "fc2", "fc3"):
        assert per_group[path] == pytest.approx(values[path])
    # The MLP's root has no ops of its own: its total is its children's (medians need not
    # add up exactly to the root's own inclusive time).
    children = sum(values[p] for p in ("fc1", "act1", "fc2", "act2", "fc3"))
    assert per_group[""] == pytest.approx(children)
    top = paint(g.collapsed(), g, values)
    assert top["group:fc1"] == pytest.approx(values["fc1"])


def test_onnx_profile_rows_paint_by_node_name(mlp, tmp_path):
    from accel.profile import profile_model

    inputs = mlp.example_inputs()
    path = tmp_path / "mlp.onnx"
    torch.onnx.export(
        mlp.module, tuple(inputs.values()), str(path), input_names=list(inputs), dynamo=False
    )
    onnx_model = load_model(str(path))
    prof = profile_model(onnx_model, iters=3, warmup=1, ops=False)
    g = graph_from_onnx(onnx_model)
    from accel.profile.results import UNATTRIBUTED

    # the (unattributed) row is the plain run's rest, not a node of the graph
    values = {r.name: r.self_ms for r in prof.rows if r.name and r.name != UNATTRIBUTED}
    per_node, per_group = aggregate_by_module(g, values)
    # ONNX Runtime fuses Gemm+Relu ("fused /fc1/Gemm"): every row still lands on a node.
    gemms = [n.id for n in g.nodes if n.op == "Gemm"]
    assert len(gemms) == 3 and set(per_node) == set(gemms)
    assert sum(per_node.values()) == pytest.approx(sum(values.values()))
    assert per_group["fc1"] == pytest.approx(per_node["/fc1/Gemm"])


def test_resolve_runtime_node_names(tmp_path):
    m = load_model("zoo:resnet")
    inputs = m.example_inputs()
    path = tmp_path / "r.onnx"
    torch.onnx.export(m.module, tuple(inputs.values()), str(path), dynamo=False)
    g = graph_from_onnx(path)
    assert g.resolve_node("/stem/stem.2/Relu_output_0_nchwc") == "/stem/stem.2/Relu"
    assert g.resolve_node("fused /fc/Gemm") == "/fc/Gemm"
    assert g.resolve_node("ReorderOutput") is None


def test_layer_parity_errors_paint_on_the_graph(mlp):
    bad = copy.deepcopy(mlp.module)
    with torch.no_grad():
        bad.fc2.weight.mul_(1.1)
    rep = compare_layers(mlp, bad)
    g = graph_from_model(mlp)
    errs = paint(g.collapsed(), g, rep.module_errors(), how="max")
    assert errs["group:fc1"] == 0.0
    assert errs["group:fc2"] > 0 and errs["group:fc3"] > 0
