"""What the Graph panel shows, decided without Qt: expansion, overlays, search, details,
and the "keep in float" recipe edit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from accel.graph import expansion, overlays
from accel.graph.details import details
from accel.graph.model import GROUP_PREFIX, Edge, Graph, Node
from accel.graph.search import find_nodes
from accel.recipe import Recipe
from accel.recipe_edits import keep_in_float


def small_graph() -> Graph:
    """x -> features.0.conv -> features.0.relu -> fc -> out (features wraps features.0)."""
    nodes = [
        Node("x", "input", "x", output_shapes=[(1, 3, 8, 8)], output_dtypes=["float32"]),
        Node(
            "conv", "conv2d", "conv", "features.0.conv", output_shapes=[(1, 4, 8, 8)],
            output_dtypes=["float32"], num_params=112,
        ),
        Node("relu", "relu", "relu", "features.0", output_dtypes=["float32"]),
        Node(
            "fc", "linear", "fc", "fc", input_shapes=[(1, 256)], input_dtypes=["float32"],
            output_shapes=[(1, 10)], output_dtypes=["bfloat16"], num_params=2570,
        ),
        Node("out", "output", "out"),
    ]  # fmt: skip
    edges = [Edge("x", "conv"), Edge("conv", "relu"), Edge("relu", "fc"), Edge("fc", "out")]
    g = Graph(nodes=nodes, edges=edges)
    g.build_groups({"features": "Sequential", "fc": "Linear"})
    return g


def test_wrapper_chain_and_default_view_open_wrappers_but_not_one_op_modules():
    g = small_graph()
    assert expansion.wrapper_chain(g, "features") == ["features", "features.0"]
    opened = expansion.default_expanded(g)
    assert {"features", "features.0"} <= opened
    assert "fc" not in opened  # one op: its box is the op
    assert expansion.default_expanded(g, budget=0) == set()


def test_expand_collapse_and_reveal():
    g = small_graph()
    opened = expansion.expand(g, set(), "features")
    assert opened == {"features", "features.0"}
    assert expansion.collapse(opened | {"fc"}, "features") == {"fc"}
    assert expansion.needed_to_reveal(g, "conv") == {"features", "features.0"}
    assert expansion.needed_to_reveal(g, "fc") == set()  # a one-op module needs no frame
    units = {"x", GROUP_PREFIX + "features", "fc", "out"}
    assert expansion.unit_for(g, "conv", units, set(), set()) == (GROUP_PREFIX + "features", None)
    assert expansion.unit_for(g, "features", set(), {"features"}, set()) == (None, "features")


def test_search_matches_name_op_and_module_case_insensitively():
    g = small_graph()
    assert find_nodes(g, "RELU") == ["relu"]
    assert find_nodes(g, "features.0") == ["conv", "relu"]
    assert find_nodes(g, "  ") == [] and find_nodes(None, "x") == []


def test_overlays_params_latency_dtype_and_diff():
    g = small_graph()
    view = g.view({"features"})
    params = overlays.overlay_values(g, view.nodes, "params")
    assert params[GROUP_PREFIX + "fc"] == 2570.0
    prof = SimpleNamespace(
        kind="torch",
        rows=[SimpleNamespace(name="features.0", inclusive_ms=2.0),
              SimpleNamespace(name="fc", inclusive_ms=0.5)],
    )  # fmt: skip
    lat = overlays.overlay_values(g, view.nodes, "latency", prof)
    assert lat[GROUP_PREFIX + "features.0"] == pytest.approx(2.0)
    assert overlays.overlay_values(g, view.nodes, "latency", None) == {}
    assert overlays.node_dtype(g, g.node("fc")) == "bfloat16"
    box = next(n for n in g.view(set()).nodes if n.id == GROUP_PREFIX + "features")
    assert overlays.node_dtype(g, box) == "float32"
    assert overlays.op_category(g.node("conv")) == "conv"
    diff = SimpleNamespace(
        dtype_changed=[SimpleNamespace(a="fc")], op_changed=[], fused=["relu"],
        removed=["conv"], added=[],
    )  # fmt: skip
    status = overlays.diff_status(diff)
    assert status == {"fc": "changed", "relu": "fused", "conv": "removed"}
    assert overlays.diff_of(g, box, status) == "removed"  # the worst member wins
    assert "1 removed, 1 fused, 1 changed" in overlays.diff_summary("bf16", diff)


def test_details_of_a_leaf_module_box_show_the_op_and_its_shapes():
    g = small_graph()
    box = Node(GROUP_PREFIX + "fc", "group", "fc", "fc", attributes={"type": "Linear"})
    info = details(g, box, "fc", set())
    rows = dict(info.rows)
    assert info.title == "linear"
    assert rows["Outputs"] == "bfloat16[1, 10]" and rows["Inputs"] == "float32[1, 256]"
    assert "Group" not in rows
    group = details(g, None, "features", {"features"})
    assert dict(group.rows)["Ops"] == "2" and "open" in dict(group.rows)["Group"]


def test_keep_in_float_edits_every_fitting_step_or_adds_one():
    steps = [{"pass": "bf16"}, {"pass": "quantize_dynamic_int8"}]
    r = Recipe.model_validate({"model": {"source": "zoo:mlp"}, "steps": steps})
    edit = keep_in_float(r, "torch", ["fc"])
    # The quantizer's exclude and bf16's keep: both declared keep-in-float lists.
    assert edit.indices == (0, 1) and edit.index == 0
    assert edit.recipe.steps[0].params["keep"] == ["fc"]
    assert edit.recipe.steps[1].params["exclude"] == ["fc"]
    assert "step 1: bf16" in edit.message and "step 2: quantize_dynamic_int8" in edit.message
    again = keep_in_float(edit.recipe, "torch", ["fc", "head"])
    assert again.recipe.steps[1].params["exclude"] == ["fc", "head"]
    assert again.recipe.steps[0].params["keep"] == ["fc", "head"]
    # An ONNX model: the torch steps do not take node names; a fitting step is added.
    onnx = keep_in_float(r, "onnx", ["/fc/Gemm"])
    assert onnx.index == 2 and onnx.indices == (2,)
    added = onnx.recipe.steps[2]
    assert added.params["exclude"] == ["/fc/Gemm"] and "onnx" in added.pass_name
    with pytest.raises(ValueError, match="pick a layer"):
        keep_in_float(r, "torch", [])


def test_keep_in_float_on_a_bf16_step_sets_its_keep_list():
    r = Recipe.model_validate({"model": {"source": "zoo:mlp"}, "steps": [{"pass": "bf16"}]})
    edit = keep_in_float(r, "torch", ["fc1"], where="fc1")
    assert len(edit.recipe.steps) == 1 and edit.recipe.steps[0].params["keep"] == ["fc1"]
    assert edit.message == "fc1 kept in float (step 1: bf16)"


def test_keep_in_float_leaves_steps_after_an_export_and_other_lists_alone():
    steps = [
        {"pass": "prune_unstructured", "params": {"ignore": ["fc2"]}},
        {"pass": "fp16"},
        {"pass": "export_onnx"},
        {"pass": "quantize_onnx_static"},
    ]
    r = Recipe.model_validate({"model": {"source": "zoo:mlp"}, "steps": steps})
    edit = keep_in_float(r, "torch", ["fc1"])
    assert edit.indices == (1,)
    assert edit.recipe.steps[0].params == {"ignore": ["fc2"]}  # prune's list is not float
    assert edit.recipe.steps[1].params["keep"] == ["fc1"]
    assert "exclude" not in edit.recipe.steps[3].params  # receives an ONNX model there
