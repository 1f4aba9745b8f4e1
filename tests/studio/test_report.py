"""Run reports without Qt: Pareto fronts and exports from store records."""

from __future__ import annotations

import csv
import io
import json

import pytest

from studio.report import pareto_front, runs_to_csv, runs_to_json, runs_to_markdown, step_rows


def test_pareto_front_keeps_only_undominated_points():
    pts = [(1.0, 0.1), (2.0, 0.2), (1.5, 0.3), (3.0, 0.5), (2.5, 0.6), (0.9, 0.01)]
    # (1.5, 0.3) is dominated by (2.0, 0.2); (2.5, 0.6) by (3.0, 0.5)
    assert pareto_front(pts) == [5, 0, 1, 3]
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [0, 1]  # equal points do not dominate


@pytest.fixture
def recorded(tmp_path):
    from accel.runner import run_recipe
    from studio.store import Repository

    repo = Repository.open(str(tmp_path / "r.db"))
    recipe = {
        "name": "cl",
        "model": {"source": "zoo:resnet"},
        "benchmark": {"warmup": 1, "iters": 2},
        "steps": [{"pass": "channels_last"}],
    }
    run = repo.create_run(model_source="zoo:resnet", recipe=recipe, name="cl")
    run_id = run.id if hasattr(run, "id") else run
    repo.set_status(run_id, "running")
    run_recipe(
        recipe, on_event=lambda e: repo.record_event(run_id, e.to_dict()), out_dir=tmp_path / "run"
    )
    yield repo, run_id
    repo.close()


def test_exports_of_a_recorded_run(recorded):
    repo, run_id = recorded
    d = repo.get_run(run_id)
    from accel.models import load_model

    assert d.model_content_hash == load_model("zoo:resnet").content_hash
    assert d.model_input_spec.startswith("x:float32[batch,3,64,64]")
    rows = step_rows(d)
    assert [r.pass_name for r in rows] == ["original", "channels_last"]
    assert rows[1].verdict == "pass" and rows[1].max_abs is not None and rows[1].max_abs < 1e-4
    table = list(csv.reader(io.StringIO(runs_to_csv([d]))))
    assert table[0][:6] == ["run", "model", "recipe", "status", "step", "pass"]
    col = {name: i for i, name in enumerate(table[0])}
    assert table[2][5] == "channels_last" and table[2][col["parity"]] == "pass"
    # the step's two p50s come from the comparison behind its speedup
    ref, p50 = float(table[2][col["ref_p50_ms"]]), float(table[2][col["p50_ms"]])
    low, high = float(table[2][col["speedup_low"]]), float(table[2][col["speedup_high"]])
    assert low * 0.999 <= ref / p50 <= high * 1.001
    assert rows[1].timing.consistent() and rows[0].timing.mode == "baseline"
    doc = json.loads(runs_to_json([d]))
    assert doc[0]["run"]["id"] == run_id
    md = runs_to_markdown([d])
    assert "| 1 | channels_last |" in md and "zoo:resnet" in md
