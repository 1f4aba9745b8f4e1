"""The OpenVINO runtime: forward parity with torch, graph, profile, taps, save/load, timing,
and an IR that reads nothing outside its folder."""

from __future__ import annotations

import pytest
import torch
from runtime_models import SOURCES

from accel.errors import ModelLoadError
from accel.models import load_model
from accel.models.runtime import ProfileRequest, runtime_of
from accel.parity import Tolerances, compare
from accel.timing.single import benchmark


def _first(out):
    return out[0] if isinstance(out, tuple | list) else out


@pytest.mark.parametrize("name", list(SOURCES))
def test_openvino_runtime(torch_models, ov_models, name, tmp_path):
    ref, m = torch_models[name], ov_models[name]
    b = runtime_of(m)
    assert b.kind == "openvino" and m.runtime_file.suffix == ".xml" and m.module is None
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
    prof = b.profile(m, inputs, ProfileRequest(iters=3, warmup=1, ops=True, threads=1))
    assert prof.kind == "openvino" and len(prof.rows) > 1 and prof.ops
    assert prof.timing == "openvino_perf_counters" and prof.plain_forward_ms > 0
    assert abs(sum(r.share for r in prof.rows) - 1.0) < 1e-6
    # per-layer taps line up with the torch model's modules
    taps, _ = b.layer_outputs(m, inputs)
    ref_taps, _ = runtime_of(ref).layer_outputs(ref, inputs)
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
    xml.write_bytes(ov_models["mlp"].runtime_file.read_bytes())
    with pytest.raises(ModelLoadError, match=r"no weights file lonely\.bin"):
        load_model(str(xml))


def _ir_copy(ov_models, folder):
    folder.mkdir(parents=True, exist_ok=True)
    src = ov_models["mlp"].runtime_file
    xml = folder / "model.xml"
    xml.write_bytes(src.read_bytes())
    return xml, src.with_suffix(".bin")


def test_a_bin_linked_outside_the_folder_is_refused(ov_models, tmp_path):
    """Issue 29, route 9: the .bin is a link to a file elsewhere (a secret); the IR is
    refused before OpenVINO reads a byte of it, whatever loads it."""
    xml, real_bin = _ir_copy(ov_models, tmp_path / "model")
    secret = tmp_path / "elsewhere" / "secret.bin"
    secret.parent.mkdir()
    secret.write_bytes(real_bin.read_bytes())  # weights-shaped, so OpenVINO would read it
    xml.with_suffix(".bin").symlink_to(secret)
    with pytest.raises(ModelLoadError, match="outside the model's folder") as err:
        load_model(str(xml))
    assert str(secret) in str(err.value) and "Copy the real .bin" in str(err.value)
    from accel.runtimes.openvino.ir import read_ir

    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        read_ir(xml)  # the runtime's every read (save, compile, graph, taps, serve)


def test_a_bin_linked_inside_the_folder_loads(ov_models, tmp_path):
    xml, real_bin = _ir_copy(ov_models, tmp_path / "model")
    kept = xml.parent / "weights" / "v1.bin"
    kept.parent.mkdir()
    kept.write_bytes(real_bin.read_bytes())
    xml.with_suffix(".bin").symlink_to(kept)
    m = load_model(str(xml))
    assert m.kind == "openvino" and m.size_bytes == xml.stat().st_size + kept.stat().st_size
    ref = ov_models["mlp"]
    inputs = ref.example_inputs()
    assert torch.equal(_first(m.forward(inputs)), _first(ref.forward(inputs)))


def test_a_dangling_bin_link_says_the_file_is_missing(ov_models, tmp_path):
    xml, _ = _ir_copy(ov_models, tmp_path / "model")
    xml.with_suffix(".bin").symlink_to(xml.parent / "gone.bin")
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(xml))
