"""Start-up of the packaged app (dist/accel-studio) against the source checkout.

    .venv/bin/python bench/bench_bundle.py [--rounds 2] [--exe dist/accel-studio/accel-studio]

Round-robin in this process, each a new process with its own data folder, offscreen:
- ``--help``: the command line's start-up (no Qt, no torch);
- ``--smoke``: window + zoo:mlp opened in a worker ("opened") and the whole one-step recipe
  run recorded ("total"), the bundle's ``--smoke DB`` against ``python -m studio.smoke DB``
  (what `make run` starts, plus the smoke driver).
Prints medians in seconds and bundle / checkout ratios. Build the bundle first (`make package`).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, str]:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return took, proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--exe", default=str(ROOT / "dist" / "accel-studio" / "accel-studio"))
    args = ap.parse_args()
    if not Path(args.exe).is_file():
        print(f"{args.exe} not found: run `make package` first", file=sys.stderr)
        return 2
    variants = {
        "bundle": [args.exe],
        "checkout": [sys.executable, "-m", "studio"],
    }
    smoke = {"bundle": [args.exe, "--smoke"], "checkout": [sys.executable, "-m", "studio.smoke"]}
    rows: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name in variants:
            with tempfile.TemporaryDirectory(prefix="bench-bundle-") as tmp:
                env = dict(os.environ, QT_QPA_PLATFORM="offscreen", ACCEL_STUDIO_HOME=tmp)
                if name == "bundle":
                    env.pop("PYTHONPATH", None)
                else:
                    env["PYTHONPATH"] = str(ROOT)
                t, _ = timed([*variants[name], "--help"], env, tmp)
                rows.setdefault((name, "--help"), []).append(t)
                t, out = timed([*smoke[name], str(Path(tmp) / "s.db")], env, tmp)
                opened = float(re.search(r"opened zoo:mlp in ([\d.]+) s", out).group(1))
                rows.setdefault((name, "smoke: zoo:mlp opened"), []).append(opened)
                rows.setdefault((name, "smoke: total"), []).append(t)
    print(f"medians of {args.rounds} rounds (seconds)")
    for what in ("--help", "smoke: zoo:mlp opened", "smoke: total"):
        b = statistics.median(rows[("bundle", what)])
        c = statistics.median(rows[("checkout", what)])
        print(f"{what:24s} bundle {b:7.2f}  checkout {c:7.2f}  ratio {b / c:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
