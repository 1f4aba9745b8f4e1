"""accel.data: data sources are read, validated up front (bad data rejected with what was
expected), labelled by a fixed teacher, and used by the runner's accuracy gate."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

from accel.data import Batch, evaluate_accuracy, make_data_source, synthetic_inputs
from accel.errors import DataError
from accel.models import InputSpec, load_model
from accel.runner import run_recipe

MLP = "zoo:mlp(in_features=16, hidden=32)"
MLP_SPEC = "x:float32[batch,16]; batch=1..64:4"
TOKENS_SPEC = "ids:int64[batch,seq]{0..50}; batch=1..8:2; seq=1..32:8"


@pytest.fixture(scope="module")
def mlp():
    return load_model(MLP, MLP_SPEC)


def test_synthetic_batches_are_deterministic_and_follow_the_spec():
    spec = InputSpec.parse(MLP_SPEC)
    a = make_data_source("synthetic(batches=3, batch=5)", spec)
    b = make_data_source("synthetic(batches=3, batch=5)", spec)
    assert len(a) == 3 and not a.has_labels and a.num_samples == 15
    for x, y in zip(a.batches(), b.batches()):
        assert x.inputs["x"].shape == (5, 16)
        assert torch.equal(x.inputs["x"], y.inputs["x"])
    # Batch i uses seed 1000 + i: the seeds the exported script's calibration_batches() uses.
    first = next(a.batches()).inputs["x"]
    assert torch.equal(first, spec.sample(seed=1000, dims={"batch": 5})["x"])
    assert torch.equal(first, synthetic_inputs(spec, 0, batch=5)["x"])
    other_seed = make_data_source("synthetic(batches=1, batch=5)", spec, seed=1)
    assert not torch.equal(next(other_seed.batches()).inputs["x"], first)


def test_synthetic_labelled_uses_a_fixed_teacher(mlp):
    data = make_data_source(f"synthetic-labelled(batches=4, batch=16):{MLP}", mlp.input_spec)
    assert data.has_labels
    labels = torch.cat([b.labels for b in data.batches()])
    assert labels.shape == (64,) and labels.dtype == torch.int64
    assert len(labels.unique()) > 1  # not a constant label
    # The float teacher scores 100% on its own labels; a different model does not.
    assert evaluate_accuracy(mlp, data) == 1.0
    other = load_model("zoo:mlp(in_features=16, hidden=16)", MLP_SPEC)
    assert evaluate_accuracy(other, data) < 0.9
    # Without a source, the caller's teacher labels the data (the runner passes the original model).
    same = make_data_source("synthetic-labelled(batches=4, batch=16)", mlp.input_spec, teacher=mlp)
    assert torch.equal(torch.cat([b.labels for b in same.batches()]), labels)
    with pytest.raises(DataError, match="teacher"):
        make_data_source("synthetic-labelled", mlp.input_spec)


def test_npz_with_labels(tmp_path, mlp):
    x = np.random.default_rng(0).standard_normal((70, 16)).astype(np.float32)
    y = np.arange(70) % 10
    np.savez(tmp_path / "d.npz", x=x, labels=y)
    data = make_data_source(str(tmp_path / "d.npz"), mlp.input_spec, require_labels=True)
    sizes = [b.size for b in data.batches()]
    assert sizes == [32, 32, 6] and data.has_labels
    assert torch.equal(torch.cat([b.inputs["x"] for b in data.batches()]), torch.from_numpy(x))
    assert torch.equal(torch.cat([b.labels for b in data.batches()]), torch.from_numpy(y))
    # A single-input model takes the only array whatever its name.
    np.savez(tmp_path / "e.npz", features=x)
    assert make_data_source(str(tmp_path / "e.npz"), mlp.input_spec).num_samples == 70


def test_pt_file(tmp_path):
    spec = InputSpec.parse(TOKENS_SPEC)
    torch.save(
        {"ids": torch.randint(0, 50, (6, 8)), "labels": torch.tensor([0, 1, 0, 1, 1, 0])},
        tmp_path / "d.pt",
    )
    data = make_data_source(str(tmp_path / "d.pt"), spec)
    assert [b.size for b in data.batches()] == [6]  # batch dim max is 8
    assert data.has_labels


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        ({"x": np.zeros((4, 15), np.float32)}, r"expected x:float32\[batch,16\]"),
        ({"x": np.zeros((4, 16), np.float64)}, "got dtype float64, expected float32"),
        ({"x": np.full((4, 16), np.nan, np.float32)}, "NaN"),
        ({"x": np.zeros((0, 16), np.float32)}, "empty"),
        ({"x": np.zeros((4, 16), np.float32), "labels": np.zeros(3)}, "one label per sample"),
        ({"x": np.zeros((100, 16), np.float32)[:, None]}, "rank"),
    ],
)
def test_bad_files_are_rejected_with_what_was_expected(tmp_path, mlp, arrays, match):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=match):
        make_data_source(str(tmp_path / "bad.npz"), mlp.input_spec)


def test_out_of_range_token_ids_and_missing_inputs_are_rejected(tmp_path):
    spec = InputSpec.parse(TOKENS_SPEC)
    np.savez(tmp_path / "ids.npz", ids=np.full((2, 8), 60, np.int64))
    with pytest.raises(DataError, match=r"values 60..60, outside its range \{0..50\}"):
        make_data_source(str(tmp_path / "ids.npz"), spec)
    two = InputSpec.parse("a:float32[batch,4]; b:float32[batch,4]")
    np.savez(tmp_path / "a.npz", a=np.zeros((2, 4), np.float32))
    with pytest.raises(DataError, match=r"no array for input\(s\) \['b'\]"):
        make_data_source(str(tmp_path / "a.npz"), two)


def test_require_labels_and_bad_specs(mlp, tmp_path):
    with pytest.raises(DataError, match="no labels"):
        make_data_source("synthetic", mlp.input_spec, require_labels=True)
    with pytest.raises(DataError, match="cannot read data source"):
        make_data_source("nonsense", mlp.input_spec)
    with pytest.raises(DataError, match="does not exist"):
        make_data_source(str(tmp_path / "missing.npz"), mlp.input_spec)
    with pytest.raises(DataError, match="unknown option"):
        make_data_source("synthetic(batchez=2)", mlp.input_spec)
    with pytest.raises(DataError, match="outside the range"):
        make_data_source("synthetic(batch=500)", mlp.input_spec)


def test_python_function_sources(tmp_path, mlp):
    (tmp_path / "mydata.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            import torch

            def pairs():
                g = torch.Generator().manual_seed(0)
                return [(torch.randn(8, 16, generator=g), torch.arange(8) % 10) for _ in range(3)]

            def dicts():
                yield {"x": np.ones((2, 16), np.float32), "labels": np.array([1, 2])}

            def wrong():
                return [torch.zeros(2, 3)]

            def broken():
                raise RuntimeError("disk on fire")

            def accuracy_times_two(outputs, labels):
                return 2 * float((outputs.argmax(-1) == labels).float().mean())
            """
        )
    )
    mod = str(tmp_path / "mydata.py")
    pairs = make_data_source(f"{mod}:pairs", mlp.input_spec, require_labels=True)
    assert len(pairs) == 3 and pairs.num_samples == 24
    dicts = make_data_source(f"{mod}:dicts", mlp.input_spec)
    b = next(dicts.batches())
    assert (
        isinstance(b, Batch)
        and b.inputs["x"].dtype == torch.float32
        and b.labels.tolist() == [1, 2]
    )
    with pytest.raises(DataError, match="expected x:float32"):
        make_data_source(f"{mod}:wrong", mlp.input_spec)
    with pytest.raises(DataError, match="disk on fire"):
        make_data_source(f"{mod}:broken", mlp.input_spec)
    with pytest.raises(DataError, match="no function 'nope'"):
        make_data_source(f"{mod}:nope", mlp.input_spec)
    # A user metric: called per batch, averaged by sample count.
    top1 = evaluate_accuracy(mlp, pairs, "top1")
    assert evaluate_accuracy(mlp, pairs, f"{mod}:accuracy_times_two") == pytest.approx(2 * top1)


