"""Model sources: every kind, and the ways they fail."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from accel.errors import ModelLoadError
from accel.models import ZOO, load_model


class Tiny(torch.nn.Module):
    def __init__(self, width: int = 8):
        super().__init__()
        self.fc = torch.nn.Linear(4, width)

    def forward(self, x):
        return self.fc(x).relu()


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_models_are_deterministic_and_run(name):
    a = load_model(f"zoo:{name}")
    b = load_model(f"zoo:{name}")
    assert a.kind == "torch" and a.format == "zoo"
    assert a.content_hash == b.content_hash  # fixed seed
    assert a.num_params == sum(p.numel() for p in a.module.parameters()) > 0
    assert a.size_bytes >= a.num_params * 4
    x = a.example_inputs()
    out_a, out_b = a.forward(x), b.forward(x)
    assert torch.equal(out_a, out_b)
    assert out_a.shape[0] == x[a.input_spec.names[0]].shape[0]


def test_zoo_specs_match_the_issue():
    assert str(load_model("zoo:resnet").input_spec).startswith("x:float32[batch,3,64,64]")
    t = load_model("zoo:transformer").input_spec
    assert t.inputs[0].dtype == "int64" and t.dynamic_dims() == ["batch", "seq"]
    mlp = load_model("zoo:mlp").module
    assert [m.out_features for m in mlp.modules() if isinstance(m, torch.nn.Linear)] == [
        1024,
        1024,
        10,
    ]


def test_zoo_kwargs_and_unknown_name():
    deep = load_model("zoo:transformer(num_layers=2)")
    assert len(deep.module.layers) == 2
    with pytest.raises(ModelLoadError, match=r"unknown zoo model 'resnt'.*zoo:resnet"):
        load_model("zoo:resnt")
    with pytest.raises(ModelLoadError, match="does not take"):
        load_model("zoo:mlp(bogus=1)")


def test_file_factory_and_module_factory(tmp_path, monkeypatch):
    f = tmp_path / "nets.py"
    f.write_text(
        textwrap.dedent(
            """
            import torch
            class Net(torch.nn.Module):
                def __init__(self, width=8):
                    super().__init__()
                    self.fc = torch.nn.Linear(4, width)
                def forward(self, x):
                    return self.fc(x)
            def build(width=8):
                torch.manual_seed(0)
                return Net(width)
            build.input_spec = "x:float32[batch,4]"
            def broken():
                raise RuntimeError("weights server down")
            """
        )
    )
    lm = load_model(f"{f}:build(width=3)")
    assert lm.forward(lm.example_inputs()).shape == (1, 3)
    monkeypatch.syspath_prepend(str(tmp_path))
    lm2 = load_model("nets:build", "x:float32[2,4]")
    assert lm2.forward(lm2.example_inputs()).shape == (2, 8)
    with pytest.raises(ModelLoadError, match="raised RuntimeError: weights server down"):
        load_model("nets:broken", "x:float32[1,4]")
    with pytest.raises(ModelLoadError, match="no callable 'nope'"):
        load_model("nets:nope", "x:float32[1,4]")
    with pytest.raises(ModelLoadError, match="cannot import module"):
        load_model("no_such_pkg.nets:build", "x:float32[1,4]")


def test_wrong_input_spec_is_explained():
    with pytest.raises(ModelLoadError, match="does not accept inputs of the spec"):
        load_model("zoo:mlp", "x:float32[batch,17]")
    with pytest.raises(ModelLoadError, match="bad input spec"):
        load_model("zoo:mlp", "x:float32[batch,,17]")


def test_torchscript_pt_and_ts(tmp_path):
    m = Tiny().eval()
    x = torch.randn(2, 4)
    for suffix in (".pt", ".ts"):
        p = tmp_path / f"m{suffix}"
        torch.jit.trace(m, x).save(str(p))
        lm = load_model(str(p), "x:float32[batch,4]")
        assert lm.format == "torchscript"
        torch.testing.assert_close(lm.forward({"x": x}), m(x))


def test_exported_program(tmp_path):
    m = Tiny().eval()
    x = torch.randn(2, 4)
    p = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(m, (x,)), str(p))
    lm = load_model(str(p))  # spec inferred from the program
    assert lm.input_spec.inputs[0].shape[-1] == 4
    torch.testing.assert_close(lm.forward({lm.input_spec.names[0]: x}), m(x))


def _export_onnx(module, x, path: Path, **kw):
    torch.onnx.export(
        module, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False, **kw
    )


def test_onnx_model_runs_and_infers_spec(tmp_path):
    m = Tiny().eval()
    p = tmp_path / "m.onnx"
    _export_onnx(m, torch.randn(1, 4), p, dynamic_axes={"x": {0: "batch"}})
    lm = load_model(str(p))
    assert lm.kind == "onnx" and lm.input_spec.inputs[0].shape == ("batch", 4)
    assert lm.num_params == 4 * 8 + 8
    x = torch.randn(3, 4)
    (y,) = lm.forward({"x": x})
    torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-6)


def _onnx_with_external_data(folder: Path, location: str) -> Path:
    import onnx

    m = Tiny().eval()
    p = folder / "ext.onnx"
    _export_onnx(m, torch.randn(1, 4), p)
    proto = onnx.load(str(p))
    onnx.save_model(
        proto,
        str(p),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    proto = onnx.load(str(p), load_external_data=False)
    for init in proto.graph.initializer:
        for e in init.external_data:
            if e.key == "location":
                e.value = location
    onnx.save_model(proto, str(p))
    return p


def test_onnx_external_data_inside_folder_is_fine(tmp_path):
    p = _onnx_with_external_data(tmp_path, "weights.bin")
    lm = load_model(str(p))
    assert lm.size_bytes > p.stat().st_size  # the data file counts


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "sub/../../outside.bin"])
def test_onnx_external_data_outside_folder_is_refused(tmp_path, location):
    inner = tmp_path / "model"
    inner.mkdir()
    p = _onnx_with_external_data(inner, "weights.bin")
    (tmp_path / "outside.bin").write_bytes((inner / "weights.bin").read_bytes())
    import onnx

    proto = onnx.load(str(p), load_external_data=False)
    for init in proto.graph.initializer:
        for e in init.external_data:
            if e.key == "location":
                e.value = location
    onnx.save_model(proto, str(p))
    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        load_model(str(p))


def test_onnx_external_data_symlink_leaving_folder_is_refused(tmp_path):
    inner = tmp_path / "model"
    inner.mkdir()
    p = _onnx_with_external_data(inner, "weights.bin")
    real = tmp_path / "elsewhere.bin"
    (inner / "weights.bin").rename(real)
    (inner / "weights.bin").symlink_to(real)
    with pytest.raises(ModelLoadError, match="outside"):
        load_model(str(p))


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "pwned"))


def test_pickle_that_would_run_code_is_not_loaded(tmp_path):
    marker = tmp_path / "side_effect.txt"
    p = tmp_path / "evil.pt"
    torch.save({"model": _Evil(str(marker))}, p)
    with pytest.raises(ModelLoadError, match="trust_pickle"):
        load_model(str(p), "x:float32[1,4]")
    assert not marker.exists(), "loading without trust_pickle ran code from the file"


def test_full_module_pickle_needs_explicit_trust(tmp_path, caplog):
    p = tmp_path / "whole.pt"
    torch.save(Tiny(), p)
    with pytest.raises(ModelLoadError, match="trust_pickle"):
        load_model(str(p), "x:float32[1,4]")
    lm = load_model(str(p), "x:float32[1,4]", trust_pickle=True)
    assert lm.format == "pickle"
    assert any("trust_pickle" in r.message for r in caplog.records)


def test_state_dict_plus_factory(tmp_path, monkeypatch):
    ref = load_model("zoo:mlp")
    sd = {k: v + 1.0 for k, v in ref.module.state_dict().items()}
    p = tmp_path / "w.pt"
    torch.save(sd, p)
    lm = load_model(f"zoo:mlp@{p}")
    assert lm.content_hash != ref.content_hash
    torch.testing.assert_close(lm.module.fc1.weight, ref.module.fc1.weight + 1.0)
    with pytest.raises(ModelLoadError, match="holds a state_dict"):
        load_model(str(p), "x:float32[1,1024]")
    bad = tmp_path / "bad.pt"
    torch.save({"fc1.weight": torch.zeros(2, 2)}, bad)
    with pytest.raises(ModelLoadError, match="does not fit the model"):
        load_model(f"zoo:mlp@{bad}")


@pytest.mark.parametrize("suffix", [".onnx", ".pt", ".pt2"])
def test_corrupt_and_truncated_files(tmp_path, suffix):
    p = tmp_path / f"broken{suffix}"
    p.write_bytes(b"\x08\x01garbage" * 10)
    with pytest.raises(ModelLoadError) as e:
        load_model(str(p), "x:float32[1,4]")
    assert str(p) in str(e.value)
    # truncated but non-empty real file
    good = tmp_path / f"good{suffix}"
    m = Tiny().eval()
    x = torch.randn(1, 4)
    if suffix == ".onnx":
        _export_onnx(m, x, good)
    elif suffix == ".pt":
        torch.jit.trace(m, x).save(str(good))
    else:
        torch.export.save(torch.export.export(m, (x,)), str(good))
    data = good.read_bytes()
    good.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError):
        load_model(str(good), "x:float32[1,4]")


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(tmp_path / "nope.onnx"))
    with pytest.raises(ModelLoadError, match="not found"):
        load_model(str(tmp_path / "nope"))
    empty = tmp_path / "e.pt"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty"):
        load_model(str(empty), "x:float32[1,4]")


def test_loaded_model_is_a_callable_in_spec_order():
    lm = load_model("zoo:mlp")
    x = lm.example_inputs()["x"]
    assert torch.equal(lm(x), lm.forward({"x": x}))
    assert isinstance(np.asarray(lm(x)), np.ndarray)


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the message on a machine without CUDA"
)
def test_cuda_device_without_cuda_is_explained():
    with pytest.raises(ModelLoadError, match="no CUDA GPU is available"):
        load_model("zoo:mlp", device="cuda:0")
    with pytest.raises(ModelLoadError, match="unknown device"):
        load_model("zoo:mlp", device="tpu")
