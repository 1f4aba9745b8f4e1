"""The headless CLI: help, passes, run, export-script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from studio.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("profile", "passes", "run", "export-script"):
        assert cmd in out


def test_passes_lists_parameters(capsys):
    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    assert "channels_last:" in out and "--convert_inputs (boolean, default true)" in out
    assert main(["passes", "channels_last", "--json"]) == 0


def test_run_prints_a_step_table_and_exit_code(tmp_path, capsys):
    r = tmp_path / "r.yaml"
    r.write_text(
        yaml.safe_dump(
            {
                "model": {"source": "zoo:resnet"},
                "benchmark": {"warmup": 1, "iters": 3},
                "steps": [{"pass": "channels_last"}],
            }
        )
    )
    assert main(["run", str(r), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "channels_last" in out and "speedup" in out and "pass" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump({"model": {"source": "zoo:resnet"}, "steps": [{"pass": "chanels_last"}]})
    )
    assert main(["run", str(bad)]) == 2
    assert "Did you mean: channels_last" in capsys.readouterr().err


def test_export_script_writes_into_a_folder_that_does_not_exist_yet(tmp_path, monkeypatch):
    r = tmp_path / "r.yaml"
    r.write_text(yaml.safe_dump({"model": {"source": "zoo:mlp"}, "steps": [{"pass": "bf16"}]}))
    monkeypatch.chdir(tmp_path)
    assert main(["export-script", "r.yaml", "-o", "scripts/s.py"]) == 0
    assert "exported by Accel Studio" in (tmp_path / "scripts" / "s.py").read_text()


def test_export_script_runs_standalone(tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text(
        yaml.safe_dump(
            {
                "model": {"source": "zoo:resnet"},
                "benchmark": {"warmup": 1, "iters": 2},
                "steps": [{"pass": "channels_last"}],
            }
        )
    )
    script = tmp_path / "s.py"
    assert main(["export-script", str(r), "-o", str(script)]) == 0
    text = script.read_text()
    assert (
        "import accel" not in text
        and "from accel" not in text
        and "studio" not in text.split('"""')[2]
    )
    out = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "channels_last" in out.stdout
    assert (tmp_path / "o" / "step_00_channels_last" / "outputs.pt").is_file()


def test_the_studio_program_exits_without_the_interpreter_teardown(tmp_path):
    """Unloading torch, ONNX Runtime and OpenVINO took 2-3 s after every command (a Ctrl-C's
    stop time included): the program ends once its exit handlers ran and its output is
    flushed, without tearing the interpreter down."""
    code = (
        "import atexit, sys\n"
        "class Teardown:\n"
        "    def __del__(self, open=open):  # builtins are gone by then\n"
        f"        open({str(tmp_path / 'teardown')!r}, 'w').close()\n"
        "teardown = Teardown()  # freed when the interpreter clears __main__\n"
        f"atexit.register(lambda: open({str(tmp_path / 'atexit')!r}, 'w').close())\n"
        "sys.argv = ['studio', 'passes']\n"
        "from studio.__main__ import main\n"
        "sys.exit(main())\n"
    )
    env = dict(os.environ, ACCEL_STUDIO_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "fold_batchnorm" in out.stdout  # the output was flushed
    assert (tmp_path / "atexit").exists()  # the exit handlers ran
    assert not (tmp_path / "teardown").exists()  # the interpreter was not torn down
