"""The distill pass: recovers what pruning lost, bounded by steps and seconds (a fake clock
here), cancels without leaving a half-trained model, never trains on the inputs it is judged
on, refuses hostile parameters, exports to a script, and joins the search after pruning."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from onnx_export_helpers import SMALL, recipe, run_script
from pydantic import ValidationError

from accel.errors import Cancelled, PassError
from accel.models import load_model
from accel.passes import PassContext, get_pass
from accel.passes import _distill_helpers as h
from accel.passes.distill import HELDOUT_SEED
from accel.runner import run_recipe
from accel.search import SearchConfig, SearchError, build_space

_MLP: dict = {}


def _mlp():
    if "m" not in _MLP:
        _MLP["m"] = load_model(*SMALL["mlp"])
    m = _MLP["m"]
    return m.replace(module=copy.deepcopy(m.module))


def _pruned(tmp_path, seed=0):
    """The small MLP pruned by 30 % (no fine-tuning), the original, and the gate inputs."""
    original = _mlp()
    inputs = original.input_spec.sample(seed=seed)
    cls = get_pass("prune_channels")
    ctx = PassContext(inputs=inputs, original=original, work_dir=tmp_path)
    pruned = cls().apply(_mlp(), cls.parse_config({"ratio": 0.3}), ctx)
    return pruned, original, inputs


def _distill(pruned, original, inputs, params, tmp_path, **ctx_kw):
    cls = get_pass("distill")
    ctx = PassContext(inputs=inputs, original=original, work_dir=tmp_path, **ctx_kw)
    return cls().apply(pruned, cls.parse_config(params), ctx), ctx


def _cos(a, b):
    return float(
        torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0)
    )


def test_distillation_recovers_cosine_that_pruning_lost(tmp_path):
    pruned, original, inputs = _pruned(tmp_path)
    ref = original.forward(inputs)
    before = _cos(ref, pruned.forward(inputs))
    events = []
    out, ctx = _distill(
        pruned, original, inputs, {"steps": 60, "lr": 1e-3}, tmp_path,
        progress_cb=lambda f, m: events.append(f),
    )  # fmt: skip
    after = _cos(ref, out.forward(inputs))  # the gate's inputs: never trained on
    assert after > before + 0.05 and after > 0.85, (before, after)
    m = ctx.metrics
    assert m["distill_steps"] == 60 and ctx.details["stopped_by"] == "steps"
    assert m["heldout_cosine_after"] > m["heldout_cosine_before"]
    assert ctx.details["kept"] == "distilled"
    assert events == sorted(events) and events[-1] > 0.9  # progress never goes back
    assert not out.module.training and all(p.grad is None for p in out.module.parameters())
    assert out.content_hash != pruned.content_hash


def test_the_time_bound_stops_training_on_a_fake_clock():
    torch.manual_seed(0)
    teacher = torch.nn.Linear(4, 2)
    student = torch.nn.Linear(4, 2)
    batches = [{"x": torch.randn(3, 4)} for _ in range(4)]
    held = [{"x": torch.randn(3, 4)}]
    ticks = itertools.count()  # every clock read is one second later
    seen = []
    _, facts = h.distill_bounded(
        student, teacher, batches, held, steps=1000, seconds=10.0,
        clock=lambda: float(next(ticks)), on_step=lambda d, n, s: seen.append((d, s)),
    )  # fmt: skip
    assert facts["stopped_by"] == "time" and 0 < facts["steps"] < 10
    assert all(s < 10.0 for _, s in seen[:-1])
    # the step bound wins when it comes first
    _, facts = h.distill_bounded(student, teacher, batches, held, steps=3, seconds=1e9)
    assert facts["steps"] == 3 and facts["stopped_by"] == "steps"


@pytest.mark.parametrize(
    ("before", "after", "kept"),
    [
        # the cosine (the parity gate's measure) rose while the MSE rose too: kept
        ((0.125, 1.0), (0.355, 2.0), "distilled"),
        # the cosine fell while the MSE fell: not kept
        ((0.5, 1.0), (0.4, 0.5), "undistilled"),
        # a tie in cosine goes to the MSE
        ((0.5, 1.0), (0.5, 0.9), "distilled"),
        ((0.5, 1.0), (0.5, 1.1), "undistilled"),
    ],
)
def test_trained_weights_are_kept_by_held_out_cosine(monkeypatch, before, after, kept):
    torch.manual_seed(0)
    teacher, student = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
    readings = iter([before, after])  # held-out agreement before, then after training
    monkeypatch.setattr(h, "output_agreement", lambda *_: next(readings))
    batches = [{"x": torch.randn(3, 4)}]
    out, facts = h.distill_bounded(student, teacher, batches, batches, steps=2, seconds=1e9)
    assert facts["kept"] == kept
    assert (out is student) == (kept == "undistilled")
    assert (facts["heldout_cosine_before"], facts["heldout_cosine_after"]) == (before[0], after[0])


def test_cancel_mid_distillation_keeps_nothing_half_written(tmp_path):
    pruned, original, inputs = _pruned(tmp_path / "p")
    state = {k: v.clone() for k, v in pruned.module.state_dict().items()}
    calls = itertools.count()
    work = tmp_path / "distill"
    work.mkdir()
    with pytest.raises(Cancelled):
        _distill(
            pruned, original, inputs, {"steps": 500}, work,
            cancel_cb=lambda: next(calls) >= 5,
        )  # fmt: skip
    after = pruned.module.state_dict()
    assert all(torch.equal(state[k], after[k]) for k in state)  # the model it got is untouched
    assert list(work.iterdir()) == []  # and no file was written


def test_inputs_judged_on_are_never_trained_on(tmp_path):
    # recipe seed 1000: the gate's inputs are calibration batch 0 (seeds 1000, 1001, ...)
    pruned, original, inputs = _pruned(tmp_path, seed=1000)
    out, ctx = _distill(pruned, original, inputs, {"steps": 4, "batches": 8}, tmp_path)
    assert ctx.details["dropped_heldout_batches"] == 1
    assert ctx.details["training_batches"] == 7
    # the held-out seeds are not calibration seeds, and no held-out batch equals a training one
    spec = original.input_spec
    calib = [spec.sample(seed=1000 + i) for i in range(8)]
    held = [spec.sample(seed=HELDOUT_SEED + i) for i in range(4)]
    kept, dropped = h.training_batches(calib, [inputs, *held])
    assert dropped == 1 and len(kept) == 7
    assert not any(h.same_batch(k, x) for k in kept for x in [inputs, *held])
    assert h.same_batch(calib[0], inputs) and not h.same_batch(calib[1], inputs)


def test_distill_without_pruning_first_is_a_clear_error(tmp_path):
    original = _mlp()
    inputs = original.input_spec.sample(seed=0)
    with pytest.raises(PassError, match="nothing to recover.*pruning step"):
        _distill(_mlp(), original, inputs, {"steps": 2}, tmp_path)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"steps": 0}, "steps"),
        ({"steps": -5}, "steps"),
        ({"steps": 10**9}, "steps"),
        ({"steps": "many"}, "steps"),
        ({"seconds": 0}, "seconds"),
        ({"seconds": -1.0}, "seconds"),
        ({"seconds": float("nan")}, "seconds"),
        ({"seconds": float("inf")}, "seconds"),
        ({"lr": 0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"lr": 50.0}, "lr"),
        ({"batches": 0}, "batches"),
        ({"heldout": 10**6}, "heldout"),
        ({"teacher": "evil.py"}, "teacher"),
    ],
)
def test_hostile_parameters_are_refused_naming_the_field(params, field):
    with pytest.raises(ValidationError) as exc:
        get_pass("distill").parse_config(params)
    assert field in str(exc.value)


def test_search_allows_distill_only_after_pruning_and_names_bad_allow_words():
    space = build_space("torch", "cpu", layer_types={"linear"}, allow=["prune", "distill"])
    with_distill = [c for c in space.chains if "distill" in c]
    assert with_distill and all(
        c[0].startswith("prune_") and c[1] == "distill" for c in with_distill
    )
    assert "distill" not in build_space("torch", "cpu", allow=["prune"]).passes
    SearchConfig(model="zoo:mlp", allow=("prune", "distill")).validate()
    with pytest.raises(SearchError, match="--allow distil: not something to allow.*distill"):
        SearchConfig(model="zoo:mlp", allow=("prune", "distil")).validate()


def test_exported_script_distils_like_the_runner(tmp_path):
    steps = [
        {"pass": "prune_channels", "params": {"ratio": 0.3}},
        {"pass": "distill", "params": {"steps": 20, "lr": 1e-3, "seconds": 3600}},
    ]
    r = recipe(*SMALL["mlp"], steps)
    res = run_recipe(r, out_dir=tmp_path / "run")
    assert res.ok, res.error
    out = run_script(r, tmp_path)
    folder = "step_01_distill"
    ours = torch.load(tmp_path / "run" / folder / "outputs.pt")
    theirs = torch.load(out / folder / "outputs.pt")
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-5)
