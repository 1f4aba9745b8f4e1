"""The runner times each step against the original in alternating rounds: a load change in
the middle of the timing cancels out. Fake models on a fake clock; nothing here times."""

from __future__ import annotations

import textwrap

import pytest
from pydantic import Field

from accel.errors import RecipeError
from accel.passes import Pass, PassConfig, ScriptStep, register_pass
from accel.runner import run_recipe
from accel.timing import harness, memory, placement
from accel.timing import rounds as measure
from accel.timing.noise import NoiseReport

MODEL = textwrap.dedent(
    """
    import torch
    from accel.timing import rounds as measure

    class Clocked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.cost = 0.010  # fake seconds per call
            self.poison = False

        def forward(self, x):
            advance = getattr(measure.CLOCK, "advance", None)
            if advance is not None:
                advance(self.cost)
            y = self.fc(x)
            return y * float("nan") if self.poison else y

    def build():
        return Clocked().eval()
    """
)


TRUST = {"trust_recipe_code": True}  # the test's own model file


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.load = 1.0

    def __call__(self) -> float:
        return self.t

    def advance(self, cost: float) -> None:
        self.t += cost * self.load


class _SpeedConfig(PassConfig):
    cost: float = Field(0.004, description="fake seconds per call of the new model")
    poison: bool = Field(False, description="make the model return NaN")


@register_pass
class _Speed(Pass):
    name = "test_speed"
    summary = "test-only: make the model faster on the fake clock"
    category = "test"
    Config = _SpeedConfig

    def apply(self, model, config, ctx):
        model.module.cost = config.cost
        model.module.poison = config.poison
        return model

    def to_script(self, config):
        return ScriptStep(code=f"model.cost = {config.cost}")


class QuietMonitor:
    def __init__(self, device: str = "cpu") -> None:
        self.other = 0.0

    def start(self) -> None:
        pass

    def tick(self) -> None:
        pass

    def stop(self) -> NoiseReport:
        return NoiseReport(cores=2, other_cores=self.other)


class BusyMonitor(QuietMonitor):
    def stop(self) -> NoiseReport:
        return NoiseReport(cores=2, other_cores=1.7)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(measure, "CLOCK", c)
    return c


def _recipe(tmp_path, *steps, **bench):
    path = tmp_path / "clocked.py"
    path.write_text(MODEL)
    return {
        "name": "timing",
        "model": {"source": f"{path}:build", "input_spec": "x:float32[2,4]"},
        "benchmark": {"rounds": 8, "iters": 16, "warmup": 1, "min_time_s": 0, **bench},
        "gates": {"min_cosine": None, "rtol": 1.0, "atol": 1.0},
        "steps": [{"pass": "test_speed", "params": s} for s in steps],
    }


def test_a_load_change_halfway_through_the_timing_cancels(tmp_path, clock, monkeypatch):
    monkeypatch.setattr(harness, "NoiseMonitor", QuietMonitor)
    # as on a quiet machine: no CPU left out for other processes' use (choose_cpus)
    monkeypatch.setattr(placement, "per_cpu_busy", lambda *a, **k: None)

    def on_event(e):
        # Halfway through the step's rounds, the machine becomes 3x slower.
        if e.kind == "progress" and e.message == "timing round 4":
            clock.load = 3.0

    res = run_recipe(
        _recipe(tmp_path, {"cost": 0.004}), on_event=on_event, out_dir=tmp_path / "r", **TRUST
    )
    assert res.status == "succeeded", res.error
    (step,) = res.steps
    t = step.timing
    assert clock.load == 3.0  # the load really changed during the timing
    assert t.speedup == pytest.approx(2.5)
    assert t.speedup_low <= 2.5 <= t.speedup_high
    assert not t.noisy
    # The step's own latency samples saw both machine states.
    assert t.step.p90_ms == pytest.approx(12.0)
    assert t.mode == "interleaved" and t.rounds == 8 and t.step.samples == 16
    assert t.threads == res.environment["threads"] >= 1
    # Both p50s come from the same rounds as the speedup: the row agrees with itself.
    assert t.consistent()
    # The original's row: timed alone with the same machinery (rounds, samples, batching).
    base = res.baseline_timing
    assert base.mode == "baseline" and base.step is None and base.speedup is None
    assert base.rounds == 8 and base.reference.samples == 16 and base.reference.batch == 1
    assert base.p50_ref_ms == pytest.approx(10.0)
    assert res.environment["threads"] == placement.physical_cores()


