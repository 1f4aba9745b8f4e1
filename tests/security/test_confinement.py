"""Issue 29 (1): a payload that does get code running inside a worker (a pickle the user
opted into with --trust-pickle) cannot write outside the work folder, read ~/.ssh, or open
a socket: the worker's job runs in a Landlock + seccomp box."""

from __future__ import annotations

import json
import os
import socket
import textwrap

import pytest

from accel.sandbox import Box, confine, landlock
from studio.workers.pool import WorkerPool

needs_landlock = pytest.mark.skipif(
    landlock.abi_version() < 4, reason="this kernel has no Landlock with TCP rules (ABI >= 4)"
)

# What the payload tries, each attempt recorded as "allowed" or the error's name. It writes
# its report into the run folder (the one place it may write).
PAYLOAD = textwrap.dedent(
    """
    import json, os, socket
    found = {}
    def attempt(name, fn):
        try:
            fn()
            found[name] = "allowed"
        except Exception as exc:
            found[name] = type(exc).__name__
    attempt("write_outside", lambda: open(OUTSIDE, "w").write("pwned"))
    attempt("read_ssh", lambda: open(SECRET).read())
    attempt("list_home", lambda: os.listdir(HOME))
    attempt("tcp_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    attempt("udp_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    attempt("raw_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1))
    attempt("connect_loopback", lambda: socket.create_connection(("127.0.0.1", PORT), 2))
    attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
    attempt("write_run_folder", lambda: open(REPORT + ".probe", "w").write("ok"))
    open(REPORT, "w").write(json.dumps(found))
    """
)


class _Payload:
    """Unpickled, it runs PAYLOAD with the test's paths and returns a Linear(4, 2)."""

    def __init__(self, names: dict[str, object]) -> None:
        self.names = names

    def __reduce__(self):
        code = "".join(f"{k} = {v!r}\n" for k, v in self.names.items()) + PAYLOAD
        expr = f"(exec({code!r}, {{}}), __import__('torch').nn.Linear(4, 2))[1]"
        return (eval, (expr,))


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    yield srv.getsockname()[1]
    srv.close()


@needs_landlock
def test_trusted_pickle_payload_is_boxed_in_the_worker(tmp_path, listener):
    import torch

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = home / ".ssh" / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    outside = tmp_path / "outside" / "PWNED"
    outside.parent.mkdir()
    run_dir = tmp_path / "run"
    names = {
        "OUTSIDE": str(outside),
        "SECRET": str(secret),
        "HOME": str(home),
        "PORT": listener,
        "REPORT": str(run_dir / "payload.json"),
    }
    model = tmp_path / "models" / "evil.pt"
    model.parent.mkdir()
    torch.save(_Payload(names), str(model))
    recipe = {
        "name": "boxed",
        "model": {"source": str(model), "input_spec": "x:float32[1,4]"},
        "steps": [{"pass": "bf16"}],
        "gates": {"rtol": 1.0, "atol": 1.0},
    }
    with WorkerPool(None, cpu_workers=1, devices=[], env={"HOME": str(home)}) as pool:
        params = {"recipe": recipe, "out": str(run_dir), "trust_pickle": True}
        out = pool.submit("run_recipe", params).wait(180)
    assert out.status == "succeeded", (out.error, out.log_tail)
    report = json.loads((run_dir / "payload.json").read_text())
    assert not outside.exists()
    assert report["write_outside"] == "PermissionError"
    assert report["read_ssh"] == "PermissionError"
    assert report["list_home"] == "PermissionError"
    for kind in ("tcp_socket", "udp_socket", "unix_socket", "raw_socket", "connect_loopback"):
        assert report[kind] == "PermissionError", kind
    assert report["signal_parent"] == "PermissionError"
    assert report["write_run_folder"] == "allowed"


def _in_child(fn) -> int:
    """Run ``fn`` in a forked child; its exit code."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = int(fn() or 0)
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@needs_landlock
def test_tcp_rules_allow_only_the_boxes_ports_on_loopback(listener):
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen()
    other_port = other.getsockname()[1]

    def boxed() -> int:
        families = (socket.AF_INET, socket.AF_INET6)
        confine(Box(tcp_ports=(listener,), socket_families=families))
        socket.create_connection(("127.0.0.1", listener), 2).close()
        try:
            socket.create_connection(("127.0.0.1", other_port), 2)
        except PermissionError:
            pass
        else:
            return 3
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # TCP only, even here
        except PermissionError:
            return 0
        return 4

    try:
        assert _in_child(boxed) == 0
    finally:
        other.close()


@needs_landlock
def test_the_box_reads_its_folders_and_writes_only_its_work_folder(tmp_path):
    model_dir, work, elsewhere = tmp_path / "model", tmp_path / "work", tmp_path / "else"
    for d in (model_dir, work, elsewhere):
        d.mkdir()
    (model_dir / "m.onnx").write_text("model")
    (elsewhere / "secret").write_text("secret")

    def boxed() -> int:
        confine(Box(read=(model_dir,), write=(work,)))
        assert (model_dir / "m.onnx").read_text() == "model"
        (work / "out.txt").write_text("ok")
        for attempt in (
            lambda: (elsewhere / "secret").read_text(),
            lambda: (model_dir / "new").write_text("x"),
            lambda: (tmp_path / "new").write_text("x"),
        ):
            try:
                attempt()
            except PermissionError:
                continue
            return 5
        return 0

    assert _in_child(boxed) == 0
    assert (work / "out.txt").read_text() == "ok"
    assert not (model_dir / "new").exists()


@needs_landlock
@pytest.mark.slow
def test_a_serve_test_runs_in_its_box(tmp_path):
    """Triton under PyTriton serves from inside the box: loopback ports chosen before it,
    a pty for the server, its temp folders."""
    pytest.importorskip("pytriton")
    import torch

    path = tmp_path / "tiny.onnx"
    torch.onnx.export(
        torch.nn.Linear(6, 3).eval(),
        (torch.randn(2, 6),),
        str(path),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        dynamo=False,
    )
    params = {
        "artifact_kind": "onnx",
        "artifact_path": str(path),
        "input_spec": "x:float32[batch,6]; batch=1..4:1",
        "clients": [2],
        "batches": [1, 2],
        "duration_s": 1.0,
        "max_requests": 50,
    }
    with WorkerPool(None, cpu_workers=1, devices=[]) as pool:
        out = pool.submit("serve_test", params).wait(600)
    assert out.status == "succeeded", (out.error, out.log_tail[-800:])
    assert {p["mode"] for p in out.result["load"]} == {"no batching", "dynamic batching"}
    assert all(p["errors"] == 0 and p["requests"] > 0 for p in out.result["load"])
