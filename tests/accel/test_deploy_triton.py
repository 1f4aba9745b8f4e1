"""Triton model repositories: each artifact kind's config parses with Triton's protobuf and
its model loads; bad input says what to change."""

from __future__ import annotations

import pytest
import torch

from accel.deploy.triton import (
    WAIT_GAIN,
    DeployError,
    SweepPoint,
    choose_batching,
    parse_config,
    servable_artifact,
    write_repository,
)
from accel.models import InputSpec

pytest.importorskip("tritonclient.grpc")

SPEC = InputSpec.parse("x:float32[batch,6]; batch=1..8:2")


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


@pytest.fixture
def onnx_file(tmp_path):
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(
        Tiny().eval(),
        (torch.randn(2, 6),),
        str(path),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        dynamo=False,
    )
    return path


@pytest.fixture
def torchscript_file(tmp_path):
    path = tmp_path / "tiny.pt"
    torch.jit.trace(Tiny().eval(), torch.randn(2, 6)).save(str(path))
    return path


def test_onnx_repository_parses_and_loads(onnx_file, tmp_path):
    out = tmp_path / "repo"
    res = write_repository(
        {"kind": "onnx", "path": str(onnx_file)}, SPEC, out, batches=[1, 2, 4], sweep_iters=2
    )
    cfg = parse_config((out / "model" / "config.pbtxt").read_text())
    assert cfg.platform == "onnxruntime_onnx" and cfg.max_batch_size == 8
    assert [i.name for i in cfg.input] == ["x"] and list(cfg.input[0].dims) == [6]
    assert [o.name for o in cfg.output] == ["y"] and list(cfg.output[0].dims) == [3]
    assert cfg.HasField("dynamic_batching")
    assert list(cfg.dynamic_batching.preferred_batch_size) == res.model.preferred_batch_sizes
    # The delay follows the sweep (choose_batching): held back only where batching pays well.
    gain = max(p.throughput for p in res.sweep) / res.sweep[0].throughput
    delay = cfg.dynamic_batching.max_queue_delay_microseconds
    assert delay == res.model.max_queue_delay_us
    assert (delay >= 100) if gain >= WAIT_GAIN else (delay == 0)
    assert cfg.instance_group[0].kind == cfg.instance_group[0].KIND_CPU
    assert (out / "model" / "1" / "model.onnx").is_file()
    assert [p.batch for p in res.sweep] == [1, 2, 4]


def test_torchscript_repository_parses_and_loads(torchscript_file, tmp_path):
    out = tmp_path / "repo"
    write_repository(
        {"kind": "torchscript", "path": str(torchscript_file)}, SPEC, out, sweep_iters=1
    )
    cfg = parse_config((out / "model" / "config.pbtxt").read_text())
    assert cfg.platform == "pytorch_libtorch"
    assert [i.name for i in cfg.input] == ["INPUT__0"] and [o.name for o in cfg.output] == [
        "OUTPUT__0"
    ]
    assert (out / "model" / "1" / "model.pt").is_file()


def test_fixed_shapes_serve_without_batching(onnx_file, tmp_path):
    spec = InputSpec.parse("x:float32[1,6]")
    write_repository({"kind": "onnx", "path": str(onnx_file)}, spec, tmp_path / "r")
    cfg = parse_config((tmp_path / "r" / "model" / "config.pbtxt").read_text())
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [1, 6]


def test_gpu_run_gets_a_gpu_instance_group(onnx_file, tmp_path):
    res = write_repository(
        {"kind": "onnx", "path": str(onnx_file)}, SPEC, tmp_path / "r", sweep_iters=1
    )
    res.model.device = "cuda:1"
    cfg = parse_config(res.model.config_pbtxt())
    assert cfg.instance_group[0].kind == cfg.instance_group[0].KIND_GPU
    assert list(cfg.instance_group[0].gpus) == [1]


