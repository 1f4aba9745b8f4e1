"""`studio serve-test` of a generation run (issue 31, part 7): the run's stateful LM found from
its recorded steps, a clear refusal for a generation run without one, hostile numbers refused,
the GUI's reason the same as the CLI's, a real served test stored and printed, and Ctrl-C leaving no
process behind. Tiny decoder (tests/accel/tiny_decoder.py), no timing assertions."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from studio.cli import main
from studio.store import Repository

ROOT = Path(__file__).resolve().parents[2]
BENCH = {"workload": "generate", "prompt_tokens": 8, "new_tokens": 4, "warmup": 1, "iters": 2}


@pytest.fixture(scope="module")
def stateful_ir(tmp_path_factory):
    pytest.importorskip("openvino_genai")
    from tests.accel.test_openvino_stateful import EXACT, _apply, _torch_lm
    from tests.accel.tiny_decoder import llama

    ir, _ = _apply("openvino_stateful", _torch_lm(llama), EXACT, tmp_path_factory.mktemp("lm"))
    return Path(ir.runtime_file)


def _record(repo, tmp_path: Path, steps: list[tuple[str, dict, Path]], bench=BENCH) -> str:
    """A succeeded run of ``steps`` ((pass, params, model file)) with a generation recipe."""
    recipe = {"name": "gen", "benchmark": bench, "steps": [{"pass": p} for p, _, _ in steps]}
    run = repo.create_run(model_source="hf:llama_small", recipe=recipe)
    run_dir = tmp_path / run.id
    run_dir.mkdir()
    repo.record_event(
        run.id,
        {"event": "run_started", "run_dir": str(run_dir), "model_source": "hf:llama_small",
         "model_kind": "torch", "device": "cpu", "recipe": recipe, "environment": {},
         "num_steps": len(steps), "baseline": {}},
    )  # fmt: skip
    for i, (name, params, model) in enumerate(steps):
        repo.record_event(
            run.id, {"event": "step_started", "index": i, "pass_name": name, "params": params}
        )
        repo.record_event(
            run.id,
            {"event": "step_finished", "index": i, "pass_name": name, "status": "succeeded",
             "duration_s": 0.1, "metrics": {}, "parity": {"passed": True, "outputs": []},
             "artifacts": [{"kind": "model", "path": str(model), "sha256": "", "bytes": 1}],
             "details": {"precision_ran": "f32"} if name == "openvino_stateful" else {}},
        )  # fmt: skip
    repo.record_event(run.id, {"event": "run_finished", "status": "succeeded", "duration_s": 1})
    return run.id


def _copy_ir(ir: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ir, folder / "model.xml")
    shutil.copy2(ir.with_suffix(".bin"), folder / "model.bin")
    return folder / "model.xml"


STATEFUL = {"precision": "f32", "kv_cache_precision": "f32"}


def test_a_generation_run_without_a_stateful_lm_is_refused_saying_what_to_add(tmp_path, capsys):
    from studio.errors import UserError
    from studio.serve_test import lm_job, unavailable_reason

    db = tmp_path / "r.db"
    repo = Repository.open(db)
    pt = tmp_path / "model.pt"
    pt.write_bytes(b"x")
    torch_run = _record(repo, tmp_path, [("bf16", {}, pt)])
    with pytest.raises(UserError, match="not a stateful OpenVINO LM") as err:
        lm_job(repo, torch_run)
    assert "Add an openvino_stateful step" in str(err.value) and "after bf16" in str(err.value)
    # a forward run is not a generation run: the forward serve test is for it
    fwd = repo.create_run(model_source="zoo:mlp", recipe={"name": "f", "benchmark": {}}).id
    repo.record_event(fwd, {"event": "run_finished", "status": "succeeded", "duration_s": 1})
    assert lm_job(repo, fwd) is None
    repo.close()
    assert main(["--db", str(db), "serve-test", torch_run[:10], "--clients", "1"]) == 2
    assert "openvino_stateful" in capsys.readouterr().err
    repo = Repository.open(db)
    # the GUI's Serve test dialog says the same
    assert "Add an openvino_stateful step" in unavailable_reason(repo, torch_run)
    repo.close()


def test_the_job_carries_the_runs_model_settings_and_hostile_counts_are_refused(tmp_path, capsys):
    from studio.serve_test import lm_job

    db = tmp_path / "j.db"
    repo = Repository.open(db)
    ir = tmp_path / "m" / "model.xml"
    ir.parent.mkdir()
    ir.write_text("<net/>")  # only recorded here: nothing loads it
    params = {"precision": "auto", "kv_cache_precision": "f16"}
    run = _record(repo, tmp_path, [("openvino_stateful", params, ir)], {**BENCH, "threads": 2})
    job, art = lm_job(repo, run, clients=[1, 3], requests=None, duration_s=None, port=None)
    repo.close()
    assert (job.model_path, job.prompt_tokens, job.new_tokens) == (str(ir), 8, 4)
    assert job.clients == [1, 3] and art["pass"] == "openvino_stateful"
    assert job.options.session_options() == {
        "device": "CPU", "performance_hint": "latency", "precision": "f32",
        "precision_auto": True, "kv_cache_precision": "f16", "threads": 2,
    }  # fmt: skip
    for argv, named in (
        (["--clients", "1,100000"], "clients"),
        (["--clients", "-2"], "--clients"),
        (["--requests", "-1"], "requests"),
        (["--batch", "1,2"], "--batch"),
    ):
        assert main(["--db", str(db), "serve-test", run[:10], *argv]) == 2, argv
        assert named in capsys.readouterr().err, argv


@pytest.mark.slow  # two Triton servers
def test_serve_test_of_a_generation_run_stores_and_prints_the_table(stateful_ir, tmp_path, capsys):
    from studio.store.serve_tests import serve_tests

    db = tmp_path / "e.db"
    repo = Repository.open(db)
    run = _record(
        repo, tmp_path, [("openvino_stateful", STATEFUL, _copy_ir(stateful_ir, tmp_path / "ir"))]
    )
    repo.close()
    argv = ["--db", str(db), "serve-test", run[:10], "--clients", "2", "--requests", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "8 prompt tokens (seeded ids), 4 new tokens per request" in out
    rows = [
        line.split()
        for line in out.splitlines()
        if line.startswith(("no continuous", "continuous"))
    ]
    assert [r[-7] for r in rows] == ["2", "2"]  # the clients column of both modes
    assert "2 clients: continuous batching" in out and "x the tokens/s of" in out
    repo = Repository.open(db)
    (test,) = serve_tests(repo, run)
    repo.close()
    assert test.workload == "generate" and (test.prompt_tokens, test.new_tokens) == (8, 4)
    off, on = test.generation_pair(2)
    assert off.tokens == on.tokens == 16 and off.errors == on.errors == 0
    saved = json.loads((tmp_path / run / "serve_test.json").read_text())
    assert saved["workload"] == "generate" and len(saved["load"]) == 2


def _descendants(pid: int) -> list[Any]:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list[Any]) -> list[Any]:
    import psutil

    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.slow
def test_ctrl_c_while_clients_stream_leaves_no_process_behind(stateful_ir, tmp_path):
    db = tmp_path / "c.db"
    repo = Repository.open(db)
    run = _record(
        repo, tmp_path, [("openvino_stateful", STATEFUL, _copy_ir(stateful_ir, tmp_path / "ir"))]
    )
    repo.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT), ACCEL_STUDIO_HOME=str(tmp_path / "home"))
    p = subprocess.Popen(
        [sys.executable, "-m", "studio", "--db", str(db), "serve-test", run[:10],
         "--clients", "1,2", "--requests", "10000", "--duration", "300"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # its own process group, as a shell's job; Ctrl-C as a terminal sends it
        process_group=0,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert p.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 240
    for line in p.stderr:  # wait until the server is up and the clients stream
        seen.append(line)
        if "starting Triton (no continuous batching)" in line:
            break
        assert time.monotonic() < deadline, "".join(seen)
    time.sleep(8.0)
    procs = _descendants(p.pid)
    assert any("tritonserver" in " ".join(_cmdline(q)) for q in procs), "".join(seen)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=90)
    assert p.returncode == 130, "".join(seen) + err
    assert "Traceback" not in err, err
    time.sleep(1.0)
    assert _alive(procs) == [], "processes of the serve test outlived it"


def _cmdline(proc: Any) -> list[str]:
    try:
        return proc.cmdline()
    except Exception:  # noqa: BLE001 - gone or not ours
        return []
