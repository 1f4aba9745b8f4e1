"""Graphs from torch models: torch.export on every zoo model, FX and module-hook fallbacks."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from accel.graph import Graph, graph_from_model
from accel.models import load_model
from accel.runtimes.torch.graph import graph_from_torch

ZOO = ["zoo:mlp", "zoo:resnet", "zoo:transformer", "zoo:lstm"]


@pytest.fixture(scope="module")
def zoo_graphs():
    out = {}
    for src in ZOO:
        m = load_model(src)
        out[src] = (m, graph_from_model(m))
    return out


@pytest.mark.parametrize("src", ZOO)
def test_zoo_model_exports_with_module_paths_params_and_shapes(zoo_graphs, src):
    model, g = zoo_graphs[src]
    assert g.source == "torch.export" and g.fallback_reason is None
    names = dict(model.module.named_modules())
    ops = [n for n in g.nodes if n.op not in ("input", "output")]
    assert ops
    # Every op belongs to a real module; every leaf module with parameters owns a node.
    assert all(n.module_path in names for n in ops)
    leaves_with_params = {
        p
        for p, m in names.items()
        if p and not list(m.children()) and any(True for _ in m.parameters())
    }
    assert leaves_with_params <= {n.module_path for n in ops}
    # Parameters: every parameter counted once, on the op that uses it.
    assert g.num_params == sum(p.numel() for p in model.module.parameters())
    # Shapes: input and output shapes known; output matches a real forward.
    inputs = model.example_inputs()
    out = model.forward(inputs)
    out_node = g.node(g.outputs[0])
    assert out_node.input_shapes[0] == list(out.shape)
    assert [g.node(i).name for i in g.inputs] == list(inputs)
    # Edges connect existing nodes, forward in execution order (a DAG).
    index = {n.id: i for i, n in enumerate(g.nodes)}
    assert all(index[e.src] < index[e.dst] for e in g.edges)
    # Groups: every group path is a module, with its class name.
    for gid, grp in g.groups.items():
        assert gid in names
        assert grp.type == type(names[gid]).__name__


def test_graph_round_trips_through_json(zoo_graphs):
    _, g = zoo_graphs["zoo:resnet"]
    g2 = Graph.from_dict(json.loads(json.dumps(g.to_dict())))
    assert g2.to_dict() == g.to_dict()


def test_resnet_structure(zoo_graphs):
    _, g = zoo_graphs["zoo:resnet"]
    conv = g.nodes_for_module("layer1.0.conv1")
    assert [n.op for n in conv] == ["conv2d"]
    assert conv[0].num_params == 32 * 32 * 9
    assert conv[0].output_shapes == [[1, 32, 64, 64]]
    assert conv[0].output_dtypes == ["float32"]
    assert g.groups[""].children == ["stem", "layer1", "layer2", "layer3", "pool", "fc"]
    # The residual add of a block lives in the block, fed by two edges.
    add = [n for n in g.nodes_of_group("layer1.0", recursive=False) if n.op.startswith("add")]
    assert len(add) == 1
    assert len([e for e in g.edges if e.dst == add[0].id]) == 2
    top = g.collapsed()
    assert [n.id for n in top.nodes if n.op == "group"] == [
        "group:stem",
        "group:layer1",
        "group:layer2",
        "group:layer3",
        "group:pool",
        "group:fc",
    ]


def test_lstm_multi_output_is_folded(zoo_graphs):
    _, g = zoo_graphs["zoo:lstm"]
    lstm = [n for n in g.nodes if n.op == "lstm"]
    assert len(lstm) == 1 and lstm[0].module_path == "lstm"
    assert len(lstm[0].outputs) >= 1 and "getitem" not in {n.op for n in g.nodes}


class DataDependent(nn.Module):
    """Python control flow on tensor values: torch.export and FX cannot trace it."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.c = nn.Linear(4, 2)

    def forward(self, x):
        y = self.a(x)
        if y.sum() > 0:
            y = self.b(y)
        else:
            y = self.b(-y)
        return self.c(torch.relu(y))


def test_untraceable_model_falls_back_to_module_graph_with_reason():
    m = DataDependent().eval()
    x = torch.ones(1, 4)
    g = graph_from_torch(m, {"x": x})
    assert g.source == "modules"
    assert g.fallback_reason and g.fallback_reason.startswith("export failed")
    assert any(n.startswith("fx failed") for n in g.notes)
    assert [n.id for n in g.nodes if n.op not in ("input", "output")] == ["a", "b", "c"]
    assert g.num_params == sum(p.numel() for p in m.parameters())
    edges = {(e.src, e.dst) for e in g.edges}
    assert ("input:x", "a") in edges and ("b", "c") in edges and ("c", "output:output") in edges
    assert g.node("c").output_shapes == [[1, 2]]


def test_fx_method_gives_module_calls():
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    g = graph_from_torch(m, (torch.ones(3, 4),), method="fx")
    assert g.source == "fx"
    ops = [(n.op, n.module_path) for n in g.nodes if n.op not in ("input", "output")]
    assert ops == [("Linear", "0"), ("ReLU", "1"), ("Linear", "2")]
    assert g.nodes_for_module("2")[0].output_shapes == [[3, 2]]
    assert g.num_params == 4 * 8 + 8 + 8 * 2 + 2


def test_shared_module_called_twice_gets_two_nodes_one_param_count():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(self.lin(x))

    m = Twice().eval()
    for method in ("export", "modules"):
        g = graph_from_torch(m, {"x": torch.ones(1, 4)}, method=method)
        lin = g.nodes_for_module("lin")
        assert len(lin) == 2, method
        assert g.num_params == 20, method


def test_bad_method_and_missing_inputs():
    with pytest.raises(ValueError, match="unknown method"):
        graph_from_torch(nn.Linear(2, 2), (torch.ones(1, 2),), method="magic")
    with pytest.raises(ValueError, match="sample inputs"):
        graph_from_torch(nn.Linear(2, 2))


def test_loaded_exported_program_keeps_module_paths_and_types(tmp_path):
    m = load_model("zoo:mlp")
    inputs = m.example_inputs()
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(m.module, tuple(inputs.values())), str(path))
    g = graph_from_model(load_model(str(path)))
    assert g.source == "torch.export"
    assert {n.module_path for n in g.nodes if n.op == "linear"} == {"fc1", "fc2", "fc3"}
    assert g.groups["fc1"].type == "Linear"
    assert g.groups[""].type == "MLP"
    assert g.num_params == sum(p.numel() for p in m.module.parameters())
