"""The search's final side-by-side re-timing (accel.search.retime): the winner is chosen on
one measurement of the top trials with the original; it keeps to the budget and to cancel,
and a re-timing cut short leaves no figure behind. Fake executors and fake clocks: nothing
here times anything real except the tiny model of the job test (whose figures are not
asserted)."""

from __future__ import annotations

import json

import pytest

from accel.search import SearchConfig, SearchError, run_search
from accel.search import engine as search_engine
from accel.search import retime as retime_mod
from accel.search.engine import _DoneHandle as _Done
from accel.search.job import run_search_job
from accel.timing.result import Latency, StepTiming

CHEAP = ("quantize_dynamic_int8", "export_onnx", "quantize_onnx_dynamic", "onnxruntime", "bf16")
INFO = ("torch", frozenset({"linear"}))


def _timing(speedup: float) -> dict:
    return StepTiming(
        mode="interleaved",
        reference=Latency(p50_ms=10.0, samples=5),
        step=Latency(p50_ms=10.0 / speedup, samples=5),
        speedup=speedup,
        speedup_low=0.95 * speedup,
        speedup_high=1.05 * speedup,
        rounds=5,
    ).to_json()


class FakeExecutor:
    """Trial n ends ok at ``own[n]`` x (its own measurement); the re-timing job returns
    ``final`` (trial -> speedup) or ``retime_outcome``. ``step_s``: fake seconds per job."""

    slots = 1

    def __init__(self, own, final=None, retime_outcome=None, clock=None, step_s=0.0):
        self.own, self.final, self.retime_outcome = own, final, retime_outcome
        self.clock, self.step_s = clock, step_s
        self.specs: list[dict] = []
        self.retime_specs: list[dict] = []
        self.on_retime = lambda: None

    def submit(self, number, spec):
        if self.clock is not None:
            self.clock.t += self.step_s
        if spec.get("retime") is not None:
            self.retime_specs.append(spec)
            self.on_retime()
            if self.retime_outcome is not None:
                return _Done(self.retime_outcome)
            timings = {str(n): _timing(self.final[n]) for n in self.final}
            result = {"retime": {"timings": timings, "skipped": {}}}
            return _Done({"status": "succeeded", "result": result, "run_id": "r-final"})
        self.specs.append(spec)
        s = self.own.get(number, 1.0)
        result = {
            "trial_status": "ok",
            "metrics": {"speedup": s, "cosine_drop": 0.0, "size_bytes": 100.0},
            "timing": _timing(s),
        }
        return _Done({"status": "succeeded", "result": result, "run_id": f"r{number}"})

    def close(self):
        pass


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _config(tmp_path, **kw):
    base = dict(
        model="zoo:mlp",
        objective="latency",
        max_trials=4,
        budget_s=None,
        passes=CHEAP,
        out_dir=str(tmp_path),
        seed=3,
    )
    base.update(kw)
    return SearchConfig(**base)


def test_the_side_by_side_figures_choose_the_winner(tmp_path):
    # Trials 1 and 2 measured apart: 5.97x and 5.87x. Side by side, trial 2 is 1.8x faster.
    ex = FakeExecutor({1: 5.97, 2: 5.87, 3: 3.0}, final={1: 3.0, 2: 5.4, 3: 2.0})
    res = run_search(_config(tmp_path), ex, model_info=INFO)
    assert [r["trial"] for r in ex.retime_specs[0]["retime"]] == [1, 2, 3]
    assert res.final is not None and res.final.done
    assert res.best == 2 and res.final.winner == 2
    assert res.best_timing().speedup == pytest.approx(5.4)  # the re-timing's figure
    assert res.trial(1).metrics["speedup"] == pytest.approx(5.97)  # each trial keeps its own
    d = json.loads(json.dumps(res.to_dict(), default=str))
    assert d["best"] == 2 and d["final"]["done"] and d["final"]["winner"] == 2
    assert d["final"]["timings"]["2"]["speedup"] == pytest.approx(5.4)
    assert "side-by-side" in d["final"]["what"]
    back = search_engine.FinalTiming.from_dict(d["final"])
    assert back.timings[2].speedup == pytest.approx(5.4) and back.winner == 2


