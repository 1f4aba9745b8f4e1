"""Speedup intervals in the CLI: `studio show` prints `2.31x [2.25-2.38]` and flags noisy
steps; `studio compare` calls overlapping intervals a tie; the live run printer too."""

from __future__ import annotations

import io
from pathlib import Path

from studio.cli import main
from studio.commands._runprint import RunPrinter
from studio.fmt import fmt_speedup, intervals_overlap
from studio.store import Repository

REASON = "2 cores, 1.7 busy with other processes"


def _step(speed, low, high, noisy=False):
    return {
        "event": "step_finished",
        "index": 0,
        "pass_name": "bf16",
        "status": "succeeded",
        "duration_s": 0.1,
        "metrics": {
            "latency_p50_ms": 4.0 / speed,
            "speedup": speed,
            "speedup_low": low,
            "speedup_high": high,
            "noisy": 1.0 if noisy else 0.0,
        },
        "parity": {"passed": True, "outputs": [{"name": "out", "max_abs": 0.0, "passed": True}]},
        "artifacts": [],
        "details": {"timing": {"noise_reason": REASON if noisy else None}},
    }


def _fill(db: Path, steps: list[dict]) -> list[str]:
    repo = Repository.open(db)
    ids = []
    for step in steps:
        r = repo.create_run(model_source="zoo:mlp", recipe={"name": "bf16-mlp"})
        repo.record_event(
            r.id,
            {
                "event": "run_started",
                "run_dir": "",
                "model_source": "zoo:mlp",
                "model_kind": "torch",
                "device": "cpu",
                "recipe": {"name": "bf16-mlp"},
                "environment": {"threads": 2},
                "num_steps": 1,
                "baseline": {"latency_p50_ms": 4.0},
            },
        )
        repo.record_event(r.id, step)
        repo.record_event(r.id, {"event": "run_finished", "status": "succeeded", "duration_s": 1})
        ids.append(r.id)
    repo.close()
    return ids


def test_formatting():
    m = {"speedup": 2.3149, "speedup_low": 2.251, "speedup_high": 2.3799}
    assert fmt_speedup(m) == "2.31x [2.25-2.38]"
    assert fmt_speedup({**m, "noisy": 1.0}) == "2.31x [2.25-2.38]~"
    assert fmt_speedup({"speedup": 1.5}) == "1.50x"  # an old run: no made-up interval
    assert fmt_speedup({}) == "-"
    assert intervals_overlap(m, {"speedup": 2.4, "speedup_low": 2.37, "speedup_high": 2.5})
    assert not intervals_overlap(m, {"speedup": 2.6, "speedup_low": 2.5, "speedup_high": 2.7})
    assert intervals_overlap(m, {"speedup": 2.6}) is None


def test_show_prints_the_interval_and_the_noise(tmp_path, capsys):
    db = tmp_path / "h.db"
    (rid,) = _fill(db, [_step(2.3149, 2.251, 2.3799, noisy=True)])
    assert main(["--db", str(db), "show", rid]) == 0
    out = capsys.readouterr().out
    assert "2.31x [2.25-2.38]~" in out
    assert f"noisy timing in step(s) 1: {REASON}" in out


def test_compare_calls_overlapping_intervals_a_tie(tmp_path, capsys):
    db = tmp_path / "h.db"
    a, b, c = _fill(
        db, [_step(2.31, 2.25, 2.38), _step(2.36, 2.30, 2.41), _step(3.0, 2.9, 3.1, noisy=True)]
    )
    assert main(["--db", str(db), "compare", a, b]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if " speedup " in f" {x} ")
    assert "2.31x [2.25-2.38] =" in line and "2.36x [2.30-2.41] =" in line
    assert "within noise" in out
    assert main(["--db", str(db), "compare", a, c]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if " speedup " in f" {x} ")
    assert " =" not in line and "3.00x [2.90-3.10]~" in line
    assert "within noise" not in out and "busy machine" in out


def test_live_printer_shows_interval_and_one_noise_line():
    buf = io.StringIO()
    p = RunPrinter(buf)
    p.on_event(
        {
            "event": "run_started",
            "baseline": {"latency_p50_ms": 4.0},
            "num_steps": 1,
            "model_source": "zoo:mlp",
            "model_kind": "torch",
            "device": "cpu",
            "environment": {},
        }
    )
    p.on_event(_step(2.3149, 2.251, 2.3799, noisy=True))
    text = buf.getvalue() + p.summary()
    assert text.count("2.31x [2.25-2.38]~") == 2  # the live line and the table
    assert f"noisy timing in step(s) 1: {REASON}" in text


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
