"""The timing engine (accel.timing): interval math on synthetic sequences, rounds driven by
a fake clock (nothing here times anything real), settings validation, the noise guard, the
typed result."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from accel.timing import (
    Interval,
    MeasureError,
    TimingSettings,
    compare_interleaved,
    ratio_interval,
    run_rounds,
)
from accel.timing import placement as measure
from accel.timing import rounds as timing_rounds
from accel.timing.noise import NoiseMonitor


class FakeClock:
    """A clock that only moves when a fake model runs."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(timing_rounds, "CLOCK", c)
    return c


def fake_model(clock: FakeClock, base_s: float, load, log: list | None = None, name: str = ""):
    """A model taking ``base_s * load(t)`` seconds of fake time per call."""

    def call():
        if log is not None:
            log.append(name)
        clock.t += base_s * load(clock.t)

    return call


# --------------------------------------------------------------------------- interval math


def test_drifting_load_still_gives_the_true_ratio():
    rng = np.random.default_rng(1)
    load = np.linspace(1.0, 4.0, 20)  # the machine gets 4x slower during the run
    ref = 10.0 * load * rng.uniform(0.99, 1.01, 20)
    cand = 4.0 * load * rng.uniform(0.99, 1.01, 20)
    iv = ratio_interval(list(ref), list(cand))
    assert iv.value == pytest.approx(2.5, rel=0.02)
    assert iv.low <= 2.5 <= iv.high
    assert iv.half_width < 0.03
    # Timing the reference first and the candidate later (the old way) is off by far more.
    assert np.median(ref[:10]) / np.median(cand[10:]) < 2.0


def test_constant_model_gives_one_inside_its_interval():
    rng = np.random.default_rng(2)
    times = 5.0 * rng.uniform(0.9, 1.1, (2, 15))
    iv = ratio_interval(list(times[0]), list(times[1]))
    assert iv.contains(1.0)
    assert 0.9 < iv.value < 1.1
    assert iv.low < iv.value < iv.high


def test_interval_is_reproducible_and_one_round_has_no_width():
    a, b = [3.0, 3.3, 2.9, 3.1], [1.0, 1.2, 1.0, 0.9]
    assert ratio_interval(a, b) == ratio_interval(a, b)
    one = ratio_interval([4.0], [2.0])
    assert (one.value, one.low, one.high) == (2.0, 2.0, 2.0)


def test_scattered_ratios_give_a_wide_interval():
    iv = ratio_interval([1, 1, 1, 1, 1, 1], [0.3, 1.0, 0.5, 2.0, 0.7, 1.5])
    assert iv.half_width > 0.3


@pytest.mark.parametrize(
    ("ref", "cand", "needle"),
    [
        ([1.0, 0.0], [1.0, 1.0], "reference model timed at 0 s"),
        ([1.0, 1.0], [1.0, 0.0], "candidate model timed at 0 s"),
        ([1.0, math.nan], [1.0, 1.0], "NaN"),
        ([], [], "benchmark.rounds"),
        ([1.0], [1.0, 2.0], "rounds"),
    ],
)
def test_bad_timings_are_rejected(ref, cand, needle):
    with pytest.raises(MeasureError, match=needle):
        ratio_interval(ref, cand)


def test_interval_helpers():
    a = Interval(2.0, 1.9, 2.2)
    assert a.half_width == pytest.approx(0.1)
    assert a.overlaps(Interval(2.15, 2.1, 2.3))
    assert not a.overlaps(Interval(2.5, 2.3, 2.7))


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"rounds": 0}, "benchmark.rounds must be >= 1"),
        ({"iters": 0}, "benchmark.iters must be >= 1"),
        ({"warmup": -1}, "benchmark.warmup must be >= 0"),
        ({"threads": 0}, "benchmark.threads must be >= 1"),
        ({"min_time_s": -1.0}, "benchmark.min_time_s"),
        ({"min_time_s": math.nan}, "benchmark.min_time_s"),
        ({"iters": 2.5}, "benchmark.iters must be a whole number"),
        ({"rounds": True}, "benchmark.rounds must be a whole number"),
    ],
)
def test_bad_settings_name_the_setting(kwargs, needle):
    with pytest.raises(MeasureError, match=needle):
        TimingSettings(**kwargs)


