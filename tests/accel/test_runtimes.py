"""The runtime registry (accel.models.runtime): one runtime per kind, one suffix table, the
contract every runtime keeps, availability with the reason, and the hints that name the
conversion step a pass needs."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
import torch

import accel  # noqa: F401  (registers the built-in runtimes)
from accel.errors import AccelError
from accel.models.runtime import (
    CAPABILITIES,
    Runtime,
    get_runtime,
    kinds,
    library_problem,
    model_file_suffixes,
    reach_hint,
    register_runtime,
    runtime_for_artifact,
    runtime_for_file,
    runtimes,
)
from accel.passes import get_pass
from accel.runtimes.base import RuntimeBase


def test_registry_knows_every_kind_and_file_type():
    assert set(kinds()) == {"torch", "onnx", "openvino", "tensorrt", "ort_genai"}
    assert [get_runtime(k).kind for k in kinds()] == list(kinds())
    assert runtime_for_file("m.onnx").kind == "onnx"
    assert runtime_for_file("M.XML").kind == "openvino"
    assert runtime_for_file("m.pt2").kind == "torch"
    assert runtime_for_file("m.py") is None
    assert runtime_for_artifact("torchscript").kind == "torch"
    assert runtime_for_artifact("outputs") is None
    with pytest.raises(AccelError, match="unknown model kind 'tflite'"):
        get_runtime("tflite")


def test_one_suffix_table():
    suffixes = model_file_suffixes()
    assert len(suffixes) == len(set(suffixes))
    assert {".onnx", ".xml", ".pt2", ".pt", ".ts", ".pth", ".jit"} == set(suffixes)
    # the GUI's open dialog offers exactly these (it lacked .xml before)
    from studio.ui.open_model_dialog import MODEL_FILTER

    assert all(f"*{s}" in MODEL_FILTER for s in suffixes)


def test_a_suffix_belongs_to_one_runtime():
    class Clash(RuntimeBase):
        kind = "clash"
        file_suffixes = (".onnx",)

    with pytest.raises(ValueError, match=r"\['.onnx'\] already belong to onnx"):
        register_runtime(Clash)
    assert "clash" not in kinds()


def test_every_runtime_keeps_the_contract():
    members = [n for n in dir(Runtime) if not n.startswith("_") and n not in ("mro",)] + list(
        Runtime.__annotations__
    )
    for runtime in runtimes():
        missing = [n for n in members if not hasattr(runtime, n)]
        assert missing == [], (runtime.kind, missing)
        assert runtime.capabilities <= CAPABILITIES
        assert runtime.profile_rows in ("modules", "nodes")
        assert runtime.forms and runtime.forms[0]
        for name in ("load", "profile", "timing_target", "serve"):
            assert inspect.signature(getattr(runtime, name)).parameters  # callable as declared


def test_reach_hints_name_the_step_to_add_or_move():
    assert reach_hint(("onnx",), "torch") == " Add an export_onnx step before it."
    assert reach_hint(("openvino",), "onnx") == " Add an openvino step before it."
    assert reach_hint(("torch",), "onnx") == " Move this step before the export_onnx step."
    assert reach_hint(("torch",), "openvino") == " Move this step before the openvino step."
    assert reach_hint(("torch", "onnx"), "onnx") == ""


def test_library_problem_tells_missing_from_blocked():
    assert library_problem("json") is None
    assert (
        library_problem("no_such_package_xyz") == "the no_such_package_xyz package is not installed"
    )
    code = (
        "import sys; sys.modules['openvino'] = None\n"
        "import accel\n"
        "from accel.models.runtime import availability\n"
        "print(availability()['openvino'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "the openvino package is not installed"


def test_tensorrt_is_unavailable_here_with_the_reason():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    reason = get_runtime("tensorrt").unavailable_reason("cpu")
    assert reason and ("tensorrt" in reason or "GPU" in reason or "CUDA" in reason)
    p = get_pass("tensorrt")
    why = p.unavailable_reason("cpu")
    assert why and ("tensorrt" in why or "CUDA" in why)
