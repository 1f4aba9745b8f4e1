"""Tests for accel.parity: metric values, nested structures, verdicts, JSON round-trips."""

from __future__ import annotations

import json
import math
from collections import OrderedDict, namedtuple
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from accel.parity import REL_EPS, OutputParity, ParityReport, Tolerances, compare

# ----------------------------------------------------------------------------- metrics


def test_one_element_perturbation_metrics():
    ref = torch.zeros(2, 3, 4)
    ref[0, 0, 0] = 2.0
    cand = ref.clone()
    cand[1, 2, 3] += 0.5
    report = compare(ref, cand)
    o = report["out"]
    assert o.max_abs == pytest.approx(0.5)
    assert o.mean_abs == pytest.approx(0.5 / 24)
    assert o.max_rel == pytest.approx(0.5 / REL_EPS)  # reference is 0 there
    assert o.numel == 24
    assert o.allclose is False
    assert not o.passed and not report.passed
    assert report.first_failure.startswith("out: not allclose: max_abs 0.5")
    # ref = e0 * 2, cand = 2 e0 + 0.5 e1 -> cos = 4 / (2 * sqrt(4.25))
    assert o.cosine == pytest.approx(4 / (2 * math.sqrt(4.25)))


def test_max_rel_uses_reference_as_denominator():
    ref = np.array([2.0, 4.0])
    cand = np.array([3.0, 4.0])
    assert compare(ref, cand)["out"].max_rel == pytest.approx(0.5)
    assert compare(cand, ref)["out"].max_rel == pytest.approx(1 / 3)


def test_cosine_of_negation_is_minus_one():
    v = torch.tensor([1.0, -2.0, 3.0, 0.5])
    o = compare(v, -v)["out"]
    assert o.cosine == pytest.approx(-1.0)
    assert o.max_abs == pytest.approx(6.0)


def test_cosine_of_zero_vectors():
    z = np.zeros(5)
    assert compare(z, z)["out"].cosine == 1.0
    assert compare(z, np.ones(5))["out"].cosine == 0.0


def test_top1_agreement_with_one_of_four_rows_flipped():
    logits = torch.tensor(
        [
            [5.0, 1.0, 0.0],
            [0.0, 4.0, 1.0],
            [1.0, 0.0, 3.0],
            [2.0, 1.0, 0.0],
        ]
    )
    cand = logits.clone()
    cand[3] = torch.tensor([1.0, 2.0, 0.0])  # argmax 0 -> 1
    o = compare(logits, cand)["out"]
    assert o.top1 == pytest.approx(0.75)
    assert o.k == 3  # fewer classes than 5
    assert o.topk == pytest.approx(1.0)  # with 3 classes the ref top-1 is always in the top 3


def test_topk_agreement_counts_reference_top1_in_candidate_topk():
    ref = torch.zeros(2, 10)
    ref[0, 0] = 10.0
    ref[1, 0] = 10.0
    cand = torch.zeros(2, 10)
    cand[0, 1:6] = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0])  # class 0 outside top 5
    cand[0, 0] = 0.5
    cand[1, 1:5] = torch.tensor([5.0, 4.0, 3.0, 2.0])  # class 0 fifth
    cand[1, 0] = 1.0
    o = compare(ref, cand)["out"]
    assert o.k == 5
    assert o.top1 == 0.0
    assert o.topk == pytest.approx(0.5)


def test_logits_detection():
    assert compare(torch.randn(8), torch.randn(8))["out"].top1 is None  # 1-D
    assert compare(torch.randn(4, 1), torch.randn(4, 1))["out"].top1 is None  # 1 class
    assert (
        compare(torch.ones(4, 3, dtype=torch.int64), torch.ones(4, 3, dtype=torch.int64))[
            "out"
        ].top1
        is None
    )  # not floating
    assert compare(torch.randn(2, 3, 7), torch.randn(2, 3, 7))["out"].k == 5


def test_fp16_and_bf16_candidates_are_cast_up():
    torch.manual_seed(0)
    ref = torch.randn(16, 32)
    for dtype in (torch.float16, torch.bfloat16):
        cand = ref.to(dtype)
        o = compare(ref, cand, Tolerances(rtol=1e-2, atol=1e-2))["out"]
        assert o.passed, o.reason
        assert o.cand_dtype == str(dtype).removeprefix("torch.")
        assert o.ref_dtype == "float32"
        expected = (cand.double() - ref.double()).abs().max().item()
        assert o.max_abs == pytest.approx(expected)
        assert o.max_abs > 0


# ----------------------------------------------------------------------------- verdicts


