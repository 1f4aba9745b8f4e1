"""The real-display tier (marker ``display``): the studio on an X server (Xvfb) with Qt's
xcb platform, driven by real input events in its own process (tests/display/driver.py).

Select it alone with ``pytest -m display``. Each test skips, saying why, where Xvfb or Qt's
xcb libraries are missing (.ci/run installs them with apt where it can)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
XCB_PROBE = "from PySide6.QtWidgets import QApplication; QApplication([])"


class XServer:
    """An Xvfb of one screen size on a display number it picked itself (-displayfd)."""

    def __init__(self, width: int, height: int) -> None:
        read, write = os.pipe()
        self.proc = subprocess.Popen(
            [
                "Xvfb",
                "-displayfd",
                str(write),
                "-screen",
                "0",
                f"{width}x{height}x24",
                "-nolisten",
                "tcp",
            ],
            pass_fds=(write,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(write)
        with os.fdopen(read) as fh:
            number = fh.readline().strip()
        if not number:
            err = (
                self.proc.stderr.read().decode(errors="replace")[-300:] if self.proc.stderr else ""
            )
            self.stop()
            raise RuntimeError(f"Xvfb did not start: {err}")
        self.display = f":{number}"

    def env(self, home: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DISPLAY=self.display,
            QT_QPA_PLATFORM="xcb",
            ACCEL_STUDIO_HOME=str(home),
            XDG_CONFIG_HOME=str(home / "config"),
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        )
        env.pop("WAYLAND_DISPLAY", None)
        env.pop("ACCEL_STUDIO_WARM_WORKER", None)  # the app as people start it
        return env

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _xcb_problem(server: XServer, home: Path) -> str | None:
    """Why Qt cannot open a window on ``server`` (None: it can)."""
    probe = subprocess.run(
        [sys.executable, "-c", XCB_PROBE],
        env=server.env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode == 0:
        return None
    return "Qt's xcb platform cannot start here: " + probe.stderr.strip()[-300:]


@pytest.fixture
def xserver(request, tmp_path):
    """``xserver(width, height)`` starts an Xvfb; the test is skipped when it cannot."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    started: list[XServer] = []

    def start(width: int = 1366, height: int = 768) -> XServer:
        try:
            server = XServer(width, height)
        except RuntimeError as exc:
            pytest.skip(str(exc))
        started.append(server)
        problem = _xcb_problem(server, tmp_path / "probe-home")
        if problem:
            pytest.skip(problem)
        return server

    yield start
    for server in started:
        server.stop()


@dataclass
class Played:
    """What a scenario left: the process's exit status, its stderr, its step log."""

    returncode: int
    stderr: str
    steps: list[dict] = field(default_factory=list)
    error: str = ""

    def step(self, name: str) -> dict:
        found = [s for s in self.steps if s["step"] == name]
        assert found, f"no step {name!r}: the log ends at {self.names()[-1:]}; {self.why()}"
        return found[-1]

    def names(self) -> list[str]:
        return [s["step"] for s in self.steps]

    def why(self) -> str:
        return (self.error or self.stderr)[-2500:]


def play(server: XServer, scenario: str, out: Path, db: Path | None = None, timeout=240):
    """Run ``scenario`` in a studio process on ``server``; screenshots go to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    env = server.env(out / "home")
    if db is not None:
        env["STUDIO_DB"] = str(db)
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-m", "tests.display.driver", scenario, str(out)],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    log = out / "steps.jsonl"
    steps = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    error = (out / "error.txt").read_text() if (out / "error.txt").exists() else ""
    return Played(proc.returncode, proc.stderr, steps, error)
