"""The Optimize dialog: start a search, trials appear in the table and on the scatter,
open one as the recipe, cancel (finished trials stay, the search is recorded cancelled)."""

from __future__ import annotations

import pytest

from accel.search import SearchConfig


@pytest.fixture
def dialog(qtbot, tmp_path):
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.optimize_dialog import OptimizeDialog

    state = AppState()
    services = Services(state, db=str(tmp_path / "studio.db"), cpu_workers=1)
    state.set_model("zoo:mlp", {"kind": "torch", "input_spec": "x:float32[batch,1024]"})
    dlg = OptimizeDialog(state, services)
    qtbot.addWidget(dlg)
    dlg.out_edit.setText(str(tmp_path / "searches"))
    yield dlg
    if dlg.search is not None:
        dlg.search.cancel()
        dlg.search.join(60)
    services.shutdown()


def _config(dlg, **kw):
    cfg = dlg.config()
    base = dict(
        passes=("export_onnx", "quantize_onnx_dynamic", "onnxruntime", "quantize_dynamic_int8"),
        bench_iters=4,
        bench_rounds=2,
        bench_min_time_s=0.0,
        bench_warmup=1,
        budget_s=300,
    )
    base.update(kw)
    for k, v in base.items():
        setattr(cfg, k, v)
    return cfg


def test_form_defaults_come_from_the_open_model(dialog):
    cfg = dialog.config()
    assert isinstance(cfg, SearchConfig)
    assert cfg.model == "zoo:mlp" and cfg.max_cosine_drop == pytest.approx(0.001)
    assert cfg.budget_s == pytest.approx(15 * 60) and cfg.objective == "latency"
    assert not dialog.cancel_btn.isEnabled() and not dialog.open_btn.isEnabled()
    assert cfg.allow == ()
    dialog.allow_sensitivity.setChecked(True)
    dialog.allow_qat.setChecked(True)
    assert dialog.config().allow == ("qat", "sensitivity")
    # distillation recovers what pruning lost: offered once pruning is allowed
    assert not dialog.allow_distill.isEnabled()
    dialog.allow_distill.setChecked(True)
    assert "distill" not in dialog.config().allow
    dialog.allow_prune.setChecked(True)
    assert dialog.allow_distill.isEnabled()
    assert dialog.config().allow == ("prune", "distill", "qat", "sensitivity")


def test_bad_settings_are_shown_not_started(dialog):
    dialog.where_combo.setCurrentIndex(1)
    assert dialog.start() is False
    assert "Ray cluster" in dialog.status_label.text()
    dialog.where_combo.setCurrentIndex(0)
    dialog.model_edit.setText("")
    assert dialog.start() is False and dialog.search is None


def test_start_trial_on_scatter_open_as_recipe_cancel(dialog, wait):
    dlg = dialog
    assert dlg.start(_config(dlg, max_trials=20))
    assert dlg.cancel_btn.isEnabled() and not dlg.start_btn.isEnabled()
    # the first finished trials appear in the table and on the scatter
    wait(lambda: len(dlg.points()) >= 2, timeout=240)
    assert dlg.table.rowCount() >= 2
    n_points = len(dlg.scatter.data) + len(dlg.front_scatter.data)
    assert n_points == len(dlg.points())
    assert dlg.search_id
    # open a finished trial as the recipe
    number = dlg.points()[-1][0]
    dlg.select_trial(number)
    assert dlg.open_btn.isEnabled()
    assert dlg.open_selected()
    steps = [s.pass_name for s in dlg.state.recipe.steps]
    assert steps == list(dlg.trials[number].chain)
    # cancel: the search stops, the finished trials stay
    dlg.cancel()
    wait(lambda: dlg.search is None, timeout=120)
    res = dlg.outcome.result
    assert res.status == "cancelled"
    finished = [t for t in res.trials if t.status not in ("running", "cancelled")]
    assert len(finished) >= 2 and len(res.trials) < 20
    repo = dlg.services.repo
    search = repo.get_search(dlg.search_id)
    assert search.status == "cancelled" and search.trials >= len(finished)
    assert "Cancelled" in dlg.status_label.text()
    assert dlg.start_btn.isEnabled()


