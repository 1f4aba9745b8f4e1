"""Telemetry off: ONNX Runtime's Linux telemetry client writes nothing in a fresh home folder,
in a studio process (``disable_telemetry``) and in an exported script (``SCRIPT_PREAMBLE``)."""

from __future__ import annotations

import _socket as _socket_module
import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

SESSION = """
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 9
session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
session.run(None, {"x": np.ones(1, np.float32)})
"""
STUDIO = "from accel.privacy import disable_telemetry\ndisable_telemetry()\n"
SCRIPT = "import os, sys\nfrom accel.privacy import SCRIPT_PREAMBLE\nexec(SCRIPT_PREAMBLE)\n"


def _files_left(tmp_path, prelude: str) -> list[str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env["HOME"] = str(home)
    subprocess.run([sys.executable, "-c", prelude + SESSION], env=env, check=True, timeout=120)
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())


def test_the_check_sees_onnxruntimes_telemetry_files(tmp_path):
    """Without the switch, the wheel's client writes its device id: the check can fail."""
    left = _files_left(tmp_path, "")
    if not left:
        pytest.skip("this onnxruntime build has no telemetry client")
    assert any("onnxruntime" in p for p in left)


@pytest.mark.parametrize("prelude", [STUDIO, SCRIPT], ids=["studio", "exported-script"])
def test_onnxruntime_writes_no_telemetry_with_the_studio_switches(tmp_path, prelude):
    assert _files_left(tmp_path, prelude) == []


GENAI_IMPORTS = """
import sys
import openvino_genai, openvino_tokenizers
sent = sys.modules.get("openvino_telemetry")
print("telemetry loaded" if sent is not None else "telemetry absent")
"""


@pytest.mark.parametrize(
    ("prelude", "want"),
    [("", "telemetry loaded"), (STUDIO, "telemetry absent"), (SCRIPT, "telemetry absent")],
    ids=["plain", "studio", "exported-script"],
)
def test_openvino_genai_brings_no_telemetry_past_the_studio_switches(tmp_path, prelude, want):
    """OpenVINO GenAI and OpenVINO Tokenizers load openvino, whose converter imports
    openvino_telemetry (the plain run: the check can fail); with the studio's switches it is
    not loaded. Their native libraries hold no sender of their own (no URL, no telemetry
    symbol), which the second half checks."""
    pytest.importorskip("openvino_genai")
    env = {**os.environ, "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", prelude + GENAI_IMPORTS],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert want in out
    if getattr(_socket_module, "__file__", None):  # not where Python has it built in
        sockets = _network_symbols(Path(_socket_module.__file__))
        assert sockets, "the check sees the socket calls of Python's own _socket module"
    for pkg in ("openvino_genai", "openvino_tokenizers"):
        for lib in Path(find_spec(pkg).origin).parent.rglob("*.so*"):
            assert _network_symbols(lib) == set(), lib
            hosts = set(re.findall(rb"https?://([a-z0-9.-]+)", lib.read_bytes()))
            assert hosts <= DOC_HOSTS, (lib, hosts)


# Hosts that appear in the libraries' docstrings (papers, documentation): text, not calls.
DOC_HOSTS = {b"arxiv.org", b"openvinotoolkit.github.io", b"github.com", b"docs.openvino.ai"}
NETWORK_CALLS = rb"\x00(getaddrinfo|gethostbyname|socket|connect|curl_easy_init|SSL_connect)\x00"


def _network_symbols(lib: Path) -> set[bytes]:
    """Names of socket / name-lookup / HTTP-client functions in a shared library's symbol
    strings (the dynamic linker's table: NUL-separated names)."""
    return set(re.findall(NETWORK_CALLS, lib.read_bytes()))
