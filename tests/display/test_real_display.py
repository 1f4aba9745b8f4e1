"""Issue 28: the studio on a real X display (Xvfb, xcb), driven by mouse and keyboard.

The walk opens a model, builds a three-step recipe, runs it, deletes a run from History
(the click that crashed the app with a bus error), compares two runs, starts and cancels
an Optimize search and closes the window; the process must live through every action and
the recipe being edited must survive them. The layout tests check the first window
against the screen at three sizes. Screenshots of every action stay in the test's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.store import Repository
from tests.display.conftest import play
from tests.display.scenarios import RECIPE

pytestmark = pytest.mark.display

WALK = [
    "started",
    "model-opened",
    "recipe-built",
    "run-started",
    "run-finished",
    "deploy-ready",
    "deployed",
    "delete-asked",
    "run-deleted",
    "compared",
    "compare-closed",
    "search-started",
    "search-cancelled",
    "before-close",
    "closed",
]
CRASH_SIGNS = ("shared QObject was deleted directly", "Fatal Python error", "Segmentation")


def seed_runs(db: Path, n: int) -> None:
    """``n`` finished runs with two measured steps each, as the runner records them."""
    repo = Repository.open(str(db))
    try:
        for i in range(n):
            r = repo.create_run(model_source="zoo:mlp", recipe={"name": f"seeded-{i}"})
            repo.record_event(
                r.id,
                {
                    "event": "run_started",
                    "run_dir": "",
                    "model_source": "zoo:mlp",
                    "model_kind": "torch",
                    "device": "cpu",
                    "recipe": {"name": f"seeded-{i}"},
                    "environment": {},
                    "num_steps": 2,
                    "baseline": {"latency_p50_ms": 10.0},
                },
            )
            for index, name in enumerate(("bf16", "compile")):
                latency = 8.0 - index - i
                m = {"latency_p50_ms": latency, "speedup": 10.0 / latency}
                repo.record_event(
                    r.id,
                    {
                        "event": "step_finished",
                        "index": index,
                        "pass_name": name,
                        "status": "succeeded",
                        "duration_s": 0.1,
                        "metrics": m,
                        "parity": {"passed": True, "outputs": []},
                        "artifacts": [],
                    },
                )
            summary = {"final_speedup": 10.0 / (7.0 - i), "final_latency_p50_ms": 7.0 - i}
            repo.record_event(
                r.id,
                {
                    "event": "run_finished",
                    "status": "succeeded",
                    "duration_s": 1,
                    "summary": summary,
                },
            )
    finally:
        repo.close()


def test_the_walk_survives_every_action_and_keeps_the_recipe(xserver, tmp_path):
    server = xserver(1366, 768)
    db = tmp_path / "studio.db"
    seed_runs(db, 2)
    played = play(server, "walk", tmp_path / "walk", db=db)
    for name in WALK:
        played.step(name)
    assert played.names() == WALK, played.why()
    assert played.returncode == 0, played.why()
    assert not any(sign in played.stderr for sign in CRASH_SIGNS), played.stderr[-2500:]
    assert played.step("run-finished")["ok"], "the recipe run failed"
    assert played.step("deploy-ready")["enabled"], played.step("deploy-ready")["tip"]
    assert played.step("deployed")["error"] == "" and played.step("deployed")["files"]
    assert played.step("delete-asked")["default"] == "Cancel"
    assert played.step("run-deleted")["runs"] == 2  # 2 seeded + 1 run, one deleted
    built = played.step("recipe-built")["recipe"]
    assert sorted(built) == sorted(RECIPE)
    for name in WALK[3:]:  # the recipe being edited survives every later action
        assert played.step(name)["recipe"] == built, name
    shots = sorted(p.name for p in (tmp_path / "walk").glob("*.png"))
    assert len(shots) == len(WALK)


def test_deleting_a_run_from_history_keeps_the_app_alive(xserver, tmp_path):
    """The blocker: the app died with a bus error right after the deletion (3 of 3 tries)."""
    server = xserver(1366, 768)
    db = tmp_path / "studio.db"
    repo = Repository.open(str(db))
    for i in range(3):
        repo.create_run(model_source="zoo:mlp", name=f"run-{i}", status="succeeded")
    repo.close()
    played = play(server, "delete", tmp_path / "delete", db=db)
    assert played.names() == ["started", "delete-asked", "run-deleted", "before-close", "closed"]
    assert played.returncode == 0 and not any(s in played.stderr for s in CRASH_SIGNS), played.why()
    assert played.step("run-deleted")["runs"] == 2


@pytest.mark.parametrize(
    "size", [(1024, 700), (1366, 768), (1920, 1080)], ids="{0[0]}x{0[1]}".format
)
def test_the_first_window_fits_the_screen_and_shows_run(xserver, tmp_path, size):
    server = xserver(*size)
    played = play(server, "layout", tmp_path / "layout")
    got = played.step("layout")
    sx, sy, sw, sh = got["screen"]
    fx, fy, fw, fh = got["frame"]
    assert fx >= sx and fy >= sy and fx + fw <= sx + sw and fy + fh <= sy + sh, got
    bx, by, bw, bh = got["run_button"]
    assert got["run_shown"] and got["run_visible"] == [bw, bh], got  # not clipped
    assert sx <= bx and bx + bw <= sx + sw and sy <= by and by + bh <= sy + sh, got
    assert got["elided"] == [], got
    if size[1] >= 768:
        assert got["palette_rows"] >= 8, got
    assert played.step("after-error")["frame"] == got["frame"]  # nothing made it grow
    assert played.step("layout-dark")["history_buttons"] == ["Compare", "Tag…", "Delete…"]
    assert played.returncode == 0, played.why()


def test_a_remembered_big_window_is_clamped_to_a_small_screen(xserver, tmp_path):
    """Saved on a 1920x1080 monitor, opened on a 1024x700 laptop."""
    big = play(xserver(1920, 1080), "layout", tmp_path / "big")
    assert big.step("layout")["frame"][2:] == [1400, 900]
    small = tmp_path / "small"
    small.mkdir()
    (small / "studio.ini").write_bytes((tmp_path / "big" / "studio.ini").read_bytes())
    played = play(xserver(1024, 700), "layout", small)
    sx, sy, sw, sh = played.step("layout")["screen"]
    fx, fy, fw, fh = played.step("layout")["frame"]
    assert fx >= sx and fy >= sy and fx + fw <= sx + sw and fy + fh <= sy + sh, played.steps


def test_no_usable_display_is_a_reason_to_skip_not_a_failure(tmp_path):
    """What the fixture says when Qt's xcb platform cannot start (no server here)."""
    from tests.display.conftest import XServer, _xcb_problem

    server = XServer.__new__(XServer)
    server.display = ":987"  # no X server listens there
    problem = _xcb_problem(server, tmp_path)
    assert problem is not None and problem.startswith("Qt's xcb platform cannot start here")