def test_trial_table_shows_both_p50s_from_the_trials_comparison(dialog):
    """A trial's row: the original's p50 and the trial's from the rounds behind its speedup
    (the numbers that disagreed when the p50 came from one timer and the speedup from
    another), so p50_ref / p50 lies inside the speedup's interval."""
    from accel.search.engine import TrialRecord
    from studio.ui.optimize_dialog import COLUMNS
    from tests.timing_rows import row_agrees, step_timing

    dlg = dialog
    for number, (speed, low, high) in enumerate([(3.4, 3.3, 3.5), (1.2, 0.9, 1.6)]):
        t = TrialRecord(number, ("export_onnx",), [{"pass": "export_onnx"}], "seed", "ok")
        t.metrics = {"speedup": speed, "cosine_drop": 0.0}
        t.timing = step_timing(speed, low, high, ref=0.372)
        dlg._on_trial(t)
    ref, p50, spd = (COLUMNS.index(h) for h in ("ref p50 ms", "p50 ms", "speedup [95% CI]"))
    assert dlg.table.rowCount() == 2
    assert dlg.table.item(0, spd).text() == "3.40x [3.30-3.50]"
    for r in range(2):
        text = dlg.table.item(r, spd).text()
        lo, hi = (float(x) for x in text.split("[")[1].rstrip("]~").split("-"))
        ref_ms, p50_ms = float(dlg.table.item(r, ref).text()), float(dlg.table.item(r, p50).text())
        assert ref_ms == 0.372 and row_agrees(ref_ms, p50_ms, lo, hi), (ref_ms, p50_ms, text)


def test_the_trial_table_says_why_the_original_has_no_timing(qtbot):
    """A latency or generation objective gates the original but does not time it against
    itself: its row says so, as the CLI's line does, instead of three empty cells and no reason."""
    from accel.search.engine import TrialRecord
    from studio.ui.optimize_results import NOTE_COL, TrialTable

    table = TrialTable()
    qtbot.addWidget(table)
    table.put(TrialRecord(number=0, chain=(), steps=[], origin="seed", status="ok"))
    failed = TrialRecord(number=1, chain=("bf16",), steps=[], origin="seed", status="failed")
    failed.error = "step 1 (bf16): refused"
    table.put(failed)
    assert table.item(0, NOTE_COL).text() == "the reference: not timed against itself"
    assert table.item(1, NOTE_COL).text() == "step 1 (bf16): refused"
    assert table.item(1, NOTE_COL).toolTip() == "step 1 (bf16): refused"


def test_the_status_line_names_a_pass_left_out_after_far_parity_misses(dialog):
    """A search that gave up on pruning (accel.search.rule_out) says so when it ends, as the
    CLI does, instead of leaving the person to wonder why no stack was tried again."""
    from types import SimpleNamespace

    why = "left out after 2 trials: its chains missed the cosine budget 0.01 by far"
    res = SimpleNamespace(
        status="finished",
        trials=[],
        wall_s=12.0,
        best=None,
        reason="",
        front=[],
        space={"ruled_out": {"prune_channels": why}},
    )
    dialog._on_finished(SimpleNamespace(result=res, files={}), None)
    text = dialog.status_label.text()
    assert text.startswith("Finished: 0 trial(s) in 12 s.")
    assert "Left out after far parity misses: prune_channels." in text


def test_the_status_line_names_the_best_with_the_figure_it_was_chosen_on(dialog):
    """The final side-by-side re-timing chose trial 1 (3.31x there, 2.60x in its own trial)
    over trial 2 (3.51x in its own trial, 2.48x there): the status line names the best with
    the re-timing's figure and gives both re-timed figures, as the CLI does, instead of
    "Best: trial 1 (2.60x)" beside a row that reads 3.51x."""
    from types import SimpleNamespace

    from accel.search.engine import FinalTiming, SearchResult, TrialRecord
    from tests.timing_rows import step_timing

    trials = [TrialRecord(0, (), [], "seed", "ok")]
    for n, own in ((1, 2.60), (2, 3.51)):
        t = TrialRecord(n, ("export_onnx",), [{"pass": "export_onnx"}], "seed", "ok")
        t.metrics, t.timing = {"speedup": own, "cosine_drop": 0.0}, step_timing(own, own, own)
        trials.append(t)
    final = FinalTiming(trials=[2, 1], done=True, winner=1)
    final.timings = {1: step_timing(3.31, 3.1, 3.5), 2: step_timing(2.48, 2.3, 2.6)}
    res = SearchResult(
        status="finished", config=SearchConfig(model="zoo:mlp"), trials=trials, front=[1, 2],
        best=1, reason="", wall_s=26.0, space={}, final=final,
    )  # fmt: skip
    dialog._on_finished(SimpleNamespace(result=res, files={"best": "best.yaml"}), None)
    text = dialog.status_label.text()
    assert (
        "Best: trial 1 export_onnx: 3.31x [3.10-3.50] (the final side-by-side measurement)" in text
    )
    assert "(2.60x)" not in text
    assert "trial 2 2.48x, trial 1 3.31x (chosen)" in text, text
    assert "the table's speedups are each trial's own measurement" in text
