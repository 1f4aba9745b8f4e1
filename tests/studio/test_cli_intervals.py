"""Speedup intervals in the CLI: `studio show` prints `2.31x [2.25-2.38]` and flags noisy
steps; `studio compare` calls overlapping intervals a tie; the live run printer too."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from studio.cli import main
from studio.commands._runprint import RunPrinter
from studio.fmt import fmt_speedup, intervals_overlap
from studio.store import Repository
from tests.timing_rows import (
    REASON,
    assert_table_agrees,
    finished_event,
    started_event,
    step_event,
    step_timing,
)


def _step(speed, low, high, noisy=False):
    return step_event(0, "bf16", speed, low, high, noisy=noisy, ref=4.0)


def _fill(db: Path, steps: list[dict]) -> list[str]:
    repo = Repository.open(db)
    ids = []
    for step in steps:
        r = repo.create_run(model_source="zoo:mlp", recipe={"name": "bf16-mlp"})
        for ev in (started_event(1, ref=4.0), step, finished_event([step])):
            repo.record_event(r.id, ev)
        ids.append(r.id)
    repo.close()
    return ids


def test_formatting():
    m = step_timing(2.3149, 2.251, 2.3799)
    assert fmt_speedup(m) == "2.31x [2.25-2.38]"
    assert fmt_speedup(step_timing(2.3149, 2.251, 2.3799, noisy=True)) == "2.31x [2.25-2.38]~"
    old = dataclasses.replace(m, speedup=1.5, speedup_low=None, speedup_high=None)
    assert fmt_speedup(old) == "1.50x"  # an old run: no made-up interval
    assert fmt_speedup(None) == "-"
    assert intervals_overlap(m, step_timing(2.4, 2.37, 2.5))
    assert not intervals_overlap(m, step_timing(2.6, 2.5, 2.7))
    assert intervals_overlap(m, old) is None


def test_show_prints_the_interval_and_the_noise(tmp_path, capsys):
    db = tmp_path / "h.db"
    (rid,) = _fill(db, [_step(2.3149, 2.251, 2.3799, noisy=True)])
    assert main(["--db", str(db), "show", rid]) == 0
    out = capsys.readouterr().out
    assert "2.31x [2.25-2.38]~" in out
    assert f"noisy timing in step(s) 1: {REASON}" in out
    assert_table_agrees(out, 1)


def test_compare_calls_overlapping_intervals_a_tie(tmp_path, capsys):
    db = tmp_path / "h.db"
    a, b, c = _fill(
        db, [_step(2.31, 2.25, 2.38), _step(2.36, 2.30, 2.41), _step(3.0, 2.9, 3.1, noisy=True)]
    )
    assert main(["--db", str(db), "compare", a, b]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "bf16" in x and " speedup " in f" {x} ")
    assert "2.31x [2.25-2.38] =" in line and "2.36x [2.30-2.41] =" in line
    assert "within noise" in out
    assert main(["--db", str(db), "compare", a, c]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "bf16" in x and " speedup " in f" {x} ")
    assert " =" not in line and "3.00x [2.90-3.10]~" in line
    assert "within noise" not in out and "busy machine" in out


def test_live_printer_shows_interval_and_one_noise_line():
    buf = io.StringIO()
    p = RunPrinter(buf)
    p.on_event(started_event(1, ref=4.0))
    p.on_event(_step(2.3149, 2.251, 2.3799, noisy=True))
    text = buf.getvalue() + p.summary()
    assert text.count("2.31x [2.25-2.38]~") == 2  # the live line and the table
    assert f"noisy timing in step(s) 1: {REASON}" in text
    # each row: the original's p50 and the step's from the comparison behind its speedup
    rows = assert_table_agrees(text, 2)
    assert rows[0]["ref"] == 4.0 and rows[0]["p50"] == pytest.approx(4.0 / 2.3149, abs=1e-3)


def test_runs_recorded_before_the_typed_timing_still_show(tmp_path, capsys):
    """Flat metrics (the store's form before StepTiming) are read back as a StepTiming."""
    db = tmp_path / "old.db"
    repo = Repository.open(db)
    r = repo.create_run(model_source="zoo:mlp", recipe={"name": "old"})
    old_step = {
        "event": "step_finished",
        "index": 0,
        "pass_name": "bf16",
        "status": "succeeded",
        "duration_s": 0.1,
        "metrics": {
            "latency_p50_ms": 2.0,
            "speedup": 2.0,
            "speedup_low": 1.9,
            "speedup_high": 2.1,
            "baseline_latency_p50_ms": 4.0,
            "noisy": 0.0,
        },
        "parity": None,
        "artifacts": [],
        "details": {"timing": {"mode": "interleaved", "threads": 2}},
    }
    repo.record_event(r.id, {**started_event(1), "baseline": {"latency_p50_ms": 4.0}})
    repo.record_event(r.id, old_step)
    t = repo.get_run(r.id).step(0).timing
    assert (t.p50_ref_ms, t.p50_step_ms, t.speedup_bounds) == (4.0, 2.0, (1.9, 2.1))
    repo.close()
    assert main(["--db", str(db), "show", r.id]) == 0
    out = capsys.readouterr().out
    assert "2.00x [1.90-2.10]" in out
    assert_table_agrees(out, 1)


def test_pareto_with_intervals_keeps_ties_and_fastest_reports_them():
    from studio.report import fastest, pareto_front

    pts = [(6.59, 1e-3), (2.2, 1e-3), (2.3, 1e-4)]
    # Without intervals the 6.59x point (a noise spike) dominates everything at its error.
    assert pareto_front(pts) == [2, 0]
    wide = [(1.5, 9.0), (2.0, 2.4), (2.1, 2.5)]  # the spike's interval is wide
    assert pareto_front(pts, wide) == [2]  # tied on speed, the lower error wins
    assert fastest([p[0] for p in pts], wide) == [0, 1, 2]  # a three-way tie, no winner
    apart = [(6.4, 6.8), (2.1, 2.3), (2.2, 2.4)]
    assert fastest([p[0] for p in pts], apart) == [0]
    assert pareto_front(pts, apart) == [2, 0]
    assert pareto_front(pts, [None, None, None]) == pareto_front(pts)


def test_an_old_summary_shows_no_reference_from_another_timer(tmp_path):
    """A run summary from before the typed timing: its final speedup and the step's p50 are
    kept; its "baseline" p50 (the original's row, timed by another timer) is not shown as
    the reference of the step's comparison."""
    from studio.store.timing_keys import final_timing

    old = {
        "final_speedup": 2.08,
        "final_speedup_low": 1.9,
        "final_speedup_high": 2.2,
        "final_latency_p50_ms": 0.493,
        "baseline_latency_p50_ms": 0.372,  # 0.372 / 0.493 = 0.75x: the contradiction
        "noise": None,
    }
    t = final_timing(old)
    assert t.speedup == 2.08 and t.p50_step_ms == 0.493 and t.p50_ref_ms is None
    assert t.consistent()
    assert final_timing({}) is None