def test_allclose_rule_is_asymmetric_around_reference():
    tol = Tolerances(rtol=0.1, atol=0.0)
    # |cand - ref| <= rtol * |ref|: 1.0 vs 1.1 passes (0.1 <= 0.11), reversed fails (0.1 > 0.1*1)
    assert compare(np.array([1.1]), np.array([1.0]), tol).passed
    assert compare(np.array([1.0]), np.array([1.1 + 1e-9]), tol).passed is False


def test_cosine_gate_passes_when_allclose_fails():
    ref = torch.linspace(1, 2, 100)
    cand = ref * 1.01  # rel error 1%: not allclose at rtol 1e-3, cosine 1.0
    assert not compare(ref, cand).passed
    assert compare(ref, cand, Tolerances(min_cosine=0.999)).passed


def test_cosine_gate_failure_message():
    ref = torch.tensor([1.0, 0.0])
    cand = torch.tensor([1.0, 0.5])
    report = compare({"logits": ref}, {"logits": cand}, Tolerances(min_cosine=0.999))
    cos = 1 / math.sqrt(1.25)
    assert report.first_failure == f"out.logits: cosine {cos:.6g} < 0.999"
    assert not report.passed


def test_top1_gate_alone_applies_to_logits_only():
    logits = torch.tensor([[3.0, 1.0], [1.0, 3.0], [3.0, 1.0], [1.0, 3.0]])
    cand = logits + 0.3  # same argmax everywhere, not allclose
    tol = Tolerances(min_top1=0.99)
    assert compare(logits, cand, tol).passed
    flipped = cand.clone()
    flipped[0] = torch.tensor([1.0, 3.0])
    report = compare(logits, flipped, tol)
    assert report.first_failure == "out: top1 0.75 < 0.99"
    # A 1-D output is not logits: the top-1 gate does not apply, allclose decides.
    assert not compare(torch.ones(3), torch.ones(3) + 0.3, tol).passed


def test_cosine_and_top1_gates_both_required():
    logits = torch.tensor([[3.0, 1.0], [1.0, 3.0]])
    cand = logits.clone()
    cand[0] = torch.tensor([1.0, 3.0])
    tol = Tolerances(min_cosine=0.0, min_top1=0.9)  # cosine gate met, top-1 not
    assert compare(logits, cand, tol).first_failure == "out: top1 0.5 < 0.9"


def test_max_abs_is_a_hard_ceiling():
    ref = torch.full((4,), 1000.0)
    cand = ref + 0.5  # allclose at rtol 1e-3 (0.5 <= 1.0001)
    assert compare(ref, cand).passed
    report = compare(ref, cand, Tolerances(max_abs=0.1))
    assert not report.passed
    assert report.first_failure == "out: max_abs 0.5 > 0.1"


def test_nan_in_candidate_fails_even_with_loose_gates():
    ref = torch.ones(2, 3)
    cand = ref.clone()
    cand[1, 1] = float("nan")
    cand[0, 2] = float("inf")
    tol = Tolerances(rtol=10, atol=10, min_cosine=-1.0)
    o = compare(ref, cand, tol)["out"]
    assert not o.passed
    assert o.nan_cand == 1 and o.inf_cand == 1
    assert o.nan_ref == 0 and o.inf_ref == 0
    assert "2 non-finite value(s) on one side only" in o.reason
    # metrics cover finite positions only
    assert o.max_abs == 0.0


def test_matching_nan_and_inf_positions_are_equal():
    ref = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    o = compare(ref, ref.clone())["out"]
    assert o.passed
    assert o.nan_ref == o.nan_cand == 1
    assert o.inf_ref == o.inf_cand == 2
    # Opposite infinities are a mismatch.
    cand = ref.clone()
    cand[2] = -float("inf")
    assert not compare(ref, cand).passed


def test_nan_in_reference_only_fails():
    ref = torch.tensor([1.0, float("nan")])
    o = compare(ref, torch.tensor([1.0, 2.0]))["out"]
    assert not o.passed and o.nan_ref == 1 and o.nan_cand == 0


def test_integer_and_bool_outputs():
    ids = torch.tensor([[1, 2, 3]])
    assert compare(ids, ids.to(torch.int32)).passed  # integer precision may differ
    report = compare(ids, ids.float())
    assert not report.passed
    assert "dtype mismatch" in report.first_failure
    assert compare(torch.tensor([True, False]), torch.tensor([True, True])).passed is False


# ----------------------------------------------------------------------------- structures


@dataclass
class Out:
    logits: torch.Tensor
    hidden: tuple[torch.Tensor, ...]
    loss: torch.Tensor | None = None


Pair = namedtuple("Pair", ["first", "second"])


