"""Per-layer mixed precision by measured cost: only layers with a high int8 error and a low
int8 speedup (both measured) stay in float, for the OpenVINO and ONNX Runtime quantizers."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from accel.models import load_model
from accel.search.layer_costs import (
    LayerCost,
    choose_float_layers,
    cost_exclude_set,
    layer_costs,
    measure_module_times,
    module_times,
    onnx_path_of,
)

MLP = ("zoo:mlp(in_features=64, hidden=128)", "x:float32[batch,64]; batch=1..8:4")


def test_only_high_error_and_low_speedup_layers_stay_in_float():
    costs = [
        LayerCost("sensitive_slow_gain", error=0.05, float_ms=1.0, int8_ms=0.95),
        LayerCost("sensitive_big_gain", error=0.04, float_ms=4.0, int8_ms=1.0),
        LayerCost("sensitive_unmeasured", error=0.03),
        LayerCost("tolerant_slow_gain", error=0.0001, float_ms=1.0, int8_ms=1.0),
        *[LayerCost(f"l{i}", error=0.00001, float_ms=1.0, int8_ms=0.5) for i in range(8)],
    ]
    assert choose_float_layers(costs, n_layers=40) == ["sensitive_slow_gain"]
    # int8 slower than float counts as a low speedup too
    slower = LayerCost("sensitive_slower", error=0.06, float_ms=1.0, int8_ms=2.0)
    assert choose_float_layers([*costs, slower], n_layers=40) == [
        "sensitive_slower",
        "sensitive_slow_gain",
    ]
    # never more than a tenth of the quantized layers (at least one)
    assert choose_float_layers([*costs, slower], n_layers=12) == ["sensitive_slower"]
    assert choose_float_layers(costs, n_layers=1) == []
    assert choose_float_layers([], n_layers=10) == []


def test_layer_times_are_summed_per_module_from_op_names():
    ov_rows = [
        ("__module.fc1/aten::linear/MatMul", 1.0),
        ("__module.fc1/aten::linear/Add", 0.5),
        ("__module.block.0.conv/aten::_convolution/Convolution", 2.0),
        ("Result_12", 0.1),
        ("__module.fc2/aten::linear/MatMul", float("nan")),
    ]
    times = module_times(ov_rows)
    assert times == {"fc1": 1.5, "block.0.conv": 2.0}
    costs = layer_costs(
        {"block": 0.1, "fc1": 0.2, "fc9": 0.3}, times, {"fc1": 0.5, "block.0.conv": 1.0}
    )
    assert [(c.name, c.speedup) for c in costs] == [("fc9", None), ("fc1", 3.0), ("block", 2.0)]


def test_onnx_runtime_rows_map_to_the_module_of_the_node_they_came_from():
    path_of = onnx_path_of({"node_linear": "fc1", "node_linear_1": "fc2", "x_QuantizeLinear": ""})
    assert path_of("fused node_linear") == "fc1"
    assert path_of("node_linear_1_MatMul_quant") == "fc2"  # the longest node name it extends
    assert path_of("node_linear_MatMul_quant") == "fc1"
    assert path_of("x_QuantizeLinear") == "" and path_of("Reorder_3") == ""


@pytest.mark.parametrize(
    "quantizer",
    [
        "quantize_onnx_static",
        pytest.param(
            "quantize_openvino",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("nncf") is None, reason="needs openvino and nncf"
            ),
        ),
    ],
)
def test_times_are_measured_in_the_quantizers_runtime(quantizer):
    model = load_model(*MLP)
    float_times, int8_times = measure_module_times(model, quantizer, iters=3)
    assert {"fc1", "fc2", "fc3"} <= set(float_times) and {"fc1", "fc2", "fc3"} <= set(int8_times)
    assert all(v > 0 for v in (*float_times.values(), *int8_times.values()))
    layers = [
        SimpleNamespace(name=n, cosine=c, error=None) for n, c in [("fc1", 0.9), ("fc2", 0.999)]
    ]
    chosen, costs = cost_exclude_set(model, quantizer, SimpleNamespace(layers=layers), n_layers=3)
    assert [c["name"] for c in costs] == ["fc1", "fc2"]
    assert all(c["speedup"] is not None for c in costs)
    assert chosen in ([], ["fc1"])  # fc1: the only high-error layer; kept only if int8 gains little
    assert chosen == (["fc1"] if costs[0]["speedup"] < 1.25 else [])


def test_the_int8_model_is_built_as_a_search_trial_builds_it():
    from accel.search.layer_costs import quantizer_steps

    steps = quantizer_steps("quantize_onnx_static")
    assert [s["pass"] for s in steps] == ["export_onnx", "quantize_onnx_static"]
    if importlib.util.find_spec("nncf") is not None:  # registered with openvino and nncf
        ov = quantizer_steps("quantize_openvino")
        assert ov[-1] == {"pass": "quantize_openvino", "params": {"samples": 32}}
