"""Shared models for the runtime tests: the zoo models as torch, ONNX and OpenVINO."""

from __future__ import annotations

import pytest
from runtime_models import SOURCES

from accel.models import load_model
from accel.passes import PassContext, get_pass


@pytest.fixture(scope="module")
def torch_models():
    return {k: load_model(src, spec) for k, (src, spec) in SOURCES.items()}


@pytest.fixture(scope="module")
def onnx_models(torch_models, tmp_path_factory):
    out = {}
    for name in ("mlp", "resnet"):
        m = torch_models[name]
        d = tmp_path_factory.mktemp(f"onnx-{name}")
        ctx = PassContext(inputs=m.example_inputs(), work_dir=d, original=m)
        p = get_pass("export_onnx")
        out[name] = p().apply(m, p.parse_config({"exporter": "torchscript"}), ctx)
    return out


@pytest.fixture(scope="module")
def ov_models(torch_models, tmp_path_factory):
    out = {}
    for name, m in torch_models.items():
        d = tmp_path_factory.mktemp(f"ov-{name}")
        ctx = PassContext(inputs=m.example_inputs(), work_dir=d, original=m)
        p = get_pass("openvino")
        # f32: the default (auto) runs bf16 on CPUs with bf16 kernels, outside these tolerances
        out[name] = p().apply(m, p.parse_config({"precision": "f32"}), ctx)
    return out