def test_bad_input_says_what_to_change(onnx_file, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(DeployError, match="--force"):
        write_repository({"kind": "onnx", "path": str(onnx_file)}, SPEC, out)
    write_repository({"kind": "onnx", "path": str(onnx_file)}, SPEC, out, force=True)
    assert not (out / "keep.txt").exists()
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(DeployError, match="does not load"):
        write_repository({"kind": "onnx", "path": str(broken)}, SPEC, tmp_path / "r2")
    with pytest.raises(DeployError, match="does not parse"):
        parse_config('name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: many\n')
    assert servable_artifact([{"kind": "outputs", "path": "o.pt"}]) is None
    assert servable_artifact(
        [{"kind": "onnx", "path": "a.onnx"}, {"kind": "torchscript", "path": "b.pt"}]
    ) == {"kind": "torchscript", "path": "b.pt"}


def test_choose_batching_prefers_sizes_that_pay():
    pts = [SweepPoint(1, 1.0, 1000), SweepPoint(2, 1.0, 2000), SweepPoint(4, 4.0, 1000)]
    pts.append(SweepPoint(8, 4.0, 2100))
    preferred, delay = choose_batching(pts)
    assert preferred == [2] and delay == 500


def test_choose_batching_makes_no_request_wait_when_batching_does_not_pay():
    """A sweep with no gain (a CPU-bound model on few cores) gets a zero queue delay: the
    batcher groups what is already queued and holds nobody back."""
    pts = [SweepPoint(1, 5.0, 200), SweepPoint(2, 10.0, 200), SweepPoint(4, 19.5, 205)]
    assert choose_batching(pts) == ([], 0)


def test_choose_batching_sets_no_sizes_or_delay_for_a_modest_gain():
    """zoo:transformer's sweep on 2 cores (1.19x at batch 4): sizes that beat batch 1 by 10 %
    exist, but holding requests back and splitting the queue into preferred sizes lost
    throughput when served (see choose_batching); the batcher takes the whole queue instead."""
    pts = [SweepPoint(1, 4.46, 224), SweepPoint(2, 7.37, 271), SweepPoint(4, 14.3, 280)]
    pts += [SweepPoint(8, 28.8, 278), SweepPoint(16, 59.8, 267)]
    assert choose_batching(pts) == ([], 0)
    assert choose_batching(pts, wait_gain=1.2) == ([2], 2230)


def test_a_taken_port_is_a_clear_error():
    import socket

    from accel.deploy.serve import check_port

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(DeployError, match=f"port {port} .* taken.*--port"):
            check_port(port)


@pytest.mark.slow
def test_served_by_triton_under_two_clients_with_and_without_batching(onnx_file):
    pytest.importorskip("pytriton")
    from accel.deploy.serve import serve_test
    from accel.deploy.triton import load_runtime

    runtime = load_runtime("onnx", onnx_file)
    report = serve_test(runtime, SPEC, clients=[2], batches=[1, 2], duration_s=1.0, max_requests=50)
    assert {p.mode for p in report.load} == {"dynamic batching", "no batching"}
    for p in report.load:
        assert p.clients == 2 and p.errors == 0 and 0 < p.requests <= 100
        assert p.p50_ms <= p.p99_ms and p.throughput > 0
    # the batches Triton formed, from its metrics: one request per execution without batching
    assert report.point("no batching", 2).avg_batch == pytest.approx(1.0)
    assert 1.0 <= report.point("dynamic batching", 2).avg_batch <= 2.0
    assert [s.batch for s in report.sweep] == [1, 2]
    # the served path at one client, timed in alternation with direct calls
    assert report.served_p50_ms > 0 and report.direct_p50_ms > 0


def test_batch_counts_read_tritons_metrics_for_the_model():
    from accel.deploy.serve import _avg_batch, batch_counts

    text = (
        "# HELP nv_inference_count Number of inferences performed\n"
        "# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="model",version="1"} 120\n'
        'nv_inference_count{model="other",version="1"} 999\n'
        'nv_inference_exec_count{model="model",version="1"} 30\n'
        'nv_inference_request_success{model="model",version="1"} 120\n'
    )
    assert batch_counts(text) == (120.0, 30.0)
    assert batch_counts(text, "missing") is None and batch_counts("") is None
    assert _avg_batch((20.0, 10.0), batch_counts(text)) == pytest.approx(5.0)
    assert _avg_batch(None, (1.0, 1.0)) is None and _avg_batch((5.0, 5.0), (5.0, 5.0)) is None


def test_sweep_gain_is_the_best_throughput_over_batch_one():
    from accel.deploy.serve import ServeReport
    from accel.deploy.triton import SweepPoint

    sweep = [SweepPoint(1, 1.0, 1000.0), SweepPoint(4, 2.0, 2000.0), SweepPoint(8, 5.0, 1600.0)]
    assert ServeReport(sweep, [4], 500, 8, 1.0).sweep_gain == pytest.approx(2.0)
    assert ServeReport(sweep, [4], 500, 8, 1.0).to_dict()["sweep_gain"] == pytest.approx(2.0)


@pytest.mark.slow
def test_cancel_stops_the_clients_and_the_server(onnx_file):
    """Cancelled while clients load it, serve_test raises Cancelled and its Triton server and
    client process are gone (the server is a context manager; the clients are terminated)."""
    pytest.importorskip("pytriton")
    import psutil

    from accel.deploy.serve import serve_test
    from accel.deploy.triton import load_runtime
    from accel.errors import Cancelled

    servers: list = []  # the Triton server processes seen while serving

    def progress(fraction: float, message: str) -> None:
        if "client" in message:
            kids = psutil.Process().children(recursive=True)
            servers.extend(p for p in kids if "tritonserver" in " ".join(_cmdline(p)))

    def cancel() -> bool:
        return bool(servers)

    runtime = load_runtime("onnx", onnx_file)
    with pytest.raises(Cancelled):
        serve_test(
            runtime, SPEC, clients=[2], batches=[1], duration_s=120, progress=progress,
            cancel=cancel,
        )  # fmt: skip
    assert servers and not [p for p in servers if _alive(p)]
    left = [" ".join(_cmdline(p)) for p in psutil.Process().children(recursive=True) if _alive(p)]
    # multiprocessing's resource tracker stays for this process's life; nothing else may
    assert not [c for c in left if "resource_tracker" not in c], left


def _cmdline(p) -> list[str]:
    import psutil

    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_openvino_ir_repository_parses_and_names_match_the_model(tmp_path):
    """Triton's OpenVINO backend finds tensors by name; an IR converted from torch has an
    unnamed output, so the copy in the repository gets the name its config uses."""
    ov = pytest.importorskip("openvino")
    src = tmp_path / "ir" / "model.xml"
    src.parent.mkdir()
    m = ov.convert_model(
        Tiny().eval(), example_input=torch.randn(2, 6), input=[("x", ov.PartialShape([-1, 6]))]
    )
    ov.save_model(m, str(src))
    out = tmp_path / "repo"
    write_repository(
        {"kind": "openvino", "path": str(src)}, SPEC, out, batches=[1, 2], sweep_iters=1
    )
    cfg = parse_config((out / "model" / "config.pbtxt").read_text())
    assert cfg.backend == "openvino" and cfg.max_batch_size == 8
    served = ov.Core().read_model(str(out / "model" / "1" / "model.xml"))  # loads (with its .bin)
    assert [i.name for i in cfg.input] == [p.get_any_name() for p in served.inputs] == ["x"]
    assert [o.name for o in cfg.output] == [p.get_any_name() for p in served.outputs]
    assert list(cfg.output[0].dims) == [3]
    compiled = ov.Core().compile_model(served, "CPU")
    res = compiled([torch.randn(2, 6).numpy()])
    assert res[compiled.outputs[0]].shape == (2, 3)


def test_tensorrt_plans_are_gpu_only(onnx_file, tmp_path):
    """A TensorRT engine is written for Triton's tensorrt_plan, but needs its GPU to load:
    on a machine without CUDA the deploy says so instead of writing an untested config."""
    import torch as _torch

    if _torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the plan path is exercised by the GPU tests")
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"not an engine")
    with pytest.raises(DeployError, match="CUDA GPU"):
        write_repository({"kind": "tensorrt_plan", "path": str(plan)}, SPEC, tmp_path / "repo")


