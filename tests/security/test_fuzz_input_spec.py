"""Issue 15, reproductions 8 and 9: the input spec parser and sizes before allocation.

Every malformed spec is an InputSpecError with a caret; parsing is linear (a long dotted
range used to backtrack for minutes); sampled inputs are sized before anything is allocated."""

from __future__ import annotations

import os
import threading
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.errors import InputSpecError, ModelLoadError
from accel.models import InputSpec, load_model

FUZZ = settings(
    max_examples=int(os.environ.get("ACCEL_FUZZ_EXAMPLES", 300)),
    derandomize=True,
    deadline=timedelta(seconds=2),
    database=None,
)


@pytest.mark.parametrize(
    "text",
    [
        "x:float32[4]{1.2.3..5}",
        "x:float32[4]{...5}",
        "x:float32[4]{..}",
        "x:float32[4]{1..2..3}",
        "x:int64[4]{0.2..0.9}",
        "x:uint8[4]{-5..300}",
        "x:int64[4]{0..1e20}",
        "x:float16[4]{0..1e6}",
        "x:float32[4]{0..1e400}",
        "x:bool[4]{0..2}",
        "x:float32[" + "9" * 5000 + "]",
        "x:float32[batch]; batch=" + "9" * 5000,
        "x:float32[batch]; batch=0",
        "x:float32[batch]; batch=0..4:2",
        "x:float32[4]{1..2",
        "x:float32[4] junk",
        "x:float32[4",
        "x:float32[batch]; batch=1..2..3",
    ],
)
def test_bad_specs_are_input_spec_errors_with_a_caret(text):
    with pytest.raises(InputSpecError) as err:
        InputSpec.parse(text)
    assert err.value.args[0].splitlines()[-1].strip() == "^"


def _finishes(fn, seconds: float = 30.0) -> bool:
    """Hang guard, not a speed claim: the old regex took minutes on these inputs."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive()


@pytest.mark.parametrize(
    "text",
    [
        "x:float32[4]{" + "." * 9000 + "}",
        "x:float32[4]{1" + "." * 9000 + "x}",
        "x:float32[4]{" + "1." * 4900 + "}",
        "x" + "-" * 9990 + ":float32[4]",
    ],
)
def test_long_dotted_ranges_parse_in_linear_time(text):
    def parse():
        with pytest.raises(InputSpecError):
            InputSpec.parse(text)

    assert _finishes(parse)


def test_good_specs_still_parse():
    s = InputSpec.parse("ids:int64[batch,seq]{0..30522}; batch=1..32:8; seq=16")
    assert s.inputs[0].high == 30522 and s.dims["batch"].default == 8
    f = InputSpec.parse("x:float32[2,3]{-1.5..2.5e1}")
    assert (f.inputs[0].low, f.inputs[0].high) == (-1.5, 25.0)
    u = InputSpec.parse("x:uint8[4]{0..256}")
    assert int(u.sample()["x"].max()) <= 255


_spec_chars = "xyab_:;=.,-0123456789[]{}() e\t" + "float32int64uint8bool"


@FUZZ
@given(text=st.text(alphabet=_spec_chars, max_size=80))
def test_fuzz_specs_only_raise_input_spec_errors(text):
    try:
        spec = InputSpec.parse(text)
    except InputSpecError as exc:
        assert "^" in str(exc) or "empty input spec" in str(exc)
        return
    # What parses round-trips through its compact form.
    assert str(InputSpec.parse(str(spec))) == str(spec)


@FUZZ
@given(
    dtype=st.sampled_from(["float32", "float16", "int64", "int8", "uint8", "bool"]),
    low=st.one_of(st.integers(-(10**25), 10**25), st.floats(allow_nan=False)),
    high=st.one_of(st.integers(-(10**25), 10**25), st.floats(allow_nan=False)),
)
def test_fuzz_value_ranges_that_parse_can_be_sampled(dtype, low, high):
    try:
        spec = InputSpec.parse(f"x:{dtype}[3]{{{low}..{high}}}")
    except InputSpecError:
        return
    x = spec.sample()["x"]  # a range that parses must be sample-able
    assert x.shape == (3,)


def test_huge_inputs_are_refused_before_allocation():
    spec = InputSpec.parse("x:float32[100000,100000,1000]")
    with pytest.raises(InputSpecError, match=r"would take 36\.4 TiB"):
        spec.sample()
    spec = InputSpec.parse("x:float32[batch,1000]; batch=1..1000000000:1")
    with pytest.raises(InputSpecError, match="batch"):
        spec.sample(dims={"batch": 10**9})
    assert spec.nbytes({"batch": 2}) == 8000


def test_size_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACCEL_MAX_INPUT_BYTES", "1000")
    spec = InputSpec.parse("x:float32[batch,100]")
    spec.sample(dims={"batch": 2})  # 800 bytes
    with pytest.raises(InputSpecError, match="1000 B"):
        spec.sample(dims={"batch": 3})


def test_load_model_reports_a_too_large_spec():
    with pytest.raises(ModelLoadError, match="memory available"):
        load_model("zoo:mlp", "x:float32[100000,100000,1000]")


def test_unknown_and_bad_dims_are_refused_when_sampling():
    spec = InputSpec.parse("x:float32[batch,4]")
    with pytest.raises(InputSpecError, match="'bacth'"):
        spec.sample(dims={"bacth": 2})
    for bad in (0, -3, 10**15, 2.5, True):
        with pytest.raises(InputSpecError):
            spec.sample(dims={"batch": bad})


def test_recipe_run_with_too_large_inputs_fails_cleanly(tmp_path, monkeypatch):
    from accel.runner import run_recipe

    monkeypatch.setenv("ACCEL_MAX_INPUT_BYTES", str(1 << 20))  # stands for "the machine's RAM"
    res = run_recipe(
        {
            "model": {"source": "zoo:mlp", "input_spec": "x:float32[batch,1024]"},
            "benchmark": {"dims": {"batch": 1000}, "iters": 1, "warmup": 0},
            "steps": [{"pass": "bf16"}],
        },
        out_dir=tmp_path,
    )
    assert res.status == "failed"
    assert "3.9 MiB" in (res.error or "") and "memory available" in (res.error or "")


@pytest.mark.parametrize(
    ("spec", "per_element"),
    [
        ("x:bool[10,10]", 9),  # drawn as int64, then cast
        ("x:float16[10,10]", 6),  # drawn as float32, then cast
        ("x:float16[10,10]{0..1}", 8),  # two float32 tensors while scaled
        ("x:float32[10,10]", 4),
        ("x:float64[10,10]", 12),
        ("x:int8[10,10]", 1),
    ],
)
def test_the_size_check_counts_the_temporaries_of_sampling(spec, per_element):
    from accel.models.inputs import InputSpec

    parsed = InputSpec.parse(spec)
    assert parsed.peak_bytes() == 100 * per_element
    assert parsed.check_size(limit=100 * per_element) == 100 * per_element
    with pytest.raises(InputSpecError, match="while they are drawn|would take"):
        parsed.check_size(limit=100 * per_element - 1)