def test_nested_names_and_known_perturbation():
    torch.manual_seed(0)
    a, b, c = torch.randn(2, 5), torch.randn(3), torch.randn(4)
    ref = {"logits": a, "extra": [b, {"hidden": c}], "step": 3}
    c2 = c.clone()
    c2[2] += 0.25
    cand = {"logits": a.clone(), "extra": [b.clone(), {"hidden": c2}], "step": 3}
    report = compare(ref, cand)
    assert report.names() == ["out.logits", "out.extra[0]", "out.extra[1].hidden", "out.step"]
    assert report.first_failure.startswith("out.extra[1].hidden: not allclose")
    h = report["out.extra[1].hidden"]
    assert h.max_abs == pytest.approx(0.25)
    assert h.mean_abs == pytest.approx(0.25 / 4)
    assert report["out.logits"].max_abs == 0.0
    assert report["out.step"].passed and report["out.step"].ref_shape == ()
    w = report.worst()
    assert w["max_abs"] == pytest.approx(0.25)
    assert w["max_abs_output"] == "out.extra[1].hidden"
    assert w["min_cosine_output"] == "out.extra[1].hidden"


def test_dataclass_outputs():
    torch.manual_seed(1)
    ref = Out(torch.randn(2, 4), (torch.randn(3), torch.randn(3)))
    cand = Out(ref.logits.clone(), (ref.hidden[0].clone(), -ref.hidden[1]))
    report = compare(ref, cand)
    assert report.names() == ["out.logits", "out.hidden[0]", "out.hidden[1]"]  # loss None
    assert report["out.hidden[1]"].cosine == pytest.approx(-1.0)
    assert report.first_failure.startswith("out.hidden[1]:")


def test_namedtuple_and_ordered_dict_and_model_output_like():
    x = torch.arange(6.0).reshape(2, 3)
    report = compare(Pair(x, x), Pair(x, x + 1))
    assert report.names() == ["out.first", "out.second"]
    assert report["out.second"].max_abs == 1.0

    class ModelOutputLike(OrderedDict):
        def to_tuple(self):
            return tuple(self.values())

    ref = ModelOutputLike(logits=x, last_hidden_state=x * 2)
    assert compare(ref, {"logits": x, "last_hidden_state": x * 2}).passed

    class TupleOnly:
        def __init__(self, *items):
            self.items = items

        def to_tuple(self):
            return self.items

    assert compare(TupleOnly(x, x), (x, x)).names() == ["out[0]", "out[1]"]


def test_shape_mismatch_reported_with_both_shapes():
    report = compare({"y": torch.zeros(2, 3)}, {"y": torch.zeros(2, 4)})
    o = report["out.y"]
    assert not o.passed
    assert o.ref_shape == (2, 3) and o.cand_shape == (2, 4)
    assert report.first_failure == "out.y: shape mismatch: reference (2, 3), candidate (2, 4)"


def test_missing_and_extra_keys():
    x = torch.ones(2)
    report = compare({"a": x, "b": x}, {"a": x, "c": x})
    assert not report.passed
    assert report["out.b"].reason == "missing in candidate"
    assert report["out.c"].reason == "extra in candidate"
    assert report["out.a"].passed
    assert report.first_failure == "out.b: missing in candidate"


def test_length_mismatch():
    x = torch.ones(2)
    report = compare((x, x, x), [x])
    assert [o.name for o in report.failures] == ["out[1]", "out[2]"]
    assert "length 3 in reference != 1 in candidate" in report["out[1]"].reason
    report = compare((x,), (x, x))
    assert report["out[1]"].reason.startswith("extra in candidate")


def test_dict_vs_tuple():
    x, y = torch.ones(2), torch.zeros(3)
    # Different leaf counts: a structure failure, never a crash.
    report = compare({"a": x, "b": y}, (x,))
    assert not report.passed
    assert report.first_failure == (
        "out: structure mismatch: reference is dict, candidate is tuple (2 vs 1 leaves)"
    )
    # Same leaf count (what ONNX export makes of a dict output): matched by position.
    report = compare({"a": x, "b": y}, (x, y))
    assert report.passed
    assert report.names() == ["out.a", "out.b"]
    assert "matched by position" in report["out.a"].note
    # ... unless strict.
    strict = compare({"a": x, "b": y}, (x, y), Tolerances(strict_structure=True))
    assert not strict.passed and "structure mismatch" in strict.first_failure
    # Same count, wrong order: caught through the shapes.
    assert not compare({"a": x, "b": y}, (y, x)).passed


