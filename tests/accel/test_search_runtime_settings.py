"""Runtime settings (OpenVINO hint and streams, ONNX Runtime threads) as a search dimension
for the throughput objective, measured with requests in flight together."""

from __future__ import annotations

import importlib.util

import pytest

from accel.models import load_model
from accel.models.runtime import runtime_of
from accel.passes import PassContext, get_pass
from accel.search import InProcessExecutor, SearchConfig, build_space, run_search
from accel.search.runtime_settings import add_runtime_settings, runtime_domains

MLP = ("zoo:mlp(in_features=64, hidden=128)", "x:float32[batch,64]; batch=1..8:4")


def test_settings_are_searched_for_throughput_only_and_capped_by_the_threads():
    one = runtime_domains(1)
    assert one["openvino"]["streams"].values == (None, 1)
    assert one["onnxruntime"]["intra_op_threads"].values == (None, 1)
    assert runtime_domains(6)["onnxruntime"]["intra_op_threads"].values == (None, 1, 2, 4)
    assert runtime_domains(6)["onnxruntime"]["inter_op_threads"].values == (None, 1, 2)
    space = build_space(
        "torch", "cpu", layer_types={"linear"}, include=["export_onnx", "onnxruntime"]
    )
    same, added = add_runtime_settings(space, "latency", 4)
    assert same is space and added == {}
    searched, added = add_runtime_settings(space, "throughput", 4)
    assert set(added) == {"onnxruntime"}
    assert searched.passes["onnxruntime"].params["intra_op_threads"].values == (None, 1, 2, 4)
    assert "intra_op_threads" not in space.passes["onnxruntime"].params  # the space is not changed


def test_throughput_search_measures_concurrent_requests_and_keeps_the_latency(tmp_path):
    cfg = SearchConfig(
        model=MLP[0],
        input_spec=MLP[1],
        objective="throughput",
        max_trials=3,
        budget_s=None,
        passes=("export_onnx", "onnxruntime"),
        out_dir=str(tmp_path),
        bench_iters=3,
        bench_rounds=1,
        bench_min_time_s=0.0,
        bench_warmup=1,
        bench_threads=2,
    )
    res = run_search(cfg, InProcessExecutor())
    assert res.space["runtime_settings"]["onnxruntime"]["intra_op_threads"]["values"] == [
        None,
        1,
        2,
    ]
    ran = [t for t in res.trials if t.status == "ok"]
    assert len(ran) == 3
    for t in ran:
        m = t.metrics
        assert m["throughput"] > 0 and m["throughput_sync"] > 0 and t.timing.p50_step_ms > 0
    ort = [t for t in ran if "onnxruntime" in t.chain]
    assert ort and all("intra_op_threads" in t.steps[-1]["params"] for t in ort)


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="needs openvino")
@pytest.mark.parametrize("hint", ["latency", "throughput"])
def test_openvino_concurrent_throughput_runs_its_request_queue(tmp_path, hint):
    model = load_model(*MLP)
    cls = get_pass("openvino")
    ctx = PassContext(inputs=model.example_inputs(), original=model, work_dir=tmp_path)
    ov = cls().apply(model, cls.parse_config({"performance_hint": hint, "streams": 2}), ctx)
    calls = runtime_of(ov).concurrent_throughput(ov, model.example_inputs(), seconds=0.2)
    assert calls is not None and calls > 0
