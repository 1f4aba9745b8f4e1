"""forward(*args) wrappers and keyword-only forwards through every exporter and quantizer
(torch.export, PT2E static int8, QAT, both ONNX exporters, OpenVINO conversion and its int8):
issue 32's wrappers failed with torch.export's dynamic_shapes structure check."""

from __future__ import annotations

import pytest
import torch

from accel.corpus_check import check_model

WRAPPERS = '''
import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.fc = nn.Linear(32, 32)
        self.out = nn.Linear(32, 8)

    def forward(self, ids, mask):
        h = torch.relu(self.fc(self.emb(ids))) * mask.unsqueeze(-1)
        return self.out(h).mean(1)


class VarArgs(nn.Module):
    """The common wrapper that returns the main tensor only."""

    def __init__(self):
        super().__init__()
        self.m = Encoder()

    def forward(self, *args):
        return self.m(*args)


class KeywordOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = Encoder()

    def forward(self, *, ids, mask):
        return self.m(ids, mask)


def varargs():
    torch.manual_seed(0)
    return VarArgs().eval()


def keyword_only():
    torch.manual_seed(0)
    return KeywordOnly().eval()
'''
SPEC = "ids:int64[batch,seq]{0..100}; mask:float32[batch,seq]{1..2}; batch=1..8:1; seq=2..64:8"
EXACT = ["torch_export", "export_onnx", "openvino"]
QUANTIZERS = ["quantize_static_int8", "qat", "quantize_onnx_static", "quantize_openvino"]


@pytest.fixture(scope="module")
def wrappers(tmp_path_factory):
    path = tmp_path_factory.mktemp("wrappers") / "wrappers.py"
    path.write_text(WRAPPERS)
    return path


def _cells(source, passes, tmp_path, params=None):
    cells = check_model(source, SPEC, passes, work_dir=tmp_path, time_it=False, params=params)
    return {c.pass_name: c for c in cells}


@pytest.mark.parametrize("factory", ["varargs", "keyword_only"])
def test_exporters_take_the_wrapper_and_keep_dims_dynamic(wrappers, factory, tmp_path):
    pytest.importorskip("openvino")
    # f32: the default (auto) is bf16 on CPUs with bf16 kernels, outside exact parity
    cells = _cells(f"{wrappers}:{factory}", EXACT, tmp_path, {"openvino": {"precision": "f32"}})
    assert {n: c.outcome for n, c in cells.items()} == dict.fromkeys(EXACT, "ok"), {
        n: c.reason for n, c in cells.items()
    }
    assert all(c.parity_passed for c in cells.values()), {n: c.parity for n, c in cells.items()}
    assert cells["torch_export"].details["dynamic_dims"] == {"batch": [1, 8], "seq": [2, 64]}


def test_torchscript_onnx_exporter_takes_varargs_and_refuses_keyword_only(wrappers, tmp_path):
    torchscript = {"export_onnx": {"exporter": "torchscript"}}
    cells = _cells(f"{wrappers}:varargs", ["export_onnx"], tmp_path / "v", torchscript)
    assert cells["export_onnx"].outcome == "ok", cells["export_onnx"].reason
    assert cells["export_onnx"].parity_passed
    # The TorchScript tracer calls forward positionally (verified: it fails with TypeError
    # "takes 1 positional argument but 3 were given"); the refusal says so and names the way.
    cells = _cells(f"{wrappers}:keyword_only", ["export_onnx"], tmp_path / "k", torchscript)
    assert cells["export_onnx"].outcome == "refused"
    assert "keyword-only parameters" in cells["export_onnx"].reason
    assert (
        "ids, mask" in cells["export_onnx"].reason
        and "exporter: dynamo" in cells["export_onnx"].reason
    )
    import importlib.util

    spec = importlib.util.spec_from_file_location("wrappers_mod", wrappers)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    feed = {"ids": torch.zeros(1, 4, dtype=torch.long), "mask": torch.ones(1, 4)}
    with pytest.raises(TypeError, match="positional argument"):
        torch.onnx.export(mod.keyword_only(), (feed,), str(tmp_path / "k.onnx"), dynamo=False)


@pytest.mark.parametrize("factory", ["varargs", "keyword_only"])
def test_quantizers_take_the_wrapper(wrappers, factory, tmp_path):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    cells = _cells(f"{wrappers}:{factory}", QUANTIZERS, tmp_path)
    assert {n: c.outcome for n, c in cells.items()} == dict.fromkeys(QUANTIZERS, "ok"), {
        n: c.reason for n, c in cells.items()
    }


