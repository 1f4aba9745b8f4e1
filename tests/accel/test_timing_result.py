"""The typed timing result (accel.timing.result.StepTiming): its JSON round trip, the rule
that a row agrees with itself, and the covering interval the comparison reports."""

from __future__ import annotations

import json

import pytest

from accel.events import RunStarted, StepFinished, event_from_dict
from accel.timing.result import Interval, Latency, StepTiming, baseline_timing
from accel.timing.stats import covering


def _timing(**kw) -> StepTiming:
    base = dict(
        mode="interleaved",
        reference=Latency(10.0, 9.5, 10.4, p90_ms=11.0, samples=48, batch=1),
        step=Latency(4.0, 3.9, 4.2, p90_ms=4.5, first_call_ms=30.0, samples=48, batch=1),
        speedup=2.5,
        speedup_low=2.4,
        speedup_high=2.6,
        rounds=12,
        threads=2,
        cpus=(1,),
        placement="timed on CPU 1 with 1 thread(s): CPU 0 busy with other processes",
        noisy=True,
        noise_reason="2 cores, 1.7 busy with other processes",
        noise={"cores": 2, "other_cores": 1.7},
    )
    base.update(kw)
    return StepTiming(**base)


def test_json_round_trip_gives_the_same_record():
    t = _timing()
    back = StepTiming.from_json(json.loads(json.dumps(t.to_json())))
    assert back == t
    assert back.cpus == (1,) and back.noise == {"cores": 2, "other_cores": 1.7}
    assert isinstance(back.reference, Latency) and back.step.first_call_ms == 30.0
    base = baseline_timing(Latency(10.0, 9.0, 11.0), rounds=12, threads=2)
    assert StepTiming.from_json(json.loads(json.dumps(base.to_json()))) == base
    assert base.p50_ms == 10.0 and base.p50_step_ms is None and base.speedup_bounds is None


def test_json_form_rejects_unknown_fields_and_modes():
    d = _timing().to_json()
    with pytest.raises(ValueError, match="unknown StepTiming fields"):
        StepTiming.from_json({**d, "latency": 1.0})
    with pytest.raises(ValueError, match="mode"):
        StepTiming.from_json({**d, "mode": "sequential"})
    with pytest.raises(ValueError, match="unknown Latency fields"):
        StepTiming.from_json({**d, "step": {"p50_ms": 1.0, "median": 2.0}})
    assert StepTiming.looks_like(d) and not StepTiming.looks_like({"mode": "sequential"})


def test_events_carry_the_typed_result_through_json():
    t = _timing()
    ev = StepFinished(0, "x", "succeeded", 1.0, {"size_bytes": 4.0}, None, [], timing=t)
    wire = json.loads(json.dumps(ev.to_dict()))
    assert wire["timing"]["step"]["p50_ms"] == 4.0
    assert event_from_dict(wire) == ev
    started = RunStarted("d", "zoo:mlp", "torch", "cpu", {}, {}, 1, baseline_timing=t)
    assert event_from_dict(json.loads(json.dumps(started.to_dict()))).baseline_timing == t


def test_a_row_agrees_with_itself_only_when_the_p50_ratio_is_inside_the_interval():
    assert _timing().consistent()  # 10 / 4 = 2.5 in [2.4, 2.6]
    assert not _timing(speedup=9.2, speedup_low=9.0, speedup_high=9.4).consistent()
    # timed apart: no interval, the speedup is the ratio itself
    assert _timing(mode="apart", speedup=2.5, speedup_low=None, speedup_high=None).consistent()
    assert not _timing(mode="apart", speedup=3.0, speedup_low=None, speedup_high=None).consistent()
    # the original's row and old rows without a reference have nothing to contradict
    assert _timing(reference=None).consistent()


def test_covering_widens_the_interval_to_the_p50_ratio_and_keeps_the_value():
    iv = Interval(2.0, 1.9, 2.1)
    assert covering(iv, 2.05) == iv
    wide = covering(iv, 2.3)
    assert (wide.value, wide.low, wide.high) == (2.0, 1.9, 2.3)
    assert covering(iv, 1.5).low == 1.5
