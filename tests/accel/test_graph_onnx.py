"""Graphs from ONNX files: module paths from node names, inferred shapes, initializer sizes."""

from __future__ import annotations

import onnx
import pytest
import torch

from accel.graph import graph_from_model
from accel.graph.model import scope_to_module_path
from accel.models import load_model
from accel.runtimes.onnxruntime.graph import graph_from_onnx, module_path_of

ZOO = ["zoo:mlp", "zoo:resnet", "zoo:transformer", "zoo:lstm"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each zoo model and its TorchScript-exporter ONNX file."""
    folder = tmp_path_factory.mktemp("onnx")
    out = {}
    for src in ZOO:
        m = load_model(src)
        inputs = m.example_inputs()
        path = folder / f"{src.split(':')[1]}.onnx"
        torch.onnx.export(
            m.module, tuple(inputs.values()), str(path), input_names=list(inputs), dynamo=False
        )
        out[src] = (m, path)
    return out


@pytest.mark.parametrize("src", ZOO)
def test_zoo_onnx_graph_maps_to_module_paths(exported, src):
    model, path = exported[src]
    g = graph_from_onnx(path)
    assert g.source == "onnx" and g.name == path.stem
    modules = dict(model.module.named_modules())
    ops = [n for n in g.nodes if n.op not in ("input", "output")]
    assert ops
    # Node-name namespaces map onto real module paths (root ops have "").
    assert all(n.module_path in modules for n in ops), [
        n.module_path for n in ops if n.module_path not in modules
    ]
    # Every leaf module with weights shows up (BatchNorm may be folded into its conv).
    weighted = {
        p
        for p, m in modules.items()
        if p
        and not list(m.children())
        and any(True for _ in m.parameters())
        and not isinstance(m, torch.nn.BatchNorm2d)
    }
    assert weighted <= {n.module_path for n in ops}
    # Parameter count: the initializers, each once.
    proto = onnx.load(str(path))
    total = sum(
        int(torch.tensor(list(t.dims)).prod()) if t.dims else 1 for t in proto.graph.initializer
    )
    used = {t for n in proto.graph.node for t in n.input}
    total_used = sum(
        int(torch.tensor(list(t.dims)).prod()) if t.dims else 1
        for t in proto.graph.initializer
        if t.name in used
    )
    assert g.num_params == total_used <= total
    # Shapes from shape inference: the output shape equals the real output's.
    out = model.forward(model.example_inputs())
    assert g.node(g.outputs[0]).input_shapes[0] == list(out.shape)
    index = {n.id: i for i, n in enumerate(g.nodes)}
    assert all(index[e.src] < index[e.dst] for e in g.edges)
    assert set(g.groups) >= {n.module_path for n in ops}


def test_resnet_onnx_conv_node(exported):
    _, path = exported["zoo:resnet"]
    g = graph_from_onnx(path)
    conv = [n for n in g.nodes_for_module("layer2.0.downsample") if n.op == "Conv"]
    assert len(conv) == 1
    # 1x1 conv 32 -> 64 with the folded BatchNorm's bias.
    assert conv[0].num_params == 32 * 64 + 64
    assert conv[0].output_shapes == [[1, 64, 32, 32]]
    assert conv[0].output_dtypes == ["float32"]
    assert conv[0].attributes["strides"] == [2, 2]
    assert "Constant" not in {n.op for n in g.nodes}


def test_onnx_loaded_model_and_dynamo_names(exported, tmp_path):
    model, _ = exported["zoo:mlp"]
    path = tmp_path / "mlp_dynamo.onnx"
    inputs = model.example_inputs()
    torch.onnx.export(model.module, tuple(inputs.values()), str(path), dynamo=True)
    loaded = load_model(str(path))
    g = graph_from_model(loaded)
    assert g.source == "onnx"
    paths = {n.module_path for n in g.nodes if n.op not in ("input", "output")}
    assert {"fc1", "fc2", "fc3"} <= paths
    assert g.num_params == sum(p.numel() for p in model.module.parameters())


def test_scope_joining():
    assert scope_to_module_path(["layer1", "layer1.0", "conv1"]) == "layer1.0.conv1"
    assert scope_to_module_path(["layer2", "layer2.0", "downsample", "downsample.0"]) == (
        "layer2.0.downsample.0"
    )
    assert scope_to_module_path(["", "layer2", "layer2.0", "layer2.0.downsample"]) == (
        "layer2.0.downsample"
    )
    assert scope_to_module_path(["model", "layers.0", "attn"]) == "model.layers.0.attn"
    node = onnx.helper.make_node("Relu", ["a"], ["b"], name="/enc/enc.1/act/Relu")
    assert module_path_of(node) == "enc.1.act"
    assert module_path_of(onnx.helper.make_node("Relu", ["a"], ["b"], name="Relu_3")) == ""


def test_hand_made_onnx_with_shared_initializer_and_unknown_shapes(tmp_path):
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.0] * 16)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="/blk/lin/MatMul"),
        helper.make_node("MatMul", ["h", "w"], ["y"], name="/blk/lin2/MatMul"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    path = tmp_path / "h.onnx"
    onnx.save(helper.make_model(graph), str(path))
    g = graph_from_onnx(path)
    assert g.num_params == 16  # shared weight counted once
    assert g.node("/blk/lin/MatMul").output_shapes == [["n", 4]]
    assert list(g.groups) == ["", "blk", "blk.lin", "blk.lin2"]
    assert [(e.src, e.dst) for e in g.edges] == [
        ("input:x", "/blk/lin/MatMul"),
        ("/blk/lin/MatMul", "/blk/lin2/MatMul"),
        ("/blk/lin2/MatMul", "output:y"),
    ]


def test_corrupt_onnx_file_gives_a_clear_error(tmp_path):
    from accel.errors import ModelLoadError

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage-not-a-model" * 10)
    with pytest.raises(ModelLoadError, match="not a readable ONNX model"):
        graph_from_onnx(bad)
