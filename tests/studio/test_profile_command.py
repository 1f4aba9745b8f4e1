"""Tests for `studio profile`."""

from __future__ import annotations

import json

from studio.cli import main


def test_profile_summary(capsys):
    assert main(["profile", "zoo:mlp", "--iters", "3", "--warmup", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "model        zoo:mlp (torch)" in out
    assert "parameters   2.11M" in out  # 1024*1024*2 + 1024*10 + biases
    assert "inputs       x:float32[8,1024]" in out
    assert "latency p50" in out and "latency p90" in out and "samples/s" in out
    assert "self ms" not in out  # no layer table without --layers


def test_profile_layers_table_trace_and_json(capsys, tmp_path):
    trace = tmp_path / "trace.json"
    out_json = tmp_path / "out.json"
    argv = [
        "profile",
        "zoo:mlp",
        "--iters",
        "3",
        "--warmup",
        "1",
        "--threads",
        "1",
        "--layers",
        "--ops",
    ]
    argv += ["--top", "3", "--trace", str(trace), "--json", str(out_json)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("layer "))
    assert lines[head].split() == [
        "layer",
        "type",
        "self",
        "ms",
        "incl.",
        "ms",
        "self",
        "%",
        "calls",
        "FLOPs",
        "params",
        "activations",
        "weights",
    ]  # the Profile panel's columns (studio.tables), the same in the CLI
    assert set(lines[head + 1]) <= {"-", " "}
    table = []
    for ln in lines[head + 2 :]:
        if not ln.strip():
            break
        table.append(ln)
    assert len(table) == 3
    # columns line up: every row as wide as the rule (last column right-aligned)
    assert {len(ln) for ln in table} == {len(lines[head + 1])}
    by_name = {ln.split()[0]: ln.split() for ln in table}
    if "fc1" in by_name:
        assert by_name["fc1"][1] == "Linear"
        # 2*8*1024*1024 FLOPs, 1024*1024+1024 params, then activations and weights in bytes
        assert by_name["fc1"][-6:] == ["16.78M", "1.05M", "32.0", "KiB", "4.0", "MiB"]
    assert "operator" in out and "aten::addmm" in out
    assert json.loads(trace.read_text())["traceEvents"]
    data = json.loads(out_json.read_text())
    assert data["benchmark"]["iters"] >= 3
    names = {r["name"] for r in data["profile"]["rows"]}
    assert names == {"", "fc1", "act1", "fc2", "act2", "fc3", "(unattributed)"}


def test_profile_bad_args(capsys):
    assert main(["profile", "zoo:mlp", "--iters", "0"]) == 2
    assert "--iters" in capsys.readouterr().err


def test_profile_device_errors(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["profile", "zoo:mlp", "--device", "cuda:0"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert main(["profile", "zoo:mlp", "--device", "tpu"]) == 2
    assert "unknown --device" in capsys.readouterr().err