def _recipe(steps, **data):
    return {
        "name": "acc",
        "model": {"source": MLP, "input_spec": MLP_SPEC},
        "steps": steps,
        "benchmark": {"warmup": 0, "iters": 2},
        "gates": {"rtol": 1.0, "atol": 1.0, "min_cosine": 0.5, "max_accuracy_drop": 0.02},
        "data": data,
    }


def test_runner_records_accuracy_and_gates_on_the_drop(tmp_path):
    # int4 weights on a tiny MLP lose accuracy against the float model's labels.
    steps = [{"pass": "quantize_weight_only", "params": {"bits": 4, "group_size": 16}}]
    res = run_recipe(
        _recipe(steps, eval="synthetic-labelled(batches=4, batch=32)"), out_dir=tmp_path / "a"
    )
    assert res.baseline["accuracy"] == 1.0  # the original model labels the data
    step = res.steps[0]
    assert step.metrics["accuracy"] < 0.98
    assert step.metrics["accuracy_drop"] == pytest.approx(1.0 - step.metrics["accuracy"])
    assert step.status == "gate_failed"  # parity gates are loose; the accuracy gate failed it
    assert any("max_accuracy_drop" in w for w in step.details["warnings"])
    # A loose accuracy gate passes the same step.
    loose = _recipe(steps, eval="synthetic-labelled(batches=4, batch=32)")
    loose["gates"]["max_accuracy_drop"] = 0.5
    assert run_recipe(loose, out_dir=tmp_path / "b").steps[0].status == "succeeded"


def test_runner_rejects_bad_data_before_any_step(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 3), np.float32))
    res = run_recipe(
        _recipe([{"pass": "quantize_dynamic_int8"}], calibration=str(tmp_path / "bad.npz")),
        out_dir=tmp_path / "r",
    )
    assert res.status == "failed" and not res.steps
    assert "expected x:float32[batch,16]" in res.error
