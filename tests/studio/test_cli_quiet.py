"""A quiet command line: users see the studio's own output; other libraries' warnings go to
the log file and to the terminal only with -v."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from studio.logs import setup_logging

ROOT = Path(__file__).resolve().parents[2]
# Lines the studio itself writes to stderr: its printer's warnings/notes and its own loggers.
OWN_LINE = re.compile(r"^(warning: |error: |note: |interrupted|  |WARNING (accel|studio)[.:])")


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    logging.captureWarnings(False)
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def test_foreign_warnings_go_to_the_log_file_not_the_terminal(
    tmp_path, monkeypatch, capsys, restore_logging
):
    monkeypatch.setenv("ACCEL_STUDIO_HOME", str(tmp_path))
    setup_logging(verbose=False)
    logging.getLogger("torchao").warning("Failed to load the mxfp8 kernels")
    with warnings.catch_warnings():  # shown even if an earlier test made the same warning
        warnings.simplefilter("always")
        warnings.warn_explicit("pytree is deprecated", FutureWarning, "torch/utils/_pytree.py", 1)
    logging.getLogger("accel.runner").warning("step 2 kept Gemm in float32")
    for h in logging.getLogger().handlers:
        h.flush()
    err = capsys.readouterr().err
    assert "step 2 kept Gemm" in err
    assert "mxfp8" not in err and "pytree" not in err
    log = (tmp_path / "logs" / "studio.log").read_text()
    assert "mxfp8" in log and "pytree is deprecated" in log and "step 2 kept Gemm" in log


def test_verbose_shows_foreign_warnings(tmp_path, monkeypatch, capsys, restore_logging):
    monkeypatch.setenv("ACCEL_STUDIO_HOME", str(tmp_path))
    setup_logging(verbose=True)
    logging.getLogger("torchao").warning("Failed to load the mxfp8 kernels")
    assert "mxfp8" in capsys.readouterr().err


def _studio(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ACCEL_STUDIO_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run(
        [sys.executable, "-m", "studio", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _foreign_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not OWN_LINE.match(ln)]


def test_studio_passes_prints_no_foreign_lines(tmp_path):
    out = _studio(["passes"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert _foreign_lines(out.stderr) == []


@pytest.mark.slow
def test_studio_run_of_a_sample_recipe_prints_no_foreign_lines(tmp_path):
    recipe = tmp_path / "mlp.yaml"
    recipe.write_text(
        (ROOT / "resources" / "recipes" / "mlp_onnx.yaml")
        .read_text()
        .replace("iters: 50", "iters: 4")
    )
    out = _studio(["--db", str(tmp_path / "s.db"), "run", str(recipe)], tmp_path)
    assert out.returncode == 0, out.stderr
    assert _foreign_lines(out.stderr) == [], out.stderr


def test_torch_own_log_lines_go_to_the_log_file(tmp_path):
    """torch prints its loggers' warnings with its own stderr handler (`W1205 ...
    torch/utils/_pytree.py:630] ...`, shown by `studio optimize hf:resnet50` while the
    model was inspected): after setup_logging they reach the log file, not the terminal."""
    code = (
        "import logging\n"
        "from studio.logs import setup_logging\n"
        "setup_logging(verbose=False)\n"
        "import torch\n"
        "logging.getLogger('torch.utils._pytree').warning('pytree register_constant noise')\n"
    )
    env = dict(os.environ, ACCEL_STUDIO_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "register_constant noise" not in out.stderr
    assert "register_constant noise" in (tmp_path / "logs" / "studio.log").read_text()


def test_a_workers_foreign_warning_goes_to_the_log_file(
    tmp_path, monkeypatch, capsys, restore_logging
):
    """`studio run` prints what its worker forwards: the studio's own warnings on stderr,
    another library's (torchao's kernels that did not load) only in the log file."""
    from studio.commands.run import worker_log

    monkeypatch.setenv("ACCEL_STUDIO_HOME", str(tmp_path))
    setup_logging(verbose=False)
    worker_log({"level": "warning", "logger": "torchao", "message": "Failed to load _C_mxfp8"})
    worker_log({"level": "warning", "logger": "accel.runner", "message": "kept Gemm in fp32"})
    for h in logging.getLogger().handlers:
        h.flush()
    err = capsys.readouterr().err
    assert "warning: kept Gemm in fp32" in err and "mxfp8" not in err
    assert "Failed to load _C_mxfp8" in (tmp_path / "logs" / "studio.log").read_text()
