"""studio.workers.confine: the folders a job's box names, computed from its JobSpec."""

from __future__ import annotations

import socket
from pathlib import Path

from studio.workers.job_box import job_box, source_paths
from studio.workers.protocol import JobSpec


def test_sources_name_their_folders_and_built_ins_none(tmp_path):
    (tmp_path / "models").mkdir()
    assert source_paths("zoo:mlp(hidden=8)", tmp_path) == []
    assert source_paths("models/m.onnx", tmp_path) == [(tmp_path / "models").resolve()]
    assert source_paths("nets.py:build@w/weights.pt", tmp_path) == [
        (tmp_path / "w").resolve(),
        tmp_path.resolve(),
    ]
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("raise SystemExit('imported!')\n")
    assert source_paths("mypkg.nets:build", tmp_path) == [(tmp_path / "mypkg").resolve()]


def test_a_run_reads_its_model_and_data_and_writes_its_run_folder(tmp_path):
    recipe = {
        "model": {"source": str(tmp_path / "in" / "m.pt2")},
        "data": {"calibration": str(tmp_path / "data" / "calib.npz")},
        "steps": [],
    }
    spec = JobSpec(job_id="j", kind="run_recipe", params={"recipe": recipe, "out": "run"})
    box = job_box(spec, tmp_path, tmp_path / "tmp")
    assert (tmp_path / "in").resolve() in box.read
    assert (tmp_path / "data").resolve() in box.read
    assert box.write[:2] == (tmp_path / "tmp", (tmp_path / "run").resolve())
    assert (tmp_path / "run").is_dir() and box.tcp_ports == () and box.socket_families == ()


def test_a_profile_writes_only_its_trace_file(tmp_path):
    trace = tmp_path / "out" / "trace.json"
    spec = JobSpec(
        job_id="j", kind="profile", params={"model": "zoo:mlp", "trace_path": str(trace)}
    )
    box = job_box(spec, tmp_path, tmp_path / "tmp")
    assert box.write == (tmp_path / "tmp", trace.resolve()) and trace.is_file()


def test_a_serve_test_gets_three_free_loopback_ports(tmp_path):
    spec = JobSpec(
        job_id="j", kind="serve_test", params={"artifact_path": str(tmp_path / "m.onnx")}
    )
    box = job_box(spec, tmp_path, tmp_path / "tmp")
    base = spec.params["port"]
    assert box.tcp_ports == (base, base + 1, base + 2)
    assert socket.AF_INET in box.socket_families and socket.AF_UNIX in box.socket_families
    for port in box.tcp_ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free
    assert Path(tmp_path).resolve() in box.read
