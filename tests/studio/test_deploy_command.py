"""`studio deploy RUN --triton DIR`: the model is loaded, checked and timed in a confined
worker job, never in the command's own process; the repository it writes parses back."""

from __future__ import annotations

import json

import pytest

from studio.cli import main
from studio.store import Repository

RECIPE = {
    "name": "mlp-onnx",
    "model": {"source": "zoo:mlp(in_features=16, hidden=32)", "input_spec": "x:float32[batch,16]"},
    "benchmark": {"warmup": 0, "iters": 2, "rounds": 2, "min_time_s": 0},
    "steps": [{"pass": "export_onnx"}],
}


@pytest.mark.slow
def test_deploy_runs_in_a_worker_and_writes_a_checked_repository(tmp_path, monkeypatch, capsys):
    import accel.deploy.triton as triton

    db = str(tmp_path / "d.db")
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps(RECIPE))
    assert main(["--db", db, "run", str(recipe), "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    with Repository.open(db) as repo:
        (run,) = repo.list_runs()

    def not_here(*args, **kwargs):
        raise AssertionError("the deploy loaded the model in the command's own process")

    monkeypatch.setattr(triton, "write_repository", not_here)
    out = tmp_path / "triton"
    code = main(["--db", db, "deploy", run.id[:8], "--triton", str(out), "--json"])
    text = capsys.readouterr().out
    assert code == 0, text
    report = json.loads(text)
    assert report["platform"] == "onnxruntime_onnx" and report["max_batch_size"] > 0
    config = (out / "model" / "config.pbtxt").read_text()
    parsed = triton.parse_config(config)
    assert [i.name for i in parsed.input] == ["x"]
    assert (out / "model" / "1" / "model.onnx").is_file()
