"""What the bundle relies on: workers from its own executable, the smoke run, the icons."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from studio.workers.worker_process import worker_command

ROOT = Path(__file__).resolve().parents[2]


def test_workers_start_from_the_bundles_own_executable(monkeypatch):
    assert worker_command("/usr/bin/python3") == ["/usr/bin/python3", "-m", "studio.workers.entry"]
    assert worker_command("py", serve=True)[-1] == "--serve"
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/accel-studio/accel-studio")
    assert worker_command("/usr/bin/python3", serve=True) == [
        "/opt/accel-studio/accel-studio",
        "--studio-worker",
        "--serve",
    ]


def test_icons_and_desktop_files_are_there():
    icons = ROOT / "resources" / "icons"
    assert (icons / "accel-studio.svg").is_file()
    for size in (16, 32, 48, 64, 128, 256, 512):
        png = (icons / f"accel-studio-{size}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        # IHDR width and height (big endian) are the file's size.
        assert int.from_bytes(png[16:20], "big") == size == int.from_bytes(png[20:24], "big")
    desktop = (ROOT / "packaging/linux/io.github.accelstudio.AccelStudio.desktop").read_text()
    assert "Exec=accel-studio" in desktop and "Icon=io.github.accelstudio.AccelStudio" in desktop


@pytest.mark.slow
def test_smoke_mode_opens_runs_and_records(tmp_path):
    db = tmp_path / "smoke.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run(
        [sys.executable, "-m", "studio.smoke", str(db)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "smoke ok" in proc.stdout
    con = sqlite3.connect(db)
    try:
        runs = con.execute("SELECT id, status FROM runs").fetchall()
    finally:
        con.close()
    assert len(runs) == 1 and runs[0][1] == "succeeded"
