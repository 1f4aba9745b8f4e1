"""InputSpec: parsing, errors that point at the bad part, deterministic samples, real data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accel.errors import DataError, InputSpecError
from accel.models.inputs import Dim, InputSpec


def test_parse_compact_forms():
    s = InputSpec.parse("x:float32[batch,3,224,224]")
    assert s.names == ["x"] and s.inputs[0].shape == ("batch", 3, 224, 224)
    assert s.dims["batch"] == Dim(1, 1, 64)
    two = InputSpec.parse("input_ids:int64[1,128]; mask:int64[1,128]")
    assert two.names == ["input_ids", "mask"] and two.dynamic_dims() == []
    tok = InputSpec.parse("ids:int64[batch,seq]{0..30522}; batch=1..32:8; seq=16")
    assert tok.inputs[0].low == 0 and tok.inputs[0].high == 30522
    assert tok.dims["batch"] == Dim(8, 1, 32) and tok.dims["seq"].default == 16


@pytest.mark.parametrize(
    ("text", "fragment", "caret_col"),
    [
        ("x:float32[batch,3,,224]", "bad dimension ''", 9),
        ("x:flot32[4]", "unknown dtype 'flot32'", 2),
        ("x float32[4]", "cannot read 'x float32[4]'", 0),
        ("x:float32[4]; y:int64[2]{5..1}", "empty value range", 14),
        ("x:float32[batch]; batch=1..8:20", "outside its range", 18),
        ("", "empty input spec", None),
        ("x:float32[2]; x:float32[3]", "unique", None),
    ],
)
def test_bad_strings_point_at_the_bad_part(text, fragment, caret_col):
    with pytest.raises(InputSpecError) as e:
        InputSpec.parse(text)
    msg = str(e.value)
    assert fragment in msg
    if caret_col is not None:
        caret_line = msg.splitlines()[-1]
        assert caret_line.index("^") - 2 == caret_col


def test_roundtrip_string_and_dict():
    s = InputSpec.parse("ids:int64[batch,seq]{0..100}; batch=1..32:8; seq=1..64:16")
    assert InputSpec.parse(str(s)) == s
    assert InputSpec.from_dict(s.to_dict()) == s


def test_samples_are_deterministic_and_respect_ranges():
    s = InputSpec.parse("ids:int64[batch,seq]{5..9}; x:float32[batch,4]; batch=1..8:3; seq=7")
    a, b, c = s.sample(seed=1), s.sample(seed=1), s.sample(seed=2)
    assert torch.equal(a["ids"], b["ids"]) and torch.equal(a["x"], b["x"])
    assert not torch.equal(a["x"], c["x"])
    assert a["ids"].shape == (3, 7) and a["ids"].dtype == torch.int64
    assert int(a["ids"].min()) >= 5 and int(a["ids"].max()) <= 8
    assert s.sample(dims={"batch": 5})["x"].shape == (5, 4)


def test_validate_and_load_real_inputs(tmp_path):
    s = InputSpec.parse("x:float32[batch,4]; batch=1..16:2")
    np.savez(tmp_path / "ok.npz", x=np.ones((3, 4), np.float32))
    assert s.load_inputs(tmp_path / "ok.npz")["x"].shape == (3, 4)
    torch.save({"x": torch.zeros(2, 4)}, tmp_path / "ok.pt")
    assert s.load_inputs(tmp_path / "ok.pt")["x"].sum() == 0
    np.savez(tmp_path / "shape.npz", x=np.ones((3, 5), np.float32))
    with pytest.raises(InputSpecError, match=r"got shape \[3, 5\], expected x:float32\[batch,4\]"):
        s.load_inputs(tmp_path / "shape.npz")
    np.savez(tmp_path / "dtype.npz", x=np.ones((3, 4), np.int64))
    with pytest.raises(InputSpecError, match="got dtype int64, expected float32"):
        s.load_inputs(tmp_path / "dtype.npz")
    np.savez(tmp_path / "range.npz", x=np.ones((40, 4), np.float32))
    with pytest.raises(InputSpecError, match="outside its range 1..16"):
        s.load_inputs(tmp_path / "range.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(DataError):
        s.load_inputs(tmp_path / "junk.npz")


@given(
    dims=st.lists(
        st.one_of(st.integers(1, 64), st.sampled_from(["batch", "seq", "h"])),
        min_size=1,
        max_size=4,
    ),
    dtype=st.sampled_from(["float32", "float16", "int64", "int32", "bool"]),
)
def test_parse_str_roundtrip_property(dims, dtype):
    text = f"t:{dtype}[{','.join(map(str, dims))}]"
    s = InputSpec.parse(text)
    assert InputSpec.parse(str(s)) == s
    x = s.sample()["t"]
    assert tuple(x.shape) == s.concrete_shape(s.inputs[0])