@pytest.mark.parametrize("factory", ["varargs", "keyword_only"])
def test_static_int8_graph_takes_other_batch_and_length(wrappers, factory, tmp_path):
    from accel.models import load_model
    from accel.passes import PassContext, get_pass

    model = load_model(f"{wrappers}:{factory}", SPEC)
    cls = get_pass("quantize_static_int8")
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path, original=model)
    new = cls().apply(model, cls.parse_config({"calibration_batches": 2}), ctx)
    other = model.example_inputs(seed=3, batch=3, seq=11)
    got, ref = new.forward(other), model.forward(other)
    assert got.shape == ref.shape == (3, 8)
    assert torch.nn.functional.cosine_similarity(got.flatten(), ref.flatten(), dim=0) > 0.98


def test_static_int8_refusal_names_the_export_check_and_the_line(tmp_path):
    """A data-dependent branch: the refusal says torch.export's data-dependent guard stopped
    the export step, where, and what to do (it used to guess for every failure)."""
    from accel.errors import PassError
    from accel.models import load_model
    from accel.passes import PassContext, get_pass

    path = tmp_path / "branchy.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Branchy(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(8, 8)\n\n"
        "    def forward(self, x):\n"
        "        y = self.fc(x)\n"
        "        if y.sum() > 1e9:\n"
        "            y = y * 0\n"
        "        return y\n\n\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return Branchy().eval()\n"
    )
    model = load_model(f"{path}:build", "x:float32[batch,8]; batch=1..8:1")
    cls = get_pass("quantize_static_int8")
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path, original=model)
    with pytest.raises(PassError) as e:
        cls().apply(model, cls.parse_config({"calibration_batches": 1}), ctx)
    msg = str(e.value)
    assert "while exporting the model with torch.export" in msg
    assert "data-dependent guard" in msg and "branchy.py:12" in msg
    assert "GuardOnDataDependentSymNode" in msg and "torch.cond" in msg


HF_WRAPPERS = '''
import torch
from transformers import BertConfig, BertModel, ResNetConfig, ResNetForImageClassification


class Main(torch.nn.Module):
    """forward(*args) returning the main tensor: the wrapper of issue 32's searches."""

    def __init__(self, m, field):
        super().__init__()
        self.m, self.field = m, field

    def forward(self, *args):
        return getattr(self.m(*args), self.field)


def bert():
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64)
    return Main(BertModel(cfg), "last_hidden_state").eval()


def resnet():
    torch.manual_seed(0)
    cfg = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=4)
    return Main(ResNetForImageClassification(cfg), "logits").eval()
'''


@pytest.mark.parametrize(
    ("factory", "spec"),
    [
        ("bert", "input_ids:int64[batch,seq]{0..200}; batch=1..8:1; seq=2..64:8"),
        ("resnet", "pixel_values:float32[batch,3,32,32]; batch=1..8:1"),
    ],
)
def test_issue_32_models_in_small_configs_quantize_static_int8(factory, spec, tmp_path):
    """Both real models of issue 32 (a BERT encoder and transformers' ResNet, wrapped as
    forward(*args)) failed every PT2E trial with torch.export's structure check."""
    pytest.importorskip("transformers")
    path = tmp_path / "hf_wrappers.py"
    path.write_text(HF_WRAPPERS)
    passes = ["quantize_static_int8", "torch_export", "export_onnx"]
    cells = check_model(f"{path}:{factory}", spec, passes, work_dir=tmp_path, time_it=False)
    assert {c.pass_name: c.outcome for c in cells} == dict.fromkeys(passes, "ok"), [
        c.reason for c in cells
    ]


class _DropsPooler(torch.nn.Module):
    """Computes a Linear -> Tanh it does not return (BERT's pooler behind a wrapper that
    returns the hidden states): X86InductorQuantizer's linear-unary annotation took the
    output-less pattern and failed with IndexError in partition.output_nodes[0]."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.pool = torch.nn.Linear(8, 8)
        self.act = torch.nn.Tanh()

    def forward(self, x):
        h = self.fc(x)
        self.act(self.pool(h[:, 0]))  # computed, never returned
        return h


def test_static_int8_ignores_what_the_forward_computes_but_drops():
    from accel.passes._torch_quant_helpers import pt2e_static_quantize

    torch.manual_seed(0)
    model = _DropsPooler().eval()
    batches = [{"x": torch.randn(2, 4, 8)} for _ in range(2)]
    q = pt2e_static_quantize(model, batches, example=batches[0])
    got = q(torch.randn(3, 4, 8))
    assert got.shape == (3, 4, 8)
    assert not any("tanh" in str(n.target) for n in q.graph.nodes)