def test_when_the_figures_agree_the_winner_stays(tmp_path):
    ex = FakeExecutor({1: 5.97, 2: 5.87, 3: 3.0}, final={1: 6.1, 2: 5.0, 3: 2.0})
    res = run_search(_config(tmp_path), ex, model_info=INFO)
    assert res.best == 1 and res.final.done


def test_top_k_is_a_parameter_and_off_at_zero(tmp_path):
    ex = FakeExecutor({1: 5.97, 2: 5.87, 3: 3.0}, final={1: 3.0, 2: 5.4})
    res = run_search(_config(tmp_path / "a", final_top_k=2), ex, model_info=INFO)
    assert [r["trial"] for r in ex.retime_specs[0]["retime"]] == [1, 2] and res.best == 2
    off = FakeExecutor({1: 5.97, 2: 5.87, 3: 3.0}, final={1: 3.0, 2: 5.4})
    res = run_search(_config(tmp_path / "b", final_top_k=0), off, model_info=INFO)
    assert off.retime_specs == [] and res.final is None and res.best == 1


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"final_top_k": -1}, "top-k"),
        ({"final_top_k": 99}, "top-k"),
        ({"final_top_k": "3"}, "top-k"),
        ({"final_share": 0.9}, "share"),
        ({"final_share": float("nan")}, "share"),
    ],
)
def test_hostile_retime_settings_are_refused(tmp_path, kw, needle):
    with pytest.raises(SearchError, match=needle):
        _config(tmp_path, **kw).validate()