def test_rounds_never_exceed_iters(clock):
    s = TimingSettings(rounds=8, iters=3, min_time_s=0)
    assert (s.base_rounds, s.per_round) == (3, 1)
    res = run_rounds(
        fake_model(clock, 0.001, lambda t: 1.0), fake_model(clock, 0.001, lambda t: 1.0), s
    )
    assert res.rounds == 3 and len(res.candidate.samples_ms) == 3


def test_settings_from_recipe_section_fill_defaults():
    s = TimingSettings.from_any({"rounds": 4, "threads": None})
    assert (s.rounds, s.iters, s.threads) == (4, TimingSettings().iters, None)
    assert s.resolved_threads >= 1


# --------------------------------------------------------------------------- rounds


def test_rounds_alternate_order_and_cancel_a_load_change(clock):
    order: list[str] = []
    # Halfway through (fake time 0.2 s), everything becomes 3x slower.
    load = lambda t: 1.0 if t < 0.2 else 3.0  # noqa: E731
    ref = fake_model(clock, 0.010, load, order, "A")
    cand = fake_model(clock, 0.004, load, order, "B")
    settings = TimingSettings(rounds=10, iters=20, warmup=1, threads=1, min_time_s=0)
    res = run_rounds(ref, cand, settings)
    assert res.rounds == 10
    assert res.speedup.value == pytest.approx(2.5, rel=1e-6)
    assert res.speedup.contains(2.5)
    assert not res.noisy
    timed = order[-40:]  # 10 rounds x 2 sides x 2 samples
    rounds = [timed[i : i + 4] for i in range(0, 40, 4)]
    assert rounds[0] == ["A", "A", "B", "B"]
    assert rounds[1] == ["B", "B", "A", "A"]  # the order alternates: A B B A ...
    # The load really changed mid-run (the latency samples show both levels).
    assert max(res.candidate.samples_ms) == pytest.approx(3 * min(res.candidate.samples_ms))
    t = res.timing()
    assert t.speedup_low <= t.speedup <= t.speedup_high
    assert t.step.low_ms <= t.p50_step_ms <= t.step.high_ms
    assert t.step.low_ms == pytest.approx(4.0) and t.step.high_ms == pytest.approx(12)
    assert t.reference.low_ms == pytest.approx(10.0) and t.reference.high_ms == pytest.approx(30)
    assert not t.noisy and t.consistent()


def test_first_call_is_kept_apart_and_warmup_is_not_timed(clock):
    calls = {"n": 0}

    def slow_first():
        calls["n"] += 1
        clock.t += 1.0 if calls["n"] == 1 else 0.002

    res = run_rounds(
        slow_first,
        fake_model(clock, 0.002, lambda t: 1.0),
        TimingSettings(rounds=3, iters=1, warmup=2, threads=1, min_time_s=0),
    )
    assert res.reference.first_call_ms == pytest.approx(1000.0)
    assert max(res.reference.samples_ms) == pytest.approx(2.0)
    assert res.speedup.value == pytest.approx(1.0)


def test_min_time_adds_rounds(clock):
    ref = fake_model(clock, 0.001, lambda t: 1.0)
    cand = fake_model(clock, 0.001, lambda t: 1.0)
    res = run_rounds(ref, cand, TimingSettings(rounds=2, iters=1, warmup=0, min_time_s=0.02))
    assert res.rounds == 10  # 2 ms of timed work per round


def test_tiny_models_are_batched(clock):
    ref = fake_model(clock, 2e-6, lambda t: 1.0)
    cand = fake_model(clock, 1e-6, lambda t: 1.0)
    res = run_rounds(ref, cand, TimingSettings(rounds=3, iters=6, warmup=3, min_time_s=0))
    assert res.reference.batch == 1000 and res.candidate.batch == 2000
    assert res.speedup.value == pytest.approx(2.0)
    assert res.reference.samples_ms[0] == pytest.approx(2e-3)  # per call, not per batch


def test_wide_interval_is_noisy(clock):
    speeds = iter([1.0, 3.0, 0.5, 2.0] * 100)

    def jumpy():
        clock.t += 0.001 * next(speeds)

    res = run_rounds(
        fake_model(clock, 0.001, lambda t: 1.0),
        jumpy,
        TimingSettings(rounds=8, iters=8, warmup=0, min_time_s=0),
    )
    assert res.noisy
    assert "interval wider than" in res.noise_reason


