"""`make package-test`: run the built app's smoke test and check what it wrote.

    .venv/bin/python packaging/check_bundle.py [dist/accel-studio/accel-studio]

Starts the bundle with ``--smoke DB`` (offscreen: opens zoo:mlp, runs a one-step recipe
through a worker started from the bundle's own executable), then reads DB with sqlite3
(independently of the app) and checks the succeeded run and its step. Prints the bundle's
size and how long the smoke run took; exits 0 when all holds.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> int:
    # Absolute: the bundle runs from a temporary folder (`make package-test` passes a path
    # relative to the checkout).
    exe = Path(
        sys.argv[1] if len(sys.argv) > 1 else ROOT / "dist" / "accel-studio" / "accel-studio"
    ).resolve()
    if not exe.is_file():
        print(f"{exe} does not exist: build it first with `make package`", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["QT_QPA_PLATFORM"] = "offscreen"
    with tempfile.TemporaryDirectory(prefix="accel-bundle-") as tmp:
        env["ACCEL_STUDIO_HOME"] = tmp
        db = Path(tmp) / "smoke.db"
        t0 = time.monotonic()
        # From another folder: the bundle must not pick up the checkout's sources.
        proc = subprocess.run(
            [str(exe), "--smoke", str(db)], env=env, cwd=tmp, capture_output=True, text=True
        )
        took = time.monotonic() - t0
        print(proc.stdout.strip())
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            print(f"the smoke run exited {proc.returncode}", file=sys.stderr)
            return 1
        con = sqlite3.connect(db)
        try:
            runs = con.execute("SELECT id, status FROM runs").fetchall()
            steps = con.execute('SELECT run_id, status FROM steps WHERE "index" >= 0').fetchall()
        except sqlite3.Error as exc:
            print(f"cannot read {db}: {exc}", file=sys.stderr)
            return 1
        finally:
            con.close()
    if len(runs) != 1 or runs[0][1] != "succeeded":
        print(f"expected one succeeded run, found {runs}", file=sys.stderr)
        return 1
    if [s for s in steps if s[0] == runs[0][0] and s[1] == "succeeded"] == []:
        print(f"the run has no succeeded step: {steps}", file=sys.stderr)
        return 1
    size = folder_size(exe.parent)
    print(f"bundle ok: {exe.parent} is {size / 2**20:.0f} MiB; smoke run {took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
