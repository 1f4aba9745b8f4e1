"""Tests for accel.timing.single (the benchmark job's one-model report): statistics,
first-call handling, threads, ORT sessions, the shared batching rule."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from accel.errors import AccelError
from accel.timing import single as bench
from accel.timing.environment import environment_info
from accel.timing.single import BenchResult, benchmark


class TinyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * self.scale


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            TinyNet().eval(),
            (torch.randn(2, 8),),
            str(path),
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}},
            dynamo=False,
        )
    return path


class FakeClock:
    """A model whose n-th call 'takes' durations[n] on a patched perf_counter."""

    def __init__(self, durations_ms):
        self.durations = list(durations_ms)
        self.now = 0.0
        self.calls = 0

    def perf_counter(self):
        return self.now

    def __call__(self, x):
        self.now += self.durations[self.calls] / 1000.0
        self.calls += 1
        return x


def test_stats_exclude_first_call_and_match_known_samples(monkeypatch):
    # first call 500 ms, 2 warm-up calls 100 ms, then 1..10 ms.
    clock = FakeClock([500.0, 100.0, 100.0] + [float(i) for i in range(1, 11)])
    monkeypatch.setattr(bench.time, "perf_counter", clock.perf_counter)
    r = benchmark(clock, (torch.zeros(4, 3),), warmup=2, iters=10)
    assert clock.calls == 13
    assert r.first_call_ms == pytest.approx(500.0)
    assert r.iters == 10
    assert sorted(r.samples_ms) == pytest.approx([float(i) for i in range(1, 11)])
    assert r.median_ms == pytest.approx(5.5)
    assert r.mean_ms == pytest.approx(5.5)
    assert r.min_ms == pytest.approx(1.0)
    assert r.max_ms == pytest.approx(10.0)
    assert r.p90_ms == pytest.approx(9.1)  # numpy's linear interpolation
    assert r.p99_ms == pytest.approx(np.percentile(np.arange(1, 11), 99))
    assert r.std_ms == pytest.approx(np.std(np.arange(1, 11), ddof=1))
    # throughput = batch / median: 4 samples per 5.5 ms
    assert r.batch_size == 4
    assert r.throughput == pytest.approx(4 / 0.0055)


def test_min_time_extends_iterations(monkeypatch):
    clock = FakeClock([2.0] * 200)
    monkeypatch.setattr(bench.time, "perf_counter", clock.perf_counter)
    r = benchmark(clock, {"x": torch.zeros(1)}, warmup=0, iters=5, min_time_s=0.05)
    assert r.iters == 25  # 25 x 2 ms reaches 0.05 s
    assert r.warmup == 0


def test_tiny_module_on_cpu():
    torch.manual_seed(0)
    model = TinyNet().eval()
    before = torch.get_num_threads()
    r = benchmark(model, {"x": torch.randn(3, 8)}, warmup=2, iters=15, threads=1)
    assert torch.get_num_threads() == before
    assert r.threads == 1
    assert r.runner == "torch"
    assert r.device == "cpu"
    assert r.iters == 15 and len(r.samples_ms) == 15
    assert 0 < r.min_ms <= r.median_ms <= r.p90_ms <= r.p99_ms <= r.max_ms
    assert r.throughput == pytest.approx(3 / (r.median_ms / 1000.0))
    # Linear(8, 4): 32 weights + 4 bias, plus a 4-element buffer, all float32.
    assert r.size_bytes == (32 + 4 + 4) * 4
    assert r.peak_mem_kind in {"rss_hwm_growth", "ru_maxrss_growth"}
    assert r.peak_mem_bytes is not None and r.peak_mem_bytes >= 0
    assert r.environment["device"] == "cpu"
    assert r.environment["gpu"] is None


def test_thread_count_restored_on_error():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    seen = []

    def boom(x):
        seen.append(torch.get_num_threads())
        if len(seen) > 1:
            raise RuntimeError("boom")
        return x

    with pytest.raises(RuntimeError, match="boom"):
        benchmark(boom, (torch.zeros(1),), warmup=1, iters=3, threads=target)
    assert seen == [target, target]
    assert torch.get_num_threads() == before


def test_runs_under_inference_mode():
    modes = []

    def f(x):
        modes.append(torch.is_inference_mode_enabled())
        return x

    benchmark(f, (torch.zeros(1),), warmup=1, iters=2)
    assert len(modes) >= 4 and all(modes)  # a tiny callable is called several times a sample
    assert not torch.is_inference_mode_enabled()


def test_tied_weights_counted_once():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4, bias=False)
            self.b = torch.nn.Linear(4, 4, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    r = benchmark(Tied().eval(), (torch.zeros(1, 4),), warmup=0, iters=1)
    assert r.size_bytes == 16 * 4


def test_ort_session(onnx_path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    x = torch.randn(5, 8)
    r = benchmark(sess, {"x": x}, warmup=2, iters=10)
    assert r.runner == "onnxruntime"
    assert r.iters == 10
    assert r.batch_size == 5
    assert r.threads == 1
    assert r.median_ms <= r.p90_ms <= r.p99_ms
    assert r.throughput == pytest.approx(5 / (r.median_ms / 1000.0))
    assert r.size_bytes is None  # a bare session does not know its file
    # Positional tuple inputs work too.
    r2 = benchmark(sess, (x.numpy(),), warmup=0, iters=2)
    assert r2.iters == 2


def test_onnx_path_times_session_creation_as_first_call(onnx_path):
    r = benchmark(onnx_path, {"x": torch.randn(2, 8)}, warmup=1, iters=5, threads=1)
    assert r.runner == "onnxruntime"
    assert r.size_bytes == onnx_path.stat().st_size
    assert r.threads == 1
    assert r.iters == 5


def test_ort_wrong_input_count(onnx_path):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    with pytest.raises(AccelError, match="expects 1 inputs"):
        benchmark(sess, (np.zeros((1, 8), np.float32), np.zeros(1)), iters=1)


def test_loaded_model_duck_typing(onnx_path):
    import onnxruntime as ort

    module = TinyNet().eval()
    calls = []

    class FakeLoaded:
        kind = "torch"
        size_bytes = 1234
        input_casts = {"x": "float64"}

        def __init__(self, module):
            self.module = module.double()

        def forward(self, inputs):  # pragma: no cover - benchmark calls the module directly
            raise AssertionError("forward should not be timed for torch kind")

    def hook(mod, args):
        calls.append(args[0].dtype)

    module.register_forward_pre_hook(hook)
    r = benchmark(FakeLoaded(module), {"x": torch.randn(2, 8)}, warmup=1, iters=3)
    assert r.size_bytes == 1234
    # first call, warm-up, 3 samples of one or more calls each (a tiny model is batched)
    assert set(calls) == {torch.float64} and len(calls) >= 5

    sessions = []

    def session():
        if not sessions:
            sessions.append(
                ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
            )
        return sessions[0]

    onnx_model = SimpleNamespace(
        kind="onnx",
        forward=lambda inputs: None,
        session=session,
        onnx_path=onnx_path,
        size_bytes=None,
        input_casts={},
    )
    r = benchmark(onnx_model, {"x": torch.randn(2, 8)}, warmup=1, iters=3)
    assert r.runner == "onnxruntime"
    assert r.size_bytes == onnx_path.stat().st_size
    assert len(sessions) == 1


def test_argument_validation():
    with pytest.raises(ValueError, match="iters"):
        benchmark(lambda x: x, (1,), iters=0)
    with pytest.raises(ValueError, match="warmup"):
        benchmark(lambda x: x, (1,), warmup=-1)
    with pytest.raises(AccelError, match="cannot benchmark"):
        benchmark(42, (1,))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_requested_without_cuda():
    with pytest.raises(AccelError, match="CUDA is not available"):
        benchmark(lambda x: x, (torch.zeros(1),), device="cuda", iters=1)


def test_result_round_trips_through_json():
    r = benchmark(TinyNet().eval(), {"x": torch.randn(2, 8)}, warmup=0, iters=3)
    d = json.loads(json.dumps(r.to_dict()))
    back = BenchResult.from_dict(d)
    assert back == r
    with pytest.raises(ValueError, match="unknown"):
        BenchResult.from_dict({**d, "bogus": 1})


def test_environment_info_is_cheap_and_does_not_init_cuda():
    # In a fresh interpreter: no torch import, no CUDA init.
    code = (
        "import sys, json\n"
        "from accel.timing.environment import environment_info\n"
        "env = environment_info()\n"
        "print(json.dumps({'env': env, 'torch_imported': 'torch' in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    data = json.loads(out.stdout)
    assert data["torch_imported"] is False
    env = data["env"]
    assert env["torch"] == torch.__version__
    assert env["logical_cores"] >= 1
    assert env["gpu"] is None
    assert env["python"].count(".") == 2
    assert environment_info()["onnxruntime"]  # onnxruntime or onnxruntime-gpu
    assert not torch.cuda.is_initialized()


def test_real_loaded_model_torch_and_onnx(onnx_path):
    from accel.models import load_model

    mlp = load_model("zoo:mlp")
    inputs = mlp.example_inputs(batch=2)
    r = benchmark(mlp, inputs, warmup=1, iters=3, threads=1)
    assert r.runner == "torch"
    assert r.size_bytes == mlp.size_bytes
    assert r.batch_size == 2

    tiny = load_model(str(onnx_path), "x:float32[batch,8]")
    assert tiny.kind == "onnx"
    r = benchmark(tiny, {"x": torch.randn(4, 8)}, warmup=1, iters=3)
    assert r.runner == "onnxruntime"
    assert r.batch_size == 4
    assert r.size_bytes > 0


def test_fp32_inputs_cast_to_fp16_onnx_inputs(tmp_path):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "ident16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = tmp_path / "ident16.onnx"
    onnx.save(model, str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    # Without the cast ORT would reject float32 input for a float16 graph input.
    r = benchmark(sess, {"x": torch.randn(6, 3)}, warmup=0, iters=2)
    assert r.batch_size == 6 and r.iters == 2


def test_tiny_model_is_batched_by_the_shared_rule(monkeypatch):
    """A 0.1 ms model: each sample is the mean of calls_per_sample(0.1 ms) calls."""
    from accel.timing.batching import calls_per_sample

    clock = FakeClock([0.1] * 2000)
    monkeypatch.setattr(bench.time, "perf_counter", clock.perf_counter)
    r = benchmark(clock, {"x": torch.zeros(1)}, warmup=1, iters=3)
    per = calls_per_sample(1e-4)
    assert per == 20
    assert clock.calls == 1 + 1 + 3 * per  # first call, warm-up, 3 batched samples
    assert r.iters == 3 and r.median_ms == pytest.approx(0.1)