def test_cancel_stops_timing(clock):
    from accel.errors import Cancelled

    with pytest.raises(Cancelled):
        run_rounds(
            fake_model(clock, 0.001, lambda t: 1.0),
            fake_model(clock, 0.001, lambda t: 1.0),
            TimingSettings(rounds=5, iters=1, warmup=0, min_time_s=0),
            cancel=lambda: True,
        )


# --------------------------------------------------------------------------- real models


def test_compare_two_torch_modules_uses_one_thread_count(monkeypatch):
    seen = []
    net = torch.nn.Linear(8, 8).eval()

    def ref(x):
        seen.append(torch.get_num_threads())
        return net(x)

    res = compare_interleaved(
        ref,
        net,
        {"x": torch.ones(2, 8)},
        TimingSettings(rounds=2, iters=1, warmup=0, threads=1, min_time_s=0),
    )
    assert set(seen) == {1}
    assert res.threads == 1
    assert res.timing().threads == 1
    assert res.speedup.low <= res.speedup.value <= res.speedup.high
    assert res.timing().consistent()


def test_nan_model_is_rejected():
    net = torch.nn.Linear(4, 4).eval()
    with pytest.raises(MeasureError, match="candidate model returned NaN"):
        compare_interleaved(
            net,
            lambda x: net(x) * math.nan,
            {"x": torch.ones(1, 4)},
            TimingSettings(rounds=1, iters=1, warmup=0, min_time_s=0),
        )


BUSY = "import time\nt=time.time()\nwhile time.time()-t<30: pass\n"


def test_busy_process_raises_the_noisy_flag():
    import os

    cores = os.cpu_count() or 1
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(cores)]
    try:
        mon = NoiseMonitor()
        mon.start()
        import time

        time.sleep(1.0)  # this process idles while the busy loops run: they are "other"
        rep = mon.stop()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert rep.busy, rep
    assert rep.other_cores > 0.25 * cores
    assert f"{cores} cores" in rep.reason() and "busy with other processes" in rep.reason()


# --------------------------------------------------------------------------- CPU placement


def test_busy_cpu_is_left_out_when_threads_are_the_studios_choice(monkeypatch):
    monkeypatch.setattr(measure, "per_cpu_busy", lambda *a, **k: {0: 0.97, 1: 0.03})
    monkeypatch.setattr(measure, "physical_cores", lambda: 2)
    p = measure.choose_cpus(None)
    assert p.cpus == (1,) and p.busy_cpus == (0,) and p.threads == 1
    assert "CPU 0 busy with other processes" in p.note
    # the user's own thread count is never changed, nor pinned
    assert measure.choose_cpus(2) == measure.CpuPlacement(threads=2)
    # every CPU free (the usual case) or every CPU busy: no pinning, the physical cores
    monkeypatch.setattr(measure, "per_cpu_busy", lambda *a, **k: {0: 0.1, 1: 0.0})
    assert measure.choose_cpus(None) == measure.CpuPlacement(threads=2)
    monkeypatch.setattr(measure, "per_cpu_busy", lambda *a, **k: {0: 0.9, 1: 0.8})
    assert measure.choose_cpus(None) == measure.CpuPlacement(threads=2)
    monkeypatch.setattr(measure, "per_cpu_busy", lambda *a, **k: None)
    assert measure.choose_cpus(None) == measure.CpuPlacement(threads=2)


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="Linux only")
def test_pinning_covers_threads_started_inside_and_is_undone():
    import os
    import threading

    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    one = min(allowed)
    seen = {}

    def worker():
        seen["inside"] = os.sched_getaffinity(0)
        ev.wait(5)
        seen["after"] = os.sched_getaffinity(0)

    ev = threading.Event()
    with measure.CpuPlacement(threads=1, cpus=(one,), busy_cpus=()).pinned():
        assert os.sched_getaffinity(0) == {one}
        t = threading.Thread(target=worker)
        t.start()
    ev.set()
    t.join()
    assert seen["inside"] == {one}
    assert seen["after"] == allowed  # a pool thread made while pinned is widened back
    assert os.sched_getaffinity(0) == allowed