def test_busy_machine_marks_the_step_and_the_run(tmp_path, clock, monkeypatch):
    monkeypatch.setattr(harness, "NoiseMonitor", BusyMonitor)
    finished = []
    res = run_recipe(
        _recipe(tmp_path, {"cost": 0.005}, threads=1),
        on_event=lambda e: finished.append(e) if e.kind == "run_finished" else None,
        out_dir=tmp_path / "r",
        **TRUST,
    )
    (step,) = res.steps
    assert step.timing.noisy
    assert step.timing.noise_reason == "2 cores, 1.7 busy with other processes"
    assert res.environment["threads"] == 1
    summary = finished[0].summary
    assert summary["noisy_steps"] == [0]
    assert "1.7 busy with other processes" in summary["noise"]


def test_model_returning_nan_fails_the_step_without_a_result(tmp_path, clock, monkeypatch):
    monkeypatch.setattr(harness, "NoiseMonitor", QuietMonitor)
    res = run_recipe(_recipe(tmp_path, {"poison": True}), out_dir=tmp_path / "r", **TRUST)
    assert res.status == "failed"
    (step,) = res.steps
    assert step.status == "failed" and step.metrics == {} and step.timing is None
    assert "candidate model returned NaN" in step.error


def test_bad_benchmark_settings_name_the_setting(tmp_path):
    with pytest.raises(RecipeError, match=r"benchmark\.rounds"):
        run_recipe(_recipe(tmp_path, {}, rounds=0), out_dir=tmp_path / "r", **TRUST)


def test_low_memory_times_the_original_again_right_before_the_step(tmp_path, clock, monkeypatch):
    """Where the original and the step's model do not both fit (more than half of the free
    memory), the original is re-timed right before the step and the step's model after it,
    each alone; the details and the CLI say so, and there is no interval."""
    from studio.commands._runprint import apart_line

    monkeypatch.setattr(harness, "NoiseMonitor", QuietMonitor)
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device="cpu": 100)
    events = []

    def on_event(e):
        events.append(e)
        # The machine becomes 3x slower after the baseline: the run-start baseline would
        # make the step look 3x slower; the re-timed original sees the same load.
        if e.kind == "step_started":
            clock.load = 3.0

    res = run_recipe(
        _recipe(tmp_path, {"cost": 0.004}), on_event=on_event, out_dir=tmp_path / "r", **TRUST
    )
    assert res.status == "succeeded", res.error
    (step,) = res.steps
    t = step.timing
    assert t.speedup == pytest.approx(2.5)
    assert t.speedup_bounds is None
    assert t.p50_ref_ms == pytest.approx(30.0) and t.p50_step_ms == pytest.approx(12.0)
    assert t.mode == "apart" and t.consistent()
    assert "more than half of the free RAM" in t.note
    assert "re-timed right before the step" in t.note
    finished = [e.to_dict() for e in events if e.kind == "step_finished"]
    assert "step(s) 1 timed apart from the original" in apart_line(finished)


def test_enough_memory_keeps_the_interleaved_comparison(tmp_path, clock, monkeypatch):
    monkeypatch.setattr(harness, "NoiseMonitor", QuietMonitor)
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device="cpu": 2**40)
    res = run_recipe(_recipe(tmp_path, {"cost": 0.004}), out_dir=tmp_path / "r", **TRUST)
    (step,) = res.steps
    assert step.timing.mode == "interleaved"
    assert memory.side_by_side_problem(2**30, 2**30) is None
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device="cpu": 3 * 2**30)
    why = memory.side_by_side_problem(2**30, 2**30, "cuda:0")
    assert why == (
        "the original (1.00 GiB) and the step's model (1.00 GiB) take more than half of the "
        "free VRAM (3.00 GiB)"
    )
