"""Telemetry off: ONNX Runtime's Linux telemetry client writes nothing in a fresh home folder,
in a studio process (``disable_telemetry``) and in an exported script (``SCRIPT_PREAMBLE``)."""

from __future__ import annotations

import os
import subprocess
import sys

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