def test_comparison_says_where_it_ran(monkeypatch):
    import os

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    free = max(os.sched_getaffinity(0))
    busy = {c: (0.0 if c == free else 1.0) for c in os.sched_getaffinity(0)}
    monkeypatch.setattr(measure, "per_cpu_busy", lambda *a, **k: busy)
    seen = []
    net = torch.nn.Linear(8, 8).eval()

    def ref(x):
        seen.append((torch.get_num_threads(), frozenset(os.sched_getaffinity(0))))
        return net(x)

    res = compare_interleaved(
        ref, net, {"x": torch.ones(2, 8)}, TimingSettings(rounds=2, iters=2, warmup=0)
    )
    assert set(seen) == {(1, frozenset({free}))}
    t = res.timing()
    assert t.cpus == (free,) and t.threads == 1
    assert "busy with other processes" in t.placement


def test_round_robin_rotates_and_every_candidate_shares_the_reference_rounds(clock):
    from accel.timing import run_round_robin

    order: list[str] = []
    load = lambda t: 1.0 if t < 0.3 else 2.0  # noqa: E731 - the load doubles mid-run
    ref = fake_model(clock, 0.012, load, order, "R")
    cands = {
        "a": fake_model(clock, 0.006, load, order, "a"),
        "b": fake_model(clock, 0.003, load, order, "b"),
    }
    settings = TimingSettings(rounds=6, iters=6, warmup=1, threads=1, min_time_s=0)
    out = run_round_robin(ref, cands, settings)
    assert set(out) == {"a", "b"}
    assert out["a"].speedup.value == pytest.approx(2.0, rel=1e-6)
    assert out["b"].speedup.value == pytest.approx(4.0, rel=1e-6)
    assert out["a"].reference is out["b"].reference  # one measurement, one reference side
    timed = order[-18:]  # 6 rounds x 3 sides x 1 sample
    assert [timed[i : i + 3] for i in range(0, 9, 3)] == [
        ["R", "a", "b"],
        ["a", "b", "R"],
        ["b", "R", "a"],
    ]
    with pytest.raises(ValueError, match="reference"):
        run_round_robin(ref, {"reference": ref}, settings)


def test_round_robin_cancel_stops_timing(clock):
    from accel.errors import Cancelled
    from accel.timing import run_round_robin

    calls = {"n": 0}

    def cancel():
        calls["n"] += 1
        return calls["n"] > 2

    m = fake_model(clock, 0.001, lambda t: 1.0)
    settings = TimingSettings(rounds=10, iters=10, warmup=0, threads=1, min_time_s=0)
    with pytest.raises(Cancelled):
        run_round_robin(m, {"a": m, "b": m}, settings, cancel=cancel)


def test_a_far_slower_candidate_stops_timing_after_two_rounds(clock):
    """give_up_below: a search trial whose model ran below it in every round so far stops
    timing there, and says so; one round at or above it keeps every round."""
    from accel.timing import run_round_robin
    from accel.timing.rounds import GIVE_UP_ROUNDS

    settings = TimingSettings(rounds=12, iters=24, warmup=0, threads=1, min_time_s=0)
    ref = fake_model(clock, 0.010, lambda t: 1.0)
    slow = fake_model(clock, 0.100, lambda t: 1.0)  # 0.1x
    out = run_round_robin(ref, {"c": slow}, settings, give_up_below=0.25)["c"]
    assert out.rounds == GIVE_UP_ROUNDS
    assert out.speedup.value == pytest.approx(0.1)
    assert out.noisy and "timing stopped after 2 rounds: 0.10x, below 0.25x" in out.noise_reason
    # without the limit, or above it, every round is timed and nothing is said
    full = run_round_robin(ref, {"c": slow}, settings)["c"]
    assert full.rounds == 12 and not full.noisy
    ok = run_round_robin(
        ref, {"c": fake_model(clock, 0.030, lambda t: 1.0)}, settings, give_up_below=0.25
    )
    assert ok["c"].rounds == 12 and not ok["c"].noisy
    # slow only while the machine was busy at first: a round above the limit keeps timing
    start = clock.t
    busy = fake_model(clock, 0.020, lambda t: 20.0 if t < start + 1.0 else 1.0)
    mixed = run_round_robin(ref, {"c": busy}, settings, give_up_below=0.25)["c"]
    ratios = [r / c for r, c in zip(mixed.reference.round_ms, mixed.candidate.round_ms)]
    assert ratios[0] < 0.25 <= ratios[1] and mixed.rounds == 12
    # a run that ends at its own last round anyway is not called stopped
    two = TimingSettings(rounds=2, iters=2, warmup=0, threads=1, min_time_s=0)
    assert not run_round_robin(ref, {"c": slow}, two, give_up_below=0.25)["c"].noisy
