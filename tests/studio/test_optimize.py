"""`studio optimize`: trials in the worker pool recorded as runs, files, bad input."""

from __future__ import annotations

import socket
import time

import pytest
import yaml

from studio.cli import main
from studio.store import Repository
from studio.store.records import RunFilter
from tests.timing_rows import assert_table_agrees


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_optimize_writes_best_recipe_and_records_trials(tmp_path, capsys):
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    code = main(
        [
            "--db", str(db), "optimize", "zoo:mlp", "--trials", "3", "--budget", "5m",
            "--passes", "export_onnx,quantize_onnx_dynamic,onnxruntime",
            "--iters", "4", "--out", str(out), "--script",
            "--artifacts", str(tmp_path / "shared"),
            # ONNX Runtime's dynamic int8 keeps cosine 0.9999 with VNNI but 0.996 on an
            # AVX2-only CPU (u8 x s8 saturation): a budget both pass, so both int8 trials count
            "--max-cosine-drop", "0.01",
        ]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0, text
    assert "Pareto front" in text and "trial 2:" in text
    # each trial row: the original's p50 and the trial's from its comparison agree with its
    # speedup's interval (the trial table and the Pareto front)
    assert_table_agrees(text, 2)
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["model"]["source"] == "zoo:mlp"
    assert best["steps"][0]["pass"] == "export_onnx"
    assert best["gates"]["min_cosine"] == pytest.approx(0.99)
    assert (out / "best.py").read_text().startswith("#")
    # trial folders and the prefix cache go to the --artifacts folder
    folders = sorted(p.name for p in (tmp_path / "shared" / "trials").iterdir())
    assert folders[:2] == ["final_retime", "trial_000"]
    assert (tmp_path / "shared" / "cache").is_dir() and not (out / "trials").exists()
    repo = Repository.open(str(db))
    runs = repo.list_runs(RunFilter(tags=("search",)))
    # the trials, and the final side-by-side re-timing of the two trials with steps
    (final_run,) = [r for r in runs if "re-timing" in r.name]
    runs = [r for r in runs if r is not final_run]
    assert len(runs) == 3
    assert {r.status for r in runs} == {"succeeded"} and final_run.status == "succeeded"
    assert "final side-by-side re-timing of trials" in text and "<- chosen" in text
    assert "(the final side-by-side measurement)" in text
    timed = [r.final for r in runs if r.final is not None]
    assert timed and all(t.consistent() and t.p50_ref_ms > 0 for t in timed)
    # a later ONNX trial started from the first one's export
    assert "reused" in text
    # the search is recorded with its trials
    (search,) = repo.list_searches()
    assert search.status == "finished" and search.trials == 3
    assert search.summary["best"] is not None and search.summary["front"]
    assert search.summary["cache"]["hits"] >= 1
    final = search.summary["final"]
    assert final["done"] and final["run_id"] == final_run.id
    assert final["winner"] == search.summary["best"]
    assert final["timings"][str(final["winner"])]["speedup"] > 0
    # what the next search for a similar model starts from (accel.search.seeds.Prior)
    (prior,) = repo.search_priors()
    assert prior["family"] == "mlp" and prior["size_class"] == "small"
    assert prior["device"] == "cpu" and prior["objective"] == "latency"
    assert [s["pass"] for s in prior["steps"]] == [s["pass"] for s in best["steps"]]
    # the best's speedup from the final side-by-side measurement
    assert prior["score"] == pytest.approx(final["timings"][str(final["winner"])]["speedup"])
    assert {r.id for r in repo.list_runs(RunFilter(search_id=search.id))} == {r.id for r in runs}
    assert main(["--db", str(db), "history", "--searches"]) == 0
    listing = capsys.readouterr().out
    assert search.short_id in listing and "finished" in listing
    assert "(final side by side)" in listing
    assert main(["--db", str(db), "history", "--trials", search.id[:8]]) == 0
    listing = capsys.readouterr().out
    assert listing.count("search trial") == 3


def test_optimize_reports_constraints_no_recipe_meets(tmp_path, capsys):
    code = main(
        [
            "--db", str(tmp_path / "s.db"), "optimize", "zoo:mlp", "--trials", "2",
            "--passes", "bf16", "--max-cosine-drop", "0", "--iters", "2",
            "--out", str(tmp_path / "o"),
        ]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert code == 1
    assert "no trial met the constraints" in text and "bf16" in text and "cosine" in text
    assert not (tmp_path / "o" / "best.yaml").exists()
    (search,) = Repository.open(str(tmp_path / "s.db")).list_searches()
    assert search.status == "no_feasible" and "closest" in search.summary["reason"]


def test_optimize_allow_sensitivity_searches_exclude_sets(tmp_path, capsys):
    code = main(
        [
            "--db", str(tmp_path / "s.db"), "optimize", "zoo:mlp", "--trials", "6",
            "--passes", "quantize_dynamic_int8", "--allow", "sensitivity", "--iters", "2",
            "--max-cosine-drop", "0.01", "--out", str(tmp_path / "o"),
        ]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0, text
    assert "sensitivity analysis after the first seeds" in text
    assert "sensitivity: quantize_dynamic_int8 (local method) on 3 layers took" in text
    assert "quantize_dynamic_int8 searches exclude sets: none, top1" in text
    # every exclude set was tried (the space has 4 quantized variants + the original)
    assert "quantize_dynamic_int8 (float: fc" in text


@pytest.mark.slow  # the distillation trial trains for its 300 steps (about 40 s here)
def test_optimize_allow_prune_distill_searches_pruned_and_distilled_chains(tmp_path, capsys):
    code = main(
        [
            "--db", str(tmp_path / "s.db"), "optimize", "zoo:mlp", "--trials", "2",
            "--passes", "prune_channels,distill", "--allow", "prune,distill", "--iters", "2",
            "--max-cosine-drop", "1", "--out", str(tmp_path / "o"), "--objective", "size",
        ]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0, text
    assert "trial 1: prune_channels+distill  ok" in text  # a seed once both are allowed


def test_unreachable_cluster_fails_fast_and_records_nothing(tmp_path, capsys):
    db = tmp_path / "s.db"
    t0 = time.monotonic()
    code = main(
        [
            "--db", str(db), "optimize", "zoo:mlp", "--trials", "2",
            "--cluster", f"127.0.0.1:{_free_port()}", "--out", str(tmp_path / "o"),
        ]
    )  # fmt: skip
    assert time.monotonic() - t0 < 10
    assert code == 2
    err = capsys.readouterr().err
    assert "no Ray cluster answers at 127.0.0.1" in err and "ray start --head" in err
    repo = Repository.open(str(db))
    assert repo.list_runs() == [] and repo.list_searches() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "ten minutes"], "--budget"),
        (["--objective", "size", "--max-accuracy-drop", "0.01"], "--data"),
        (["--passes", "exprot_onnx"], "unknown pass"),
        (["--cluster", "nohost"], "HOST:PORT"),
        (["--allow", "prune,distil"], "--allow distil: not something to allow"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path, capsys, args, message):
    code = main(
        ["--db", str(tmp_path / "s.db"), "optimize", "zoo:mlp", "--out", str(tmp_path / "o"), *args]
    )
    assert code == 2
    assert message in capsys.readouterr().err


def test_a_finished_trial_line_names_each_cell_by_its_column():
    """The live log of `studio optimize` printed the reference's p50 as the trial's p50, the
    trial's p50 as its speedup and the speedup as its cosine drop, once the table had gained
    its reference column."""
    from types import SimpleNamespace

    from accel.timing.result import Latency, StepTiming
    from studio.commands.optimize import trial_line

    timing = StepTiming(
        mode="interleaved",
        reference=Latency(p50_ms=8.0, low_ms=7.0, high_ms=9.0),
        step=Latency(p50_ms=2.0, low_ms=1.9, high_ms=2.1),
        speedup=4.0,
        speedup_low=3.5,
        speedup_high=4.5,
    )
    trial = SimpleNamespace(
        number=3, label="fold_batchnorm+openvino", steps=[], status="ok", timing=timing,
        metrics={"cosine_drop": 1.5e-5, "size_bytes": 2048}, reused_steps=0, gate=None, error=None,
    )  # fmt: skip
    line = trial_line(trial)
    assert "trial 3: fold_batchnorm+openvino  ok" in line
    assert "ref p50 8.000 ms" in line, line
    assert "  p50 2.000 ms" in line, line
    assert "speedup 4.00x [3.50-4.50]" in line, line
    assert "cos drop 1.50e-05" in line and "size 2.0 KiB" in line, line
    # a generation objective's original is gated, not timed against itself: said so
    original = SimpleNamespace(**{**vars(trial), "number": 0, "label": "original", "timing": None})
    line = trial_line(original)
    assert "speedup -" in line and "the reference: not timed against itself" in line, line
