"""Start-up of the studio window, against the floor of a bare ``import torch, PySide6`` process.

    .venv/bin/python bench/bench_startup.py [--rounds 3] [--cold-worker]

Each round starts, in turn, the floor (``python -c "import torch, PySide6.QtWidgets"``) and
the studio (offscreen, a fresh data folder and settings, so the demo model opens as on a
first start) in new processes, then the studio once more on the same data folder (a second
start: the demo's graph comes from the graph cache). Measured from just before each process
is spawned:

- window: the main window shown (first turn of its event loop after ``show()``);
- demo graph: the demo model's graph drawn in the Graph view;
- second start, demo graph: the same on the second start;
- open zoo:transformer: from the request to its graph drawn (a warm worker serves it);
- profile: from the request to the profile shown.

Prints medians in seconds and as ratios to the floor's median (targets: window <= 1.5x,
demo graph <= 2.5x, opening a second model <= 0.5x). ``--cold-worker`` turns the warm
worker off (ACCEL_STUDIO_WARM_WORKER=0) to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DRIVER = r"""
import json, os, sys, time
T0 = float(os.environ["BENCH_T0"])
marks = {}
def mark(name, value=None):
    marks[name] = (time.monotonic() - T0) if value is None else value
from studio.app import make_qapp, create_window
app = make_qapp()
from PySide6.QtCore import QSettings, QTimer
settings = QSettings(os.environ["BENCH_SETTINGS"], QSettings.Format.IniFormat)
win = create_window(os.environ["BENCH_DB"], settings=settings)
win.show()
QTimer.singleShot(0, lambda: mark("window"))
state, services = win.state, win.services
failures = []
services.jobFailed.connect(lambda kind, msg: failures.append(f"{kind}: {msg}"))
if os.environ.get("BENCH_DEMO_AGAIN") == "1":
    from studio.ui.main_window import DEMO_MODEL
    win.open_initial_model(DEMO_MODEL)
else:
    win.open_initial_model()
phase = {"name": "demo", "t": time.monotonic()}
full = os.environ.get("BENCH_FULL") == "1"

def drawn():
    return bool(win.graph_view._items) and state.graph is not None

def finish(code=0):
    print("BENCH " + json.dumps({"marks": marks, "failures": failures}), flush=True)
    services.shutdown(timeout=5)
    os._exit(code)

def tick():
    if failures:
        finish(1)
    now = time.monotonic()
    p = phase["name"]
    if p == "demo" and drawn():
        mark("demo_graph")
        if not full:
            finish()
        phase.update(name="wait_live", t=now)
    elif p == "wait_live" and not services.busy:
        win.open_model("zoo:transformer")
        phase.update(name="second", t=time.monotonic())
    elif p == "second" and state.model_source == "zoo:transformer" and drawn():
        mark("open_transformer", now - phase["t"])
        win.profile()
        phase.update(name="profile", t=time.monotonic())
    elif p == "profile" and state.profile is not None:
        mark("profile", now - phase["t"])
        finish()
    QTimer.singleShot(10, tick)

QTimer.singleShot(10, tick)
QTimer.singleShot(600_000, lambda: (failures.append("timed out"), finish(1)))
app.exec()
"""


def floor_s() -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, PySide6.QtWidgets"], check=True)
    return time.monotonic() - t0


def studio_marks(home: Path, *, full: bool, warm: bool) -> dict[str, float]:
    env = dict(os.environ)
    env.update(
        QT_QPA_PLATFORM="offscreen",
        ACCEL_STUDIO_HOME=str(home),
        ACCEL_STUDIO_WARM_WORKER="1" if warm else "0",
        BENCH_SETTINGS=str(home / "settings.ini"),
        BENCH_DB=str(home / "studio.db"),
        BENCH_FULL="1" if full else "0",
        BENCH_DEMO_AGAIN="0" if full else "1",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    )
    env["BENCH_T0"] = repr(time.monotonic())
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=900
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(
            f"the studio run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    data = json.loads(line[6:])
    if data["failures"]:
        raise RuntimeError(f"the studio run failed: {data['failures']}")
    return data["marks"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold-worker", action="store_true", help="no warm worker (to compare)")
    args = ap.parse_args()
    rows: dict[str, list[float]] = {}
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            home = Path(tmp)
            rows.setdefault("floor", []).append(floor_s())
            first = studio_marks(home, full=True, warm=not args.cold_worker)
            second = studio_marks(home, full=False, warm=not args.cold_worker)
        rows.setdefault("window", []).append(first["window"])
        rows.setdefault("demo graph (first start)", []).append(first["demo_graph"])
        rows.setdefault("demo graph (second start, cached)", []).append(second["demo_graph"])
        rows.setdefault("open zoo:transformer", []).append(first["open_transformer"])
        rows.setdefault("profile zoo:transformer", []).append(first["profile"])
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in rows.items()))
    floor = statistics.median(rows["floor"])
    targets = {
        "window": 1.5,
        "demo graph (first start)": 2.5,
        "demo graph (second start, cached)": 2.5,
        "open zoo:transformer": 0.5,
    }
    mode = "cold workers" if args.cold_worker else "warm worker"
    print(f"\nmedians of {args.rounds} rounds ({mode}); floor = {floor:.2f} s")
    print(f"{'milestone':38s} {'seconds':>8s} {'x floor':>8s} {'target':>8s}")
    for name, values in rows.items():
        med = statistics.median(values)
        target = targets.get(name)
        tgt = f"<={target:g}x" if target else ""
        print(f"{name:38s} {med:8.2f} {med / floor:8.2f} {tgt:>8s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