def test_tensor_vs_one_tuple_and_leaf_vs_container():
    x = torch.randn(3, 4)
    assert compare(x, (x.clone(),)).passed
    report = compare(x, (x, x))
    assert not report.passed and "structure mismatch" in report.first_failure
    assert not compare("label", x).passed
    assert compare("label", "label").passed
    assert compare("label", "other").first_failure.startswith("out: value differs")


def test_odd_leaves_do_not_crash():
    meta = torch.empty(2, device="meta")
    report = compare(torch.zeros(2), meta)
    assert not report.passed and "cannot read values" in report.first_failure
    assert compare(object(), object()).passed is False


def test_empty_tensors():
    o = compare(torch.zeros(0, 3), torch.zeros(0, 3))["out"]
    assert o.passed and o.max_abs == 0.0 and o.cosine is None and o.top1 is None


# ----------------------------------------------------------------------------- serialisation


def test_report_round_trips_through_strict_json():
    ref = {"logits": torch.tensor([[1.0, float("nan")]]), "n": 2}
    cand = {"logits": torch.tensor([[1.5, float("nan")]]), "n": 2}
    report = compare(ref, cand, Tolerances(min_cosine=0.99, max_abs=1.0))
    text = json.dumps(report.to_dict(), allow_nan=False)
    back = ParityReport.from_dict(json.loads(text))
    assert back == report
    assert back.tolerances.min_cosine == 0.99
    assert json.loads(text)["worst"]["max_abs"] == pytest.approx(0.5)
    assert OutputParity.from_dict(report.outputs[0].to_dict()) == report.outputs[0]


def test_non_finite_metrics_become_null():
    o = OutputParity(name="out", passed=False, max_rel=float("inf"), cosine=float("nan"))
    d = o.to_dict()
    assert d["max_rel"] is None and d["cosine"] is None
    json.dumps(d, allow_nan=False)


def test_tolerances_validation_and_round_trip():
    tol = Tolerances(rtol=1e-2, atol=1e-3, min_cosine=0.999, min_top1=0.9, max_abs=0.5)
    assert Tolerances.from_dict(tol.to_dict()) == tol
    with pytest.raises(ValueError, match="unknown tolerance fields"):
        Tolerances.from_dict({"rtoll": 1e-3})
    with pytest.raises(ValueError, match="min_cosine"):
        Tolerances(min_cosine=1.5)
    with pytest.raises(ValueError, match="rtol"):
        Tolerances(rtol=-1)


def test_summary_lines():
    x = torch.ones(2, 3)
    assert compare(x, x).summary().startswith("PASS 1 output, max_abs 0 (out)")
    s = compare({"a": x, "b": x}, {"a": x, "b": x + 1}).summary()
    assert s.startswith("FAIL out.b: not allclose")
    assert "(1 of 2 outputs failed)" in s
    assert "\n" not in s


# ----------------------------------------------------------------------------- properties

finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)
arrays = hnp.arrays(
    np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6), elements=finite
)
any_floats = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
    elements=st.floats(allow_nan=True, allow_infinity=True, width=32),
)
nested = st.recursive(
    any_floats | st.integers(-100, 100) | st.none(),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "logits"]), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(nested)
def test_compare_with_itself_always_passes(value):
    report = compare(value, value)
    assert report.passed, report.first_failure
    for o in report.outputs:
        if o.kind == "tensor":
            assert o.max_abs == 0.0
            assert o.allclose is True


@settings(max_examples=60, deadline=None)
@given(arrays, st.data())
def test_single_perturbation_is_measured(arr, data):
    index = data.draw(st.tuples(*(st.integers(0, s - 1) for s in arr.shape)))
    delta = data.draw(st.floats(0.01, 100.0))
    ref = arr.astype(np.float64)
    cand = ref.copy()
    cand[index] += delta
    o = compare(torch.from_numpy(ref), torch.from_numpy(cand))["out"]
    actual = abs(cand[index] - ref[index])  # delta after float64 rounding
    assert o.max_abs == pytest.approx(actual, rel=1e-12)
    assert o.mean_abs == pytest.approx(actual / ref.size, rel=1e-12)
    assert -1.0 <= o.cosine <= 1.0


@settings(max_examples=40, deadline=None)
@given(arrays, st.data())
def test_symmetric_metrics(a, data):
    b = data.draw(hnp.arrays(np.float32, a.shape, elements=finite))
    ab, ba = compare(a, b)["out"], compare(b, a)["out"]
    assert ab.max_abs == ba.max_abs
    assert ab.mean_abs == pytest.approx(ba.mean_abs)
    assert ab.cosine == pytest.approx(ba.cosine, abs=1e-12)
    assert ab.top1 == ba.top1
