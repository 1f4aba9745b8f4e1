"""Test helpers for timing rows: events that carry a StepTiming (as a worker sends them), and
the check that a table's row agrees with itself (p50_ref / p50_step inside the speedup's
interval), read back from the text a table shows."""

from __future__ import annotations

import re
from typing import Any

from accel.timing.result import Latency, StepTiming, baseline_timing

REASON = "2 cores, 1.7 busy with other processes"


def step_timing(speed, low, high, noisy=False, ref=10.0) -> StepTiming:
    """A step's timing whose two p50s give exactly ``speed`` (ref / step)."""
    step = ref / speed
    return StepTiming(
        mode="interleaved",
        reference=Latency(ref, ref * 0.98, ref * 1.02, samples=48),
        step=Latency(step, ref / high, ref / low, samples=48),
        speedup=speed,
        speedup_low=low,
        speedup_high=high,
        rounds=12,
        threads=2,
        noisy=noisy,
        noise_reason=REASON if noisy else None,
    )


def original_timing(ref=10.0) -> StepTiming:
    return baseline_timing(Latency(ref, ref * 0.98, ref * 1.02, samples=48), rounds=12)


def step_event(index, name, speed, low, high, noisy=False, max_abs=1e-3, ref=10.0) -> dict:
    return {
        "event": "step_finished",
        "index": index,
        "pass_name": name,
        "status": "succeeded",
        "duration_s": 0.1,
        "metrics": {"size_bytes": 4096.0},
        "parity": {"passed": True, "outputs": [{"name": "y", "max_abs": max_abs, "passed": True}]},
        "artifacts": [],
        "details": {},
        "timing": step_timing(speed, low, high, noisy, ref).to_json(),
    }


def started_event(num_steps: int, ref=10.0) -> dict:
    return {
        "event": "run_started",
        "run_dir": "",
        "model_source": "zoo:mlp",
        "model_kind": "torch",
        "device": "cpu",
        "recipe": {"name": "r"},
        "environment": {"threads": 2},
        "num_steps": num_steps,
        "baseline": {"size_bytes": 8192.0},
        "baseline_timing": original_timing(ref).to_json(),
    }


def finished_event(steps: list[dict]) -> dict:
    last = steps[-1]["timing"]
    noisy = [s for s in steps if s["timing"]["noisy"]]
    return {
        "event": "run_finished",
        "status": "succeeded",
        "duration_s": 1,
        "summary": {
            "final_speedup": last["speedup"],
            "final_speedup_low": last["speedup_low"],
            "final_speedup_high": last["speedup_high"],
            "final_timing": last,
            "noise": f"{len(noisy)} of {len(steps)} step(s) timed while the machine was busy: "
            f"{REASON}"
            if noisy
            else None,
        },
    }


# "10.0  4.329  2.31x [2.25-2.38]" (the noise mark and a tie mark may follow)
CELLS = re.compile(
    r"(?P<ref>\d+\.\d+)\s+\|?\s*(?P<p50>\d+\.\d+)\s+\|?\s*"
    r"(?P<s>\d+\.\d+)x \[(?P<lo>\d+\.\d+)-(?P<hi>\d+\.\d+)\]"
)


def rows_in(text: str) -> list[dict[str, float]]:
    """Every (ref p50, p50, speedup, low, high) a text table shows, in order."""
    return [{k: float(v) for k, v in m.groupdict().items()} for m in CELLS.finditer(text)]


def row_agrees(ref: float, p50: float, lo: float, hi: float) -> bool:
    """Whether ref / p50 lies inside [lo, hi], allowing for the cells' rounding (ms printed
    with 3 decimals, or 1 decimal from 10 ms up; speedups with 2)."""

    def slack(ms: float) -> float:
        return 0.05 if ms >= 10 else 0.0005

    worst_low = (ref - slack(ref)) / (p50 + slack(p50))
    worst_high = (ref + slack(ref)) / max(p50 - slack(p50), 1e-12)
    return worst_low <= hi + 0.005 and worst_high >= lo - 0.005


def assert_table_agrees(text: str, expect_rows: int) -> list[dict[str, Any]]:
    rows = rows_in(text)
    assert len(rows) >= expect_rows, text
    for r in rows:
        assert row_agrees(r["ref"], r["p50"], r["lo"], r["hi"]), (r, text)
    return rows