def _onnx_with_output_name(path, name):
    """A Relu model whose output tensor is called ``name`` (built with onnx.helper, so the
    name reaches the file exactly as written)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], [name])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 6])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


INJECTED = (
    'y"\n  backend: "python"\n  parameters { key: "EXECUTION_ENV_PATH" value: '
    '{ string_value: "/tmp/evil.tar.gz" } }\n  x: "'
)


def test_an_output_name_cannot_inject_config_lines(tmp_path):
    """Issue 29, route 10: an ONNX output name with a quote and newlines that would end the
    name and add config lines is refused with a clear message; nothing is written."""
    model = _onnx_with_output_name(tmp_path / "evil.onnx", INJECTED)
    out = tmp_path / "repo"
    with pytest.raises(DeployError, match="control characters") as err:
        write_repository({"kind": "onnx", "path": str(model)}, SPEC, out, sweep_iters=1)
    assert "rename the tensor" in str(err.value)
    assert not (out / "model" / "config.pbtxt").exists()


def test_quotes_in_a_name_are_escaped_by_protobuf(tmp_path):
    """A name with quotes and backslashes (no control characters) is served as it is:
    protobuf's text format escapes it, and the config reads back exactly the model's names
    and nothing else."""
    name = 'y" backend: "python\\'
    model = _onnx_with_output_name(tmp_path / "quoted.onnx", name)
    res = write_repository(
        {"kind": "onnx", "path": str(model)}, SPEC, tmp_path / "repo", sweep_iters=1
    )
    cfg = parse_config((tmp_path / "repo" / "model" / "config.pbtxt").read_text())
    assert [o.name for o in cfg.output] == [name]
    assert cfg.platform == "onnxruntime_onnx" and cfg.backend == ""
    assert not cfg.parameters
    assert res.model.outputs[0].name == name


def test_a_model_name_is_one_folder(onnx_file, tmp_path):
    for bad in ("../escape", "a/b", "x\ny", ".."):
        with pytest.raises(DeployError, match="not allowed"):
            write_repository(
                {"kind": "onnx", "path": str(onnx_file)}, SPEC, tmp_path / "r", name=bad
            )
    assert not (tmp_path / "escape").exists()
