"""Model-kind handlers (accel.backends): every handler on the zoo models — load, forward,
stats, graph, profile, per-layer taps, save/load round trip — and availability."""

from __future__ import annotations

import pytest
import torch

from accel.backends import KINDS, backend_for_file, backend_of, get_backend, reach_hint
from accel.bench import benchmark
from accel.errors import AccelError, ModelLoadError
from accel.models import load_model
from accel.parity import Tolerances, compare
from accel.passes import PassContext, get_pass

SOURCES = {
    "mlp": ("zoo:mlp(hidden=128)", None),
    "resnet": ("zoo:resnet(widths=(8, 16, 32), blocks=1)", None),
    "transformer": (
        "zoo:transformer(hidden=64, num_layers=2, ffn=128, vocab_size=500)",
        "input_ids:int64[batch,seq]{0..500}; batch=1..16:2; seq=1..64:16",
    ),
    "lstm": (
        "zoo:lstm(vocab_size=500, embed=32, hidden=64)",
        "tokens:int64[batch,seq]{0..500}; batch=1..16:2; seq=1..64:16",
    ),
}


def _first(out):
    return out[0] if isinstance(out, tuple | list) else out


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


def test_registry_knows_every_kind_and_file_type():
    assert KINDS == ("torch", "onnx", "openvino", "tensorrt")
    assert [get_backend(k).kind for k in KINDS] == list(KINDS)
    assert backend_for_file("m.onnx").kind == "onnx"
    assert backend_for_file("m.xml").kind == "openvino"
    assert backend_for_file("m.pt2").kind == "torch"
    assert backend_for_file("m.py") is None
    with pytest.raises(AccelError, match="unknown model kind 'tflite'"):
        get_backend("tflite")


def test_reach_hints_name_the_step_to_add_or_move():
    assert reach_hint(("onnx",), "torch") == " Add an export_onnx step before it."
    assert reach_hint(("openvino",), "onnx") == " Add an openvino step before it."
    assert reach_hint(("torch",), "onnx") == " Move this step before the export_onnx step."
    assert reach_hint(("torch",), "openvino") == " Move this step before the openvino step."
    assert reach_hint(("torch", "onnx"), "onnx") == ""


@pytest.mark.parametrize("name", list(SOURCES))
def test_torch_handler(torch_models, name):
    m = torch_models[name]
    b = backend_of(m)
    assert b.kind == "torch" and m.num_params > 0 and len(m.content_hash) == 64
    inputs = m.example_inputs()
    out = _first(m.forward(inputs))
    assert torch.isfinite(out).all()
    g = b.graph(m, inputs)
    assert len(g.nodes) > 3 and g.inputs and g.outputs
    prof = b.profile(
        m, inputs, iters=2, warmup=1, ops=False, trace_path=None, device="cpu", threads=1,
        progress=None, cancel=None,
    )  # fmt: skip
    assert prof.kind == "torch" and prof.rows and prof.total_ms > 0
    taps, _ = b.layer_outputs(m, inputs)
    assert taps and all(isinstance(k, str) for k in taps)


@pytest.mark.parametrize("name", ["mlp", "resnet"])
def test_onnx_handler(torch_models, onnx_models, name, tmp_path):
    m, ref = onnx_models[name], torch_models[name]
    b = backend_of(m)
    assert b.kind == "onnx" and b.model_file(m) == m.onnx_path
    inputs = ref.example_inputs()
    rep = compare(ref.forward(inputs), m.forward(inputs), Tolerances(rtol=1e-3, atol=1e-4))
    assert rep.passed, rep.first_failure
    g = b.graph(m, None)
    assert any(n.module_path for n in g.nodes)
    prof = b.profile(
        m, inputs, iters=2, warmup=1, ops=True, trace_path=None, device="cpu", threads=1,
        progress=None, cancel=None,
    )  # fmt: skip
    assert prof.kind == "onnx" and len(prof.rows) > 1
    taps, _ = b.layer_outputs(m, inputs)
    assert taps
    saved = b.save(m, tmp_path / "copy")
    again = load_model(str(saved))
    assert again.kind == "onnx" and again.content_hash == m.content_hash
    assert torch.equal(_first(again.forward(inputs)), _first(m.forward(inputs)))


@pytest.mark.parametrize("name", list(SOURCES))
def test_openvino_handler(torch_models, ov_models, name, tmp_path):
    ref, m = torch_models[name], ov_models[name]
    b = backend_of(m)
    assert b.kind == "openvino" and m.ir_path.suffix == ".xml" and m.module is None
    assert m.size_bytes > 0 and m.num_params > 0.9 * ref.num_params
    inputs = ref.example_inputs()
    rep = compare(ref.forward(inputs), m.forward(inputs), Tolerances(rtol=1e-3, atol=1e-4))
    assert rep.passed, rep.first_failure
    # other sizes of the symbolic dims run too (the IR keeps them dynamic)
    other = ref.example_inputs(seed=3, batch=3)
    rep = compare(ref.forward(other), m.forward(other), Tolerances(rtol=1e-3, atol=1e-4))
    assert rep.passed, rep.first_failure
    g = b.graph(m, None)
    assert g.inputs and g.outputs and len(g.nodes) > 3
    assert sum(n.num_params for n in g.nodes) > 0.9 * ref.num_params
    paths = {n.module_path for n in g.nodes if n.module_path}
    assert paths and paths <= {p for p, _ in ref.module.named_modules()}
    prof = b.profile(
        m, inputs, iters=3, warmup=1, ops=True, trace_path=None, device="cpu", threads=1,
        progress=None, cancel=None,
    )  # fmt: skip
    assert prof.kind == "openvino" and len(prof.rows) > 1 and prof.ops
    assert prof.timing == "openvino_perf_counters" and prof.plain_forward_ms > 0
    assert abs(sum(r.share for r in prof.rows) - 1.0) < 1e-6
    # per-layer taps line up with the torch model's modules
    taps, _ = b.layer_outputs(m, inputs)
    ref_taps, _ = backend_of(ref).layer_outputs(ref, inputs)
    common = [p for p in taps if p in ref_taps and taps[p].shape == ref_taps[p].shape]
    assert len(common) >= 2
    for p in common:
        assert torch.allclose(taps[p].float(), ref_taps[p].float(), rtol=1e-3, atol=1e-3), p
    # save / load round trip
    saved = b.save(m, tmp_path / "copy")
    again = load_model(str(saved))
    assert again.kind == "openvino" and again.input_spec.names == ref.input_spec.names
    assert torch.equal(_first(again.forward(inputs)), _first(m.forward(inputs)))
    res = benchmark(again, inputs, warmup=1, iters=3, threads=1)
    assert res.runner == "openvino" and res.median_ms > 0


def test_ir_without_bin_is_a_clear_error(ov_models, tmp_path):
    xml = tmp_path / "lonely.xml"
    xml.write_bytes(ov_models["mlp"].ir_path.read_bytes())
    with pytest.raises(ModelLoadError, match=r"no weights file lonely\.bin"):
        load_model(str(xml))


def test_tensorrt_is_unavailable_here_with_the_reason():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    reason = get_backend("tensorrt").unavailable_reason("cpu")
    assert reason and ("tensorrt" in reason or "GPU" in reason or "CUDA" in reason)
    p = get_pass("tensorrt")
    why = p.unavailable_reason("cpu")
    assert why and ("tensorrt" in why or "CUDA" in why)