def test_part_of_the_budget_is_kept_and_the_retime_gets_only_what_is_left(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(search_engine, "CLOCK", clock)
    ex = FakeExecutor({n: 2.0 + n / 10 for n in range(1, 40)}, clock=clock, step_s=10.0)
    ex.final = {}
    ex.retime_outcome = None

    def answer():  # the job answers for whatever trials it was given
        ex.final = {r["trial"]: 3.0 for r in ex.retime_specs[-1]["retime"]}

    ex.on_retime = answer
    cfg = _config(tmp_path, max_trials=None, budget_s=100.0, final_share=0.2)
    res = run_search(cfg, ex, model_info=INFO, started=clock.t)
    # trials end 10 s apart; the loop stops with 20 s (the share) of the budget left
    assert len(ex.specs) == 8
    spec = ex.retime_specs[0]
    assert 0 < spec["time_limit_s"] <= 20.0 and spec["timeout_s"] == spec["time_limit_s"]
    assert res.final.done


def test_no_time_left_means_no_retime_and_the_trials_figures(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(search_engine, "CLOCK", clock)
    ex = FakeExecutor({1: 5.97, 2: 5.87, 3: 3.0}, final={1: 3.0, 2: 5.4}, clock=clock, step_s=30)
    cfg = _config(tmp_path, max_trials=4, budget_s=100.0, final_share=0.0)
    res = run_search(cfg, ex, model_info=INFO, started=clock.t)
    assert ex.retime_specs == []
    assert res.final is not None and not res.final.done and "not run" in res.final.reason
    assert res.best == 1 and res.best_timing().speedup == pytest.approx(5.97)


@pytest.mark.parametrize("status", ["cancelled", "timed_out", "failed"])
def test_a_retime_cut_short_keeps_no_figure(tmp_path, status):
    outcome = {"status": status, "result": {}, "error": f"the final re-timing was {status}"}
    ex = FakeExecutor({1: 5.97, 2: 5.87, 3: 3.0}, retime_outcome=outcome)
    res = run_search(_config(tmp_path), ex, model_info=INFO)
    assert not res.final.done and res.final.timings == {} and res.final.winner is None
    assert status in res.final.reason
    assert res.best == 1 and res.best_timing().speedup == pytest.approx(5.97)
    assert res.to_dict()["final"]["timings"] == {}


def test_cancel_during_the_retime_cancels_the_search_and_keeps_no_figure(tmp_path):
    cancelled = {"now": False}
    ex = FakeExecutor({1: 5.97, 2: 5.87, 3: 3.0}, final={1: 3.0, 2: 5.4, 3: 2.0})
    ex.on_retime = lambda: cancelled.__setitem__("now", True)
    res = run_search(_config(tmp_path), ex, model_info=INFO, cancel=lambda: cancelled["now"])
    assert res.status == "cancelled"
    assert not res.final.done and res.final.timings == {} and res.best == 1


def _retime_spec(tmp_path, numbers_steps, **kw):
    cfg = SearchConfig(
        model="zoo:mlp",
        out_dir=str(tmp_path),
        bench_iters=4,
        bench_rounds=2,
        bench_warmup=1,
        bench_min_time_s=0.0,
        bench_threads=1,
    )
    spec = search_engine.trial_spec(cfg, 9, [])
    spec["retime"] = [{"trial": n, "steps": s} for n, s in numbers_steps]
    spec.update(kw)
    return spec


BF16 = [{"pass": "bf16", "params": {}}]
DYN = [{"pass": "quantize_dynamic_int8", "params": {}}]


def test_the_retime_job_times_every_candidate_in_one_measurement(tmp_path):
    events: list[dict] = []
    out = run_search_job(
        _retime_spec(tmp_path, [(1, BF16), (2, DYN)]), events.append, lambda: False
    )
    assert out["status"] == "succeeded", out
    timings = out["retime"]["timings"]
    assert set(timings) == {"1", "2"}
    t1, t2 = (StepTiming.from_json(timings[n]) for n in ("1", "2"))
    assert t1.reference == t2.reference  # the same original's rounds for both
    assert events[0]["event"] == "run_started" and events[-1]["event"] == "run_finished"


def test_the_retime_job_cancelled_while_timing_returns_no_figures(tmp_path, monkeypatch):
    import accel.timing.harness as harness

    calls = {"n": 0}

    def cancel():
        return calls["n"] > 0

    real = harness.run_round_robin

    def counting(*a, **kw):
        calls["n"] += 1  # cancel once timing started
        return real(*a, **kw)

    monkeypatch.setattr(harness, "run_round_robin", counting)
    out = run_search_job(_retime_spec(tmp_path, [(1, BF16), (2, DYN)]), lambda e: None, cancel)
    assert out["status"] == "cancelled" and "retime" not in out
    assert "no figures were kept" in out["error"]


def test_the_retime_job_stops_at_its_time_limit(tmp_path, monkeypatch):
    t = {"now": 0.0}

    def clock():
        t["now"] += 30.0  # every look at the clock is 30 s later
        return t["now"]

    monkeypatch.setattr(retime_mod, "CLOCK", clock)
    spec = _retime_spec(tmp_path, [(1, BF16), (2, DYN)], time_limit_s=40.0)
    out = run_search_job(spec, lambda e: None, lambda: False)
    assert out["status"] == "timed_out" and "retime" not in out
    assert "time limit of 40 s" in out["error"]


def test_a_trial_that_ran_into_the_kept_share_still_leaves_the_retime_its_share(
    tmp_path, monkeypatch
):
    clock = FakeClock()
    monkeypatch.setattr(search_engine, "CLOCK", clock)
    ex = FakeExecutor({n: 2.0 + n / 10 for n in range(1, 40)}, clock=clock, step_s=30.0)
    ex.on_retime = lambda: setattr(
        ex, "final", {r["trial"]: 3.0 for r in ex.retime_specs[-1]["retime"]}
    )
    cfg = _config(tmp_path, max_trials=None, budget_s=100.0, final_share=0.2, trial_timeout_s=60.0)
    res = run_search(cfg, ex, model_info=INFO, started=clock.t)
    # trials end at 30, 60, 90 s: the third started before the kept 20 s and ran into them
    assert len(ex.specs) == 3
    assert ex.retime_specs[0]["time_limit_s"] == pytest.approx(20.0 - 5.0)
    assert res.final.done
