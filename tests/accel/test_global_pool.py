"""An AvgPool2d whose window covers the whole feature map (Hugging Face EfficientNet's
``AvgPool2d(1280, ceil_mode=True)``) is a global mean in PyTorch; OpenVINO's shape inference
rejected it inside NNCF's calibration and ONNX Runtime's static int8 graph gave cosine 0.
The converters now see a plain mean (accel.passes._global_pool)."""

from __future__ import annotations

import pytest
import torch

from accel.passes._global_pool import covers_input, exact_global_pools
from accel.search import SearchConfig
from accel.search.engine import trial_spec
from accel.search.trial import run_trial

MODEL = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.SiLU()
        self.pooler = nn.AvgPool2d(1280, ceil_mode=True)  # as transformers' EfficientNet
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        y = self.pooler(self.act(self.bn(self.conv(x))))
        return self.fc(y.flatten(1))

def make():
    torch.manual_seed(0)
    return Net().eval()
"""
SPEC = "x:float32[batch,3,16,16]; batch=1..8:1"


def test_the_oversized_pool_is_a_global_mean_and_is_restored():
    pool = torch.nn.AvgPool2d(1280, ceil_mode=True)
    x = torch.randn(2, 5, 7, 7)
    assert torch.allclose(pool(x), x.mean(dim=(-2, -1), keepdim=True), atol=1e-6)
    assert covers_input(pool, 7, 7)
    assert not covers_input(torch.nn.AvgPool2d(3), 7, 7)  # a real sliding window stays
    assert not covers_input(torch.nn.AvgPool2d(8, padding=1, ceil_mode=True), 7, 7)
    net = torch.nn.Sequential(torch.nn.Conv2d(5, 5, 1), torch.nn.AvgPool2d(3, stride=1), pool)
    before = net(x)
    with exact_global_pools(net, lambda: net(x)) as swapped:
        assert swapped == ["2"]
        assert not isinstance(net[2], torch.nn.AvgPool2d)
        assert isinstance(net[1], torch.nn.AvgPool2d)
        assert torch.allclose(net(x), before, atol=1e-6)
    assert net[2] is pool  # restored


@pytest.mark.parametrize(
    "steps",
    [
        ["export_onnx", "quantize_onnx_static", "onnxruntime"],
        ["fold_batchnorm", "openvino", "quantize_openvino"],
    ],
    ids=["ort-static", "openvino-nncf"],
)
def test_int8_chains_pass_their_gate_on_an_efficientnet_style_pooler(tmp_path, steps):
    from accel.passes import pass_names

    if any(s not in pass_names() for s in steps):
        pytest.skip(f"needs {', '.join(steps)}")
    src = tmp_path / "net.py"
    src.write_text(MODEL)
    cfg = SearchConfig(model=f"{src}:make", input_spec=SPEC, out_dir=str(tmp_path / "out"))
    spec = trial_spec(cfg, 1, [{"pass": p, "params": {}} for p in steps])
    spec["cache"] = None
    spec["gates"]["max_cosine_drop"] = 0.01
    spec["benchmark"]["skip"] = True
    out = run_trial(spec, lambda e: None, lambda: False)
    assert out["status"] == "succeeded", out.get("error")
    assert out["trial_status"] == "ok", out["gate"]
    assert out["metrics"]["cosine_drop"] < 0.01
