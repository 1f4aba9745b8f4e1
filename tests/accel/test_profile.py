"""Tests for accel.profile: per-module times, FLOPs, op attribution, ONNX per-node profile."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

from accel.errors import Cancelled
from accel.models import load_model
from accel.profile import LayerProfile, ModelProfile, OpRow, profile_model, profile_module
from accel.profile.results import UNATTRIBUTED, middle_half
from accel.runtimes.torch.hooks import aggregate

ZOO_SOURCES = ["zoo:mlp", "zoo:resnet", "zoo:transformer", "zoo:lstm"]


def _fast(loaded, **kw):
    kw.setdefault("iters", 3)
    kw.setdefault("warmup", 1)
    kw.setdefault("threads", 1)  # one thread suffers far less from a busy shared machine
    return profile_model(loaded, **kw)


# -- call-tree aggregation (the arithmetic every pass relies on) -------------------------------


def test_aggregate_self_is_inclusive_minus_children_and_removes_hook_cost():
    # root(10) -> a(6) -> b(2); root -> b(1) again (shared module, called twice)
    calls = [["", 0, 0, -1], ["a", 0, 0, 0], ["b", 0, 0, 1], ["b", 0, 0, 0]]
    agg = aggregate(calls, [10.0, 6.0, 2.0, 1.0])
    assert agg.inclusive == {"": 10.0, "a": 6.0, "b": 3.0}
    assert agg.self == {"": 3.0, "a": 4.0, "b": 3.0}
    assert agg.calls == {"": 1, "a": 1, "b": 2}
    assert agg.top == 10.0
    # hook cost 0.5 per nested hooked call: root has 3 nested calls, a has 1.
    agg = aggregate(calls, [10.0, 6.0, 2.0, 1.0], per_child_cost=0.5)
    assert agg.inclusive == {"": 8.5, "a": 5.5, "b": 3.0}
    assert agg.self == {"": 2.0, "a": 3.5, "b": 3.0}
    assert sum(agg.self.values()) == pytest.approx(agg.top)


class _FakeClock:
    def __init__(self):
        self.t = 0

    def __call__(self) -> int:
        return self.t


class _Work(nn.Module):
    """Advances the fake clock by ``ns`` of its own work, then runs its children."""

    def __init__(self, clock, ns, *children):
        super().__init__()
        self.clock, self.ns = clock, ns
        self.kids = nn.ModuleList(children)

    def forward(self, x):
        self.clock.t += self.ns
        for k in self.kids:
            x = k(x)
        return x


def test_times_with_a_fake_clock_add_up_exactly(monkeypatch):
    from accel.runtimes.torch import hooks
    from accel.runtimes.torch import profile as torch_profile

    clock = _FakeClock()
    monkeypatch.setattr(hooks, "perf_ns", clock)
    monkeypatch.setattr(torch_profile, "perf_ns", clock)
    b = _Work(clock, 50)
    model = _Work(clock, 100, _Work(clock, 1000, _Work(clock, 300)), b, b)  # b called twice
    prof = profile_module(model, torch.zeros(1), iters=3, warmup=1, ops=False)
    ms = 1e-6
    assert prof.hook_cost_us == 0.0  # the fake clock does not see the hooks
    assert prof.plain_forward_ms == pytest.approx(1500 * ms)
    assert prof.total_ms == pytest.approx(1500 * ms)
    assert prof.coverage == pytest.approx(1.0)
    assert prof.overhead_ratio == pytest.approx(1.0)
    rows = prof.by_name()
    # ModuleLists are rows too (never called); b's second path is a duplicate
    assert set(rows) == {
        "",
        UNATTRIBUTED,
        "kids",
        "kids.0",
        "kids.0.kids",
        "kids.0.kids.0",
        "kids.0.kids.0.kids",
        "kids.1",
        "kids.1.kids",
    }
    assert rows["kids"].calls == 0 and rows["kids"].self_ms == 0.0
    assert rows[UNATTRIBUTED].self_ms == pytest.approx(0.0, abs=1e-12)
    assert rows[""].self_ms == pytest.approx(100 * ms)
    assert rows[""].inclusive_ms == pytest.approx(1500 * ms)
    assert rows["kids.0"].self_ms == pytest.approx(1000 * ms)
    assert rows["kids.0"].inclusive_ms == pytest.approx(1300 * ms)
    assert rows["kids.0.kids.0"].self_ms == pytest.approx(300 * ms)
    assert rows["kids.1"].self_ms == pytest.approx(100 * ms)
    assert rows["kids.1"].calls == 2
    assert rows["kids.0"].share == pytest.approx(1000 / 1500)
    assert rows["kids.0"].inclusive_share == pytest.approx(1300 / 1500)
    assert rows["kids.0.kids.0"].parent == "kids.0.kids"  # the module tree, ModuleList included


# -- plain modules -----------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 4])
def test_linear_flops_params_bytes_and_intensity(batch):
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()).eval()
    x = torch.randn(batch, 1024)
    prof = profile_module(model, x, iters=2, warmup=1, ops=False)
    lin = prof.row("0")
    assert lin.type == "Linear"
    assert lin.flops == 2 * batch * 1024 * 1024
    assert lin.self_flops == lin.flops
    assert prof.row("").flops == lin.flops  # ReLU adds no counted FLOPs
    assert prof.row("").self_flops == 0
    assert prof.total_flops == lin.flops
    assert lin.params == 1024 * 1024 + 1024
    assert lin.param_bytes == 4 * (1024 * 1024 + 1024)
    assert lin.input_bytes == 4 * batch * 1024
    assert lin.output_bytes == 4 * batch * 1024
    assert lin.intensity == pytest.approx(lin.flops / (lin.param_bytes + 8 * batch * 1024))
    assert lin.flops_per_s == pytest.approx(lin.flops / (lin.inclusive_ms / 1e3))
    assert lin.peak_mem_bytes is None  # CPU
    assert prof.ops == []


class Shared(nn.Module):
    """Calls ``act`` twice and a module that is not its child (``other``), through a helper."""

    def __init__(self, other: nn.Module):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.ReLU()
        self._other = [other]  # not registered: not a child

    def forward(self, x):
        x = self.act(self.fc(x))
        x = self._other[0](x)
        return self.act(x)


def test_calls_counted_and_unregistered_callee_time_stays_in_caller():
    other = nn.Linear(16, 16)
    model = Shared(other).eval()
    prof = profile_module(model, torch.randn(2, 16), iters=2, warmup=1, ops=False)
    names = {r.name for r in prof.rows}
    assert names == {"", "fc", "act", UNATTRIBUTED}
    assert prof.row("act").calls == 2
    assert prof.row("fc").calls == 1
    assert prof.row("").calls == 1
    # other's FLOPs are the root's own
    assert prof.row("").self_flops == 2 * 2 * 16 * 16
    assert prof.row("").flops == 2 * (2 * 2 * 16 * 16)


def test_lstm_flops_estimated():
    model = nn.LSTM(8, 16, num_layers=2, batch_first=True).eval()
    prof = profile_module(model, torch.randn(3, 5, 8), iters=1, warmup=0, ops=False)
    per_step = 2 * 4 * 16 * (8 + 16) + 2 * 4 * 16 * (16 + 16)
    assert prof.row("").flops == per_step * 5 * 3
    assert any("estimated" in n for n in prof.notes)


# -- the zoo ------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=ZOO_SOURCES)
def zoo_profile(request, tmp_path_factory):
    loaded = load_model(request.param)
    trace = tmp_path_factory.mktemp("trace") / "trace.json"
    return loaded, _fast(loaded, iters=5, trace_path=trace)


def test_zoo_rows_cover_every_module_with_its_parameters(zoo_profile):
    loaded, prof = zoo_profile
    mods = dict(loaded.module.named_modules())
    assert [r.name for r in prof.rows] == [*mods, UNATTRIBUTED]  # the rest: last row
    for r in prof.rows[:-1]:
        m = mods[r.name]
        assert r.type == type(m).__name__
        assert r.params == sum(p.numel() for p in m.parameters())
        assert r.depth == (0 if r.name == "" else r.name.count(".") + 1)
        if r.name:
            assert r.parent in mods
            assert r.parent == r.name.rpartition(".")[0]
    assert prof.row("").params == loaded.num_params
    assert prof.row("").calls == 1


def test_zoo_times_add_up(zoo_profile):
    _, prof = zoo_profile
    root = prof.row("")
    # The headline is the plain forward; the layers plus (unattributed) add up to it.
    assert prof.total_ms == prof.plain_forward_ms > 0
    assert sum(r.self_ms for r in prof.rows) == pytest.approx(prof.total_ms, rel=1e-9)
    assert sum(r.share for r in prof.rows) == pytest.approx(1.0)
    unattributed = prof.row(UNATTRIBUTED)
    assert unattributed.self_ms == pytest.approx(prof.total_ms - prof.coverage * prof.total_ms)
    for r in prof.rows:
        if r.name != UNATTRIBUTED:
            assert r.self_ms >= -1e-9
        if r.calls:
            assert r.inclusive_ms >= r.self_ms - 1e-9
    assert root.inclusive_ms > 0


def test_zoo_operators_add_up_to_their_module(zoo_profile):
    _, prof = zoo_profile
    per_module: dict[str | None, float] = {}
    for o in prof.ops:
        per_module[o.module] = per_module.get(o.module, 0.0) + o.self_cpu_ms
        assert o.raw_self_ms is not None or o.module is None
    checked = 0
    for r in prof.rows:
        if r.name in per_module and r.self_ms > 0:
            assert per_module[r.name] == pytest.approx(r.self_ms, rel=0.10), r.name
            checked += 1
    assert checked >= 2


def test_middle_half_drops_outliers():
    assert middle_half([1.0, 9.0, 1.1, 1.2, 50.0, 1.05, 0.2, 1.15]) == [2, 3, 5, 7]
    assert middle_half([3.0, 1.0]) == [0, 1]


def test_first_hooked_forward_is_never_counted(monkeypatch):
    """A module whose first call is slow (lazy init) must not show it, even with warmup=0."""
    from accel.runtimes.torch import hooks
    from accel.runtimes.torch import profile as torch_profile

    clock = _FakeClock()
    monkeypatch.setattr(hooks, "perf_ns", clock)
    monkeypatch.setattr(torch_profile, "perf_ns", clock)

    class Lazy(nn.Module):
        def __init__(self):
            super().__init__()
            self.n = 0

        def forward(self, x):
            self.n += 1
            clock.t += 10_000_000 if self.n == 2 else 1000  # call 1: plain; 2: first hooked
            return x

    model = nn.Sequential(Lazy())
    prof = profile_module(model, torch.zeros(1), iters=3, warmup=0, ops=False)
    assert prof.warmup == 1
    assert prof.row("0").self_ms == pytest.approx(1000 * 1e-6)
    assert max(prof.hooked_samples_ms) == pytest.approx(1000 * 1e-6)


def test_zoo_module_times_add_up_to_plain_forward(zoo_profile):
    """Generous bounds, retried: other jobs share this 2-core machine and a preempted
    forward can take 10x longer. The precise figure is in bench/bench_profiler.py; the
    exact arithmetic is checked with a fake clock above."""
    loaded, prof = zoo_profile
    for _attempt in range(3):
        if 0.5 < prof.coverage < 2 and 0.5 < prof.overhead_ratio < 3:
            break
        prof = _fast(loaded, iters=9, ops=False)
    assert 0.5 < prof.coverage < 2
    assert 0.5 < prof.overhead_ratio < 3


def test_zoo_flops_and_intensity(zoo_profile):
    loaded, prof = zoo_profile
    root = prof.row("")
    assert root.flops and root.flops > 0
    assert sum(r.self_flops or 0 for r in prof.rows) == root.flops
    for r in prof.rows:
        if r.flops:
            assert r.intensity == pytest.approx(r.flops / r.bytes_moved)
    if loaded.source == "zoo:mlp":
        b = loaded.example_inputs()["x"].shape[0]
        assert prof.row("fc1").flops == 2 * b * 1024 * 1024
        assert prof.row("fc3").flops == 2 * b * 1024 * 10
    if loaded.source == "zoo:lstm":
        b, s = loaded.example_inputs()["tokens"].shape
        assert prof.row("lstm").flops == 2 * 4 * 256 * (128 + 256) * b * s
    if loaded.source == "zoo:transformer":
        b, s = loaded.example_inputs()["input_ids"].shape
        att = prof.row("layers.0.attention")
        # the module's own code is scaled_dot_product_attention: QK^T and AV
        assert att.self_flops == 2 * 2 * b * s * s * 256
        assert prof.row("layers.0.attention.query").flops == 2 * b * s * 256 * 256


def test_zoo_ops_attributed_to_innermost_module(zoo_profile):
    loaded, prof = zoo_profile
    assert prof.ops and prof.op_iters >= 1
    paths = {r.name for r in prof.rows}
    for o in prof.ops:
        assert o.module is None or o.module in paths
        assert o.calls >= 1
    mods = dict(loaded.module.named_modules())
    heavy = [
        o
        for o in prof.ops
        if o.name in ("aten::addmm", "aten::mm", "aten::mkldnn_convolution", "aten::convolution")
    ]
    assert heavy
    for o in heavy:
        # a matmul / convolution runs inside a Linear / Conv / LSTM leaf, never in a container
        assert type(mods[o.module]).__name__ in ("Linear", "Conv2d", "LSTM"), o
    if loaded.source == "zoo:mlp":
        addmm = {o.module for o in prof.ops if o.name == "aten::addmm"}
        assert addmm == {"fc1", "fc2", "fc3"}
    if loaded.source == "zoo:transformer":
        sdpa = [o for o in prof.ops if o.name == "aten::scaled_dot_product_attention"]
        assert {o.module for o in sdpa} == {f"layers.{i}.attention" for i in range(4)}


def test_zoo_trace_is_chrome_json_with_module_scopes(zoo_profile):
    _, prof = zoo_profile
    data = json.loads(open(prof.trace_path).read())
    events = data["traceEvents"]
    names = {e.get("name") for e in events}
    assert "<root> [" + prof.row("").type + "]" in names
    assert any(n and n.startswith("aten::") for n in names)


def test_zoo_round_trips_through_json(zoo_profile):
    _, prof = zoo_profile
    back = ModelProfile.from_dict(json.loads(json.dumps(prof.to_dict())))
    assert back == prof
    assert isinstance(back.rows[0], LayerProfile)
    assert isinstance(back.ops[0], OpRow)


# -- progress / cancel / device ----------------------------------------------------------------


def test_progress_is_monotonic_and_cancel_stops():
    loaded = load_model("zoo:mlp")
    seen: list[float] = []
    _fast(loaded, ops=True, progress=lambda f, m: seen.append(f))
    assert seen and seen[-1] == pytest.approx(1.0)
    assert all(b >= a - 1e-12 for a, b in zip(seen, seen[1:]))
    n = {"calls": 0}

    def cancel():
        n["calls"] += 1
        return n["calls"] > 2

    with pytest.raises(Cancelled):
        _fast(loaded, iters=10, cancel=cancel)


def test_from_dict_ignores_unknown_keys():
    d = LayerProfile(name="fc", type="Linear").to_dict() | {"new_field": 1}
    assert LayerProfile.from_dict(d).name == "fc"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_events_and_peak_memory():
    loaded = load_model("zoo:mlp")
    prof = _fast(loaded, device="cuda:0")
    assert prof.timing == "cuda_events"
    assert prof.row("fc1").peak_mem_bytes is not None
    assert prof.row("fc1").peak_mem_bytes >= prof.row("fc1").output_bytes
    assert next(loaded.module.parameters()).device.type == "cpu"  # moved back


# -- ONNX ---------------------------------------------------------------------------------------


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            TinyMLP().eval(),
            (torch.randn(2, 32),),
            str(path),
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
            dynamo=False,
        )
    return path


@pytest.mark.parametrize("level", ["disabled", "all"])
def test_onnx_per_node_profile(onnx_file, tmp_path, level):
    loaded = load_model(str(onnx_file))
    loaded = loaded.replace(session_options={"graph_optimization_level": level})
    inputs = {"x": torch.randn(5, 32)}
    trace = tmp_path / "ort_trace.json"
    prof = profile_model(loaded, inputs, iters=4, warmup=2, trace_path=trace)
    assert prof.kind == "onnx" and prof.timing == "onnxruntime"
    assert prof.iters == 4  # warm-up runs dropped
    root = prof.row("")
    nodes = [r for r in prof.rows[1:] if r.name != UNATTRIBUTED]
    assert prof.total_ms == prof.plain_forward_ms
    assert root.inclusive_ms == pytest.approx(root.self_ms + sum(r.self_ms for r in nodes))
    assert sum(r.self_ms for r in prof.rows) == pytest.approx(prof.total_ms, rel=1e-6)
    gemms = [r for r in nodes if "Gemm" in r.type]
    assert len(gemms) == 2
    assert sorted(r.flops for r in gemms) == sorted([2 * 5 * 32 * 64, 2 * 5 * 64 * 8])
    assert sorted(r.params for r in gemms) == sorted([32 * 64 + 64, 64 * 8 + 8])
    assert root.params == 32 * 64 + 64 + 64 * 8 + 8
    assert all(r.calls == 1 for r in nodes)
    if level == "disabled":  # the file's own node names, which the graph view uses
        assert {r.name for r in nodes} == {"/fc1/Gemm", "/act/Relu", "/fc2/Gemm"}
        assert prof.row("/fc2/Gemm").output_bytes == 5 * 8 * 4
    op_types = {o.name: o for o in prof.ops}
    assert sum(o.calls for o in prof.ops) == len(nodes)
    assert sum(o.self_cpu_ms for o in prof.ops) == pytest.approx(sum(r.self_ms for r in nodes))
    assert any("Gemm" in t for t in op_types)
    data = json.loads(trace.read_text())
    assert any(e.get("name") == "model_run" for e in data["traceEvents"])
    assert ModelProfile.from_dict(json.loads(json.dumps(prof.to_dict()))) == prof


def test_to_dict_is_strict_json():
    prof = ModelProfile(kind="torch", device="cpu", overhead_ratio=float("nan"))
    prof.rows.append(LayerProfile(name="", type="M", flops_per_s=float("inf")))
    d = json.loads(json.dumps(prof.to_dict(), allow_nan=False))
    assert d["overhead_ratio"] is None and d["rows"][0]["flops_per_s"] is None


def test_onnx_conv_flops_after_ort_layout_rewrite(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU()).eval()
    path = tmp_path / "conv.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.randn(1, 3, 16, 16),), str(path), input_names=["x"], dynamo=False
        )
    prof = profile_model(load_model(str(path)), iters=2, warmup=1)
    convs = [r for r in prof.rows if "Conv" in r.type]
    assert len(convs) == 1
    # 16 output channels x 14 x 14 positions x (3*3*3) multiply-adds, whatever ORT named the node
    assert convs[0].flops == 2 * 16 * 14 * 14 * 3 * 3 * 3
    assert prof.total_flops == convs[0].flops


def test_torchscript_module_is_timed_as_a_whole():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script is deprecated
        model = torch.jit.script(nn.Sequential(nn.Linear(64, 32), nn.ReLU()).eval())
    prof = profile_module(model, torch.randn(4, 64), iters=2, warmup=1, ops=False)
    root = prof.row("")
    assert root.type == "Sequential"
    assert root.calls == 1 and root.self_ms > 0
    assert root.flops == 2 * 4 * 64 * 32
    assert root.params == 64 * 32 + 32
    assert prof.row("0").calls == 0
    assert any("do not accept forward hooks" in n for n in prof.notes)


def test_samples_are_kept_per_iteration():
    prof = profile_module(nn.Linear(8, 8).eval(), torch.randn(2, 8), iters=4, warmup=1, ops=False)
    assert (
        len(prof.plain_samples_ms) == len(prof.hooked_samples_ms) == len(prof.total_samples_ms) == 4
    )
    middle = sorted(prof.plain_samples_ms)[1:3]
    assert prof.plain_forward_ms == pytest.approx(sum(middle) / 2)  # median of 4
    assert prof.total_ms == prof.plain_forward_ms  # the headline is the plain forward


def test_cuda_layer_times_are_the_kernel_times_of_each_modules_own_operators():
    """On CUDA a module's self time is the GPU time of the kernels its operators launched
    (the hooks' CUDA events also count the GPU waiting for the hooks: on an H200 zoo:resnet's
    layers added up to 2.2x the forward); inclusive times sum the subtree."""
    from accel.profile.results import LayerProfile, OpRow
    from accel.runtimes.torch.profile import kernel_times

    rows = [
        LayerProfile(name="", type="Net", parent=None, self_ms=9.0),
        LayerProfile(name="block", type="Block", depth=1, parent="", self_ms=9.0),
        LayerProfile(name="block.conv", type="Conv2d", depth=2, parent="block", self_ms=9.0),
        LayerProfile(name="head", type="Linear", depth=1, parent="", self_ms=9.0),
    ]
    ops = [
        OpRow(name="aten::conv2d", module="block.conv", self_device_ms=0.4),
        OpRow(name="aten::add", module="block", self_device_ms=0.1),
        OpRow(name="aten::addmm", module="head", self_device_ms=0.2),
        OpRow(name="aten::relu", module="block.conv", self_device_ms=0.05),
        OpRow(name="aten::flatten", module=None, self_device_ms=0.01),
    ]
    kernel_times(rows, ops)
    by = {r.name: r for r in rows}
    assert by["block.conv"].self_ms == pytest.approx(0.45)
    assert by["block"].self_ms == pytest.approx(0.1)
    assert by["block"].inclusive_ms == pytest.approx(0.55)
    assert by[""].self_ms == pytest.approx(0.01)
    assert by[""].inclusive_ms == pytest.approx(0.76)
    assert sum(r.self_ms for r in rows) == pytest.approx(0.76)
