"""The one layer-pattern language (accel.layer_patterns): the table of what a pattern
selects, the torchao-style filter_fn, the unmatched-pattern error, and the same pattern
list selecting the same layers in passes of different kinds."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from accel.errors import PassError
from accel.layer_patterns import filter_fn, layer_matches, match, unmatched_message
from accel.models import load_model
from accel.passes import PassContext, get_pass

TRANSFORMER = "zoo:transformer(vocab_size=200, hidden=64, num_layers=2, num_heads=4, ffn=128, max_positions=64)"
TRANSFORMER_SPEC = "input_ids:int64[batch,seq]{0..200}; batch=1..32:2; seq=1..64:16"


@pytest.mark.parametrize(
    ("pattern", "name", "type_name", "expected"),
    [
        ("Linear", "fc1", "Linear", True),  # type name
        ("Linear", "fc1", "Conv2d", False),
        ("fc1", "fc1", "Linear", True),  # exact name
        ("fc1", "fc10", "Linear", False),  # a name is not a string prefix
        ("layers.0", "layers.0.ffn", "Linear", True),  # prefix at a dot boundary
        ("layers.0", "layers.01.ffn", "Linear", False),
        ("layers.0", "xlayers.0.ffn", "Linear", False),
        ("layers.*.attn.*", "layers.3.attn.q", "Linear", True),  # glob
        ("layers.*.attn.*", "layers.3.mlp.q", "Linear", False),
        ("layers.[01].ffn", "layers.1.ffn", "Linear", True),
        ("*", "", "Model", False),  # the root module is never a layer
        ("linear", "fc1", "Linear", False),  # case-sensitive
    ],
)
def test_layer_matches_table(pattern, name, type_name, expected):
    assert layer_matches(pattern, name, type_name) is expected


def test_match_keeps_layer_order_and_lists_unused_patterns():
    layers = [("a.fc", "Linear"), ("a.conv", "Conv2d"), ("b.fc", "Linear"), ("head", "Linear")]
    assert match(layers, ["head", "Conv2d", "a.*", "nope"]) == (
        ["a.fc", "a.conv", "head"],
        ["nope"],
    )
    assert match(layers, []) == ([], [])


def test_filter_fn_is_torchao_style():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 4)))
    fn = filter_fn(["ReLU", "2"])
    picked = [fqn for fqn, m in model.named_modules() if fqn and fn(m, fqn)]
    assert picked == ["1", "2", "2.0"]


def test_unmatched_message_names_close_layers():
    names = ["layers.0.attention", "layers.1.attention", "classifier"]
    msg = unmatched_message(["clasifier"], names, "exclude pattern(s)")
    assert "exclude pattern(s) ['clasifier'] match no layer" in msg
    assert "Close names: classifier." in msg and "globs" in msg


@pytest.fixture(scope="module")
def transformer():
    return load_model(TRANSFORMER, TRANSFORMER_SPEC)


def _apply(pass_name, model, params):
    cls = get_pass(pass_name)
    ctx = PassContext(inputs=model.example_inputs(), original=model)
    torch.manual_seed(0)
    module = copy.deepcopy(model.module)
    out = cls().apply(model.replace(module=module), cls.parse_config(params), ctx)
    return out, ctx


def test_same_patterns_select_the_same_layers_in_every_pass(transformer):
    patterns = ["classifier", "layers.1", "layers.*.attention.query"]
    linears = [n for n, m in transformer.module.named_modules() if type(m) is nn.Linear]
    want = {
        "classifier",
        "layers.0.attention.query",
        *(n for n in linears if n.startswith("layers.1.")),
    }

    _, ctx = _apply("quantize_dynamic_int8", transformer, {"exclude": patterns})
    assert set(ctx.details["excluded_layers"]) == want

    pruned, _ = _apply(
        "prune_unstructured", transformer, {"ignore": patterns, "ignore_head": False, "amount": 0.5}
    )
    dense = {
        n for n, m in pruned.module.named_modules() if type(m) is nn.Linear and bool(m.weight.all())
    }
    assert dense == want

    low, ctx = _apply("bf16", transformer, {"keep": patterns, "keep_norm_fp32": False})
    float32 = {
        n.replace(".module", "")
        for n, m in low.module.named_modules()
        if type(m) is nn.Linear and m.weight.dtype == torch.float32
    }
    assert float32 == want
    assert ctx.details["kept_fp32"] == ["layers.0.attention.query", "layers.1", "classifier"]
    x = transformer.example_inputs(seed=1)
    assert low.forward(x).dtype == torch.bfloat16  # a kept block casts its outputs back


def test_onnx_exclude_selects_the_same_torch_layers(transformer, tmp_path):
    import onnx
    from onnx_export_helpers import export_module

    from accel.passes._onnx_quant_helpers import onnx_module_paths

    path = export_module(transformer.module, transformer.example_inputs(), tmp_path / "m.onnx")
    model = load_model(str(path), str(transformer.input_spec))
    cls = get_pass("quantize_onnx_dynamic")
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path, original=model)
    patterns = ["classifier", "layers.1", "layers.*.attention.query"]
    cls().apply(model, cls.parse_config({"exclude": patterns}), ctx)
    graph = onnx.load(str(path)).graph
    paths, ops = onnx_module_paths(graph), {n.name: n.op_type for n in graph.node}
    excluded = {paths[n] for n in ctx.details["excluded_nodes"] if n in ops}
    linears = [n for n, m in transformer.module.named_modules() if type(m) is nn.Linear]
    want = {"classifier", "layers.0.attention.query"} | {
        n for n in linears if n.startswith("layers.1.")
    }
    assert excluded & set(linears) == want
    # the rest are the non-Linear nodes inside layers.1 (attention scores, norms)
    assert all(p.startswith("layers.1") for p in excluded - want)


def test_onnx_type_patterns_use_the_recorded_torch_class(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from accel.passes._onnx_quant_helpers import onnx_nodes_matching

    def node(name, op, scope, cls):
        n = helper.make_node(op, ["x"] if op == "Relu" else ["h"], [name + "_out"], name=name)
        for key, value in [
            ("pkg.torch.onnx.name_scopes", repr(["", scope, name])),
            ("pkg.torch.onnx.class_hierarchy", repr(["M", cls, "aten.op"])),
        ]:
            n.metadata_props.add(key=key, value=value)
        return n

    relu = node("relu_1", "Relu", "block.act", "torch.nn.modules.activation.ReLU")
    neg = node("neg_1", "Neg", "block.fc", "torch.nn.modules.linear.Linear")
    neg.input[0] = "relu_1_out"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("neg_1_out", TensorProto.FLOAT, [1])
    graph = helper.make_graph([relu, neg], "g", [x], [y])
    path = tmp_path / "typed.onnx"
    onnx.save(helper.make_model(graph), str(path))
    assert onnx_nodes_matching(path, ["Linear", "Conv2d"]) == (["neg_1"], ["Conv2d"])
    assert onnx_nodes_matching(path, ["block"]) == (["relu_1", "neg_1"], [])


@pytest.mark.parametrize(
    ("pass_name", "field"),  # quantize_onnx / quantize_openvino: their own tests
    [("quantize_dynamic_int8", "exclude"), ("prune_unstructured", "ignore"), ("fp16", "keep")],
)
def test_unmatched_pattern_says_the_close_name_in_every_pass(transformer, pass_name, field):
    with pytest.raises(PassError, match=r"\['layers\.0\.ffn_inn'\] match no .*Close names: "):
        _apply(pass_name, transformer, {field: ["layers.0.ffn_inn"]})
