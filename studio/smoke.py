"""``--smoke DB``: the end-to-end check of an installed or bundled studio, without a display.

Opens the studio window offscreen, opens ``zoo:mlp`` in a worker, runs a one-step recipe
through a worker into the database ``DB``, reads the run back from that database and exits
0 when the run succeeded and its step is recorded; else prints what failed and exits 1.
The packaged app (``packaging/``) runs it as ``accel-studio --smoke DB``; from a checkout:
``python -m studio.smoke DB``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

SMOKE_MODEL = "zoo:mlp"
SMOKE_RECIPE = {
    "name": "smoke",
    "model": {"source": SMOKE_MODEL},
    "device": "cpu",
    "benchmark": {"warmup": 1, "iters": 3, "dims": {"batch": 2}},
    "steps": [{"pass": "bf16", "gates": {"rtol": 0.05, "atol": 0.05, "min_cosine": 0.99}}],
}


def _recorded_step(db: str, run_id: str) -> str | None:
    """The pass name of the run's one step, as the store recorded it succeeded; None (after
    saying why) when the store has something else."""
    from studio.store import Repository

    repo = Repository.open(db)
    try:
        detail = repo.get_run(run_id)
    finally:
        repo.close()
    steps = [s for s in detail.steps if s.index >= 0]
    if detail.run.status != "succeeded" or len(steps) != 1 or steps[0].status != "succeeded":
        print(
            f"smoke: run {run_id} is {detail.run.status} with {len(steps)} steps in {db}",
            file=sys.stderr,
        )
        return None
    return steps[0].pass_name


def run_smoke(db: str, timeout_s: float = 300.0) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    t0 = time.monotonic()
    from PySide6.QtCore import QSettings

    from studio.app import create_window, make_qapp

    app = make_qapp()
    settings_file = Path(db).with_suffix(".smoke.ini")
    window = create_window(db, settings=QSettings(str(settings_file), QSettings.Format.IniFormat))
    window.show()
    services, state = window.services, window.state
    failures: list[str] = []
    finished: list[object] = []
    services.jobFailed.connect(lambda kind, msg: failures.append(f"{kind}: {msg}"))
    services.runFinished.connect(lambda job_id, outcome: finished.append(outcome))

    def wait(predicate, what: str) -> bool:
        while not predicate():
            if failures:
                print(f"smoke: {what} failed: {failures[0]}", file=sys.stderr)
                return False
            if time.monotonic() - t0 > timeout_s:
                print(f"smoke: {what} did not finish in {timeout_s:g} s", file=sys.stderr)
                return False
            app.processEvents()
            time.sleep(0.02)
        return True

    code = 1
    try:
        window.open_model(SMOKE_MODEL)
        if not wait(lambda: state.model_source == SMOKE_MODEL and state.graph, "opening"):
            return 1
        t_open = time.monotonic() - t0
        services.run_recipe(SMOKE_RECIPE)
        if not wait(lambda: bool(finished), "the recipe run"):
            return 1
        outcome = finished[0]
        if outcome is None or not outcome.ok or not outcome.run_id:
            err = getattr(outcome, "error", "cancelled")
            print(f"smoke: the run did not succeed: {err}", file=sys.stderr)
            return 1
        recorded = _recorded_step(db, outcome.run_id)
        if recorded is None:
            return 1
        print(
            f"smoke ok: opened {SMOKE_MODEL} in {t_open:.1f} s, run {outcome.run_id} "
            f"({recorded}) recorded in {db}, {time.monotonic() - t0:.1f} s"
        )
        code = 0
    finally:
        services.shutdown(timeout=10)
        window.close()
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m studio.smoke DB (a SQLite file or database URL)", file=sys.stderr)
        return 2
    return run_smoke(args[0])


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip the slow teardown of Qt and its web engine
