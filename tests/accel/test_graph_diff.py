"""Structural diff: fused conv+bn, dtype changes, added/removed nodes, torch vs ONNX."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from accel.graph.diff import GraphDiff, diff_graphs, normalize_op
from accel.graph.model import parent_path
from accel.models import load_model
from accel.runtimes.onnxruntime.graph import graph_from_onnx
from accel.runtimes.torch.graph import graph_from_torch


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = self.drop(self.act(self.bn(self.conv(x))))
        return self.head(y.mean((2, 3)))


X = {"x": torch.randn(2, 3, 8, 8)}


def fused_copy(m: ConvBnRelu) -> nn.Module:
    f = copy.deepcopy(m)
    f.conv = fuse_conv_bn_eval(f.conv, f.bn)
    f.bn = nn.Identity()
    return f


def test_identical_graphs_have_no_changes():
    m = ConvBnRelu().eval()
    d = diff_graphs(graph_from_torch(m, X), graph_from_torch(m, X))
    assert d.unchanged and len(d.matched) == len(
        [n for n in graph_from_torch(m, X).nodes if n.op not in ("input", "output")]
    )


def test_conv_bn_fusion_is_reported_as_fused_into_the_conv():
    m = ConvBnRelu().eval()
    a, b = graph_from_torch(m, X), graph_from_torch(fused_copy(m), X)
    d = diff_graphs(a, b)
    bn = a.nodes_for_module("bn")[0].id
    conv_b = b.nodes_for_module("conv")[0].id
    assert d.fused == {bn: conv_b}
    assert d.removed == [] and d.added == []
    # conv gained a bias (8), bn lost weight+bias (16).
    assert d.params_after == d.params_before - 16 + 8
    assert "1 fused" in d.summary()


def test_dtype_change_and_removed_node():
    m = ConvBnRelu().eval()
    h = copy.deepcopy(m).half()
    d = diff_graphs(graph_from_torch(m, X), graph_from_torch(h, {"x": X["x"].half()}))
    changed = {c.after for c in d.dtype_changed}
    assert changed == {"float16"} and len(d.dtype_changed) >= 3
    # A graph without the head: its nodes are removed, not fused (linear is not fusible).
    a = graph_from_torch(m, X)
    b = graph_from_torch(m, X)
    head = b.nodes_for_module("head")[0]
    b.nodes.remove(head)
    b.edges = [e for e in b.edges if head.id not in (e.src, e.dst)]
    d2 = diff_graphs(a, b)
    assert d2.removed == [a.nodes_for_module("head")[0].id]
    assert d2.fused == {}


def test_added_nodes_and_json_round_trip():
    m = ConvBnRelu().eval()
    a = graph_from_torch(m, X)
    b = graph_from_torch(m, X)
    b.nodes.insert(2, b.nodes[1].__class__("q", "quantize_per_tensor", "q", "conv"))
    d = diff_graphs(a, b)
    assert d.added == ["q"]
    assert GraphDiff.from_dict(d.to_dict()) == d


def test_torch_vs_onnx_resnet_bn_folded(tmp_path):
    model = load_model("zoo:resnet")
    inputs = model.example_inputs()
    path = tmp_path / "r.onnx"
    torch.onnx.export(model.module, tuple(inputs.values()), str(path), dynamo=False)
    a, b = graph_from_torch(model), graph_from_onnx(path)
    d = diff_graphs(a, b)
    bns = [n.id for n in a.nodes if n.op == "batch_norm"]
    assert sorted(d.fused) == sorted(bns)
    # Each BatchNorm is fused into the conv of its own block (same parent module).
    for bn_id, into in d.fused.items():
        assert b.node(into).op == "Conv"
        assert parent_path(b.node(into).module_path) == parent_path(a.node(bn_id).module_path)
    assert d.removed == []


def test_normalize_op():
    assert normalize_op("aten.conv2d.default") == normalize_op("Conv") == "conv"
    assert normalize_op("batch_norm") == normalize_op("BatchNormalization")
    assert normalize_op("Gemm") == normalize_op("linear")
