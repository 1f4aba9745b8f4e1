"""The Optimize dialog: search for the fastest recipe within a parity budget.

Constraints (max cosine drop, passes allowed to change weights), budget (minutes, trials),
objective and where trials run (the studio's worker pool or a Ray cluster). While the
search runs, a table lists every trial and a scatter plots finished ones (speedup against
parity error, with the speedup's range over the timing rounds as whiskers; the Pareto front
in a second colour). "Open as recipe" loads the selected trial into the Recipe panel;
Cancel stops the search and keeps the finished trials. The search runs on a Python thread
(``studio.optimize.SearchThread``); its trials run in worker processes or on the cluster.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from studio.tables import best_figure, final_retime_line
from studio.ui import plot_theme
from studio.ui.optimize_form import FIELDS, SearchForm
from studio.ui.optimize_results import COLUMNS, NOTE_COL, TrialPlot, TrialTable

__all__ = ["COLUMNS", "NOTE_COL", "OptimizeDialog"]

log = logging.getLogger(__name__)


class _Relay(QObject):
    trial = Signal(object)  # TrialRecord (a copy), from the search thread
    started = Signal(str, str)  # search id, where trials run
    finished = Signal(object, object)  # OptimizeOutcome | None, exception | None


class OptimizeDialog(QDialog):
    """See module docstring. ``services`` gives the worker pool and the store."""

    recipeOpened = Signal(str)  # label of the trial loaded into the Recipe panel

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if event.type() in plot_theme.PALETTE_EVENTS and hasattr(self, "plot"):
            plot_theme.style_plot(self.plot, self.palette())  # light/dark theme switched
        super().changeEvent(event)

    def __init__(self, state, services, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Optimize: find the fastest recipe")
        self.resize(1000, 640)
        self.state = state
        self.services = services
        self.search: Any = None  # SearchThread while running
        self.outcome: Any = None
        self.trials: dict[int, Any] = {}
        self.front: set[int] = set()
        self.search_id = ""
        self._config: Any = None
        self._relay = _Relay(self)
        self._relay.trial.connect(self._on_trial)
        self._relay.started.connect(self._on_started)
        self._relay.finished.connect(self._on_finished)

        self.form = SearchForm(state, services)
        for name in FIELDS:  # dialog.model_edit ... stay the form's widgets
            setattr(self, name, getattr(self.form, name))
        self.table = TrialTable()
        self.table.itemSelectionChanged.connect(self._sync_buttons)
        self.plot = TrialPlot(on_pick=self.select_trial)
        self.scatter = self.plot.scatter
        self.front_scatter = self.plot.front_scatter
        self.whiskers = self.plot.whiskers
        results = QSplitter(Qt.Orientation.Horizontal)
        results.addWidget(self.table)
        results.addWidget(self.plot)
        results.setSizes([560, 440])
        plot_theme.style_plot(self.plot, self.palette())

        top = QSplitter(Qt.Orientation.Vertical)
        top.addWidget(self.form)
        top.addWidget(results)
        top.setSizes([260, 380])
        lay = QVBoxLayout(self)
        lay.addWidget(top, 1)
        lay.addLayout(self._buttons())
        self._sync_buttons()

    def _buttons(self) -> QHBoxLayout:
        self.status_label = QLabel("Set the constraints and press Start.")
        self.status_label.setWordWrap(True)
        self.start_btn = QPushButton("Start")
        self.cancel_btn = QPushButton("Cancel search")
        self.open_btn = QPushButton("Open as recipe")
        self.close_btn = QPushButton("Close")
        self.start_btn.clicked.connect(self.start)
        self.cancel_btn.clicked.connect(self.cancel)
        self.open_btn.clicked.connect(self.open_selected)
        self.close_btn.clicked.connect(self.close)
        buttons = QHBoxLayout()
        buttons.addWidget(self.status_label, 1)
        for b in (self.start_btn, self.cancel_btn, self.open_btn, self.close_btn):
            buttons.addWidget(b)
        return buttons

    # -- actions ---------------------------------------------------------------------------
    def config(self) -> Any:
        return self.form.config()

    def start(self, config: Any = None) -> bool:
        """Start a search with the form's settings (or ``config``); False with the reason
        shown when the settings are wrong."""
        import datetime as dt

        from accel.search import SearchError
        from studio.optimize import SearchThread

        if self.search is not None:
            return False
        config = config or self.config()
        if not config.model:
            self.status_label.setText("Give a model source first.")
            return False
        cluster = self.form.cluster()
        if cluster == "":
            self.status_label.setText("Give the Ray cluster's address (HOST:PORT) or auto.")
            return False
        try:
            config.validate()
        except SearchError as exc:
            self.status_label.setText(str(exc))
            return False
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        if not Path(config.out_dir).name.startswith("search-"):
            config.out_dir = str(Path(config.out_dir) / f"search-{stamp}")
        self._config = config
        self.trials.clear()
        self.front.clear()
        self.table.setRowCount(0)
        self._replot()
        relay = self._relay

        def on_trial(t: Any) -> None:
            import copy

            relay.trial.emit(copy.deepcopy(t))

        self.search = SearchThread(
            config,
            on_done=lambda th: relay.finished.emit(th.outcome, th.error),
            repo=self.services.repo,
            cluster=cluster,
            pool=None if cluster else self.services.pool,
            on_trial=on_trial,
            on_start=lambda sid, where: relay.started.emit(sid, where),
        ).start()
        self.status_label.setText(f"Starting: loading {config.model} ...")
        self._sync_buttons()
        return True

    def cancel(self) -> None:
        if self.search is not None:
            self.search.cancel()
            self.status_label.setText("Cancelling: the running trial stops, finished ones stay.")
            self.cancel_btn.setEnabled(False)

    def selected_trial(self) -> int | None:
        return self.table.selected_trial()

    def open_selected(self) -> bool:
        """Load the selected trial's recipe into the Recipe panel."""
        from accel.recipe import load_recipe
        from accel.search import trial_recipe

        n = self.selected_trial()
        if n is None or n not in self.trials or self._config is None:
            return False
        t = self.trials[n]
        recipe = load_recipe(trial_recipe(self._config, t, name=f"optimize #{n}: {t.label}"))
        self.state.set_recipe(recipe)
        self.state.status.emit(f"recipe of trial {n} ({t.label}) opened")
        self.recipeOpened.emit(t.label)
        return True

    def select_trial(self, number: int) -> None:
        self.table.select_trial(number)

    # -- updates from the search thread ------------------------------------------------------
    def _on_started(self, search_id: str, where: str) -> None:
        self.search_id = search_id
        self.status_label.setText(f"Search {search_id[:8]} running; trials run in the {where}.")

    def _on_trial(self, t: Any) -> None:
        self.trials[t.number] = t
        self.table.put(t)
        self.front = set(self._front())
        self._replot()
        done = sum(1 for x in self.trials.values() if x.status != "running")
        if self.search is not None and self.search_id:
            self.status_label.setText(
                f"Search {self.search_id[:8]}: {done} trial(s) finished, "
                f"{len(self.front)} on the Pareto front."
            )
        self._sync_buttons()

    def _front(self) -> list[int]:
        from accel.search.engine import objective_vector, pareto_front

        if self._config is None:
            return []
        vectors = {
            n: v
            for n, t in self.trials.items()
            if t.status == "ok" and (v := objective_vector(self._config, t.metrics))
        }
        return pareto_front(vectors)

    def points(self) -> list[tuple[int, float, float]]:
        """(trial, speedup, cosine drop) of the finished trials within the constraints."""
        out = []
        for n, t in sorted(self.trials.items()):
            s = t.metrics.get("speedup")
            if t.status == "ok" and s is not None:
                out.append((n, float(s), float(t.metrics.get("cosine_drop") or 0.0)))
        return out

    def _replot(self) -> None:
        self.plot.show_points(self.points(), self.trials, self.front)

    def _on_finished(self, outcome: Any, error: Any) -> None:
        self.search = None
        self.outcome = outcome
        if error is not None and type(error).__name__ == "SearchCancelled":
            self.status_label.setText("Cancelled before any trial started.")
        elif error is not None:
            self.status_label.setText(f"The search could not run: {error}")
        elif outcome is not None:
            res = outcome.result
            for t in res.trials:
                self.trials[t.number] = t
            n = len(res.trials)
            text = {
                "finished": f"Finished: {n} trial(s) in {res.wall_s:.0f} s.",
                "cancelled": f"Cancelled: {n} trial(s) kept.",
                "no_feasible": "No trial met the constraints.",
            }.get(res.status, res.status)
            if res.best is not None:
                b = res.trial(res.best)
                # named with the figure it was chosen on (the final side-by-side re-timing's
                # when there was one), as the CLI names it
                text += f" Best: trial {b.number} {b.label}{best_figure(res)}"
                text += f"; saved as {outcome.files.get('best')}."
                if retimed := final_retime_line(res):
                    text += f" {retimed}"
                self.select_trial(res.best)
            if res.reason:
                text += " " + res.reason.splitlines()[0]
            ruled = res.space.get("ruled_out") or {}
            if ruled:  # their chains kept missing the parity budget by far
                text += f" Left out after far parity misses: {', '.join(sorted(ruled))}."
            self.status_label.setText(text)
            self.front = set(res.front)
            self._replot()
        self.state.runsChanged.emit()
        self._sync_buttons()

    def _sync_buttons(self) -> None:
        running = self.search is not None
        self.start_btn.setEnabled(not running)
        self.cancel_btn.setEnabled(running)
        n = self.selected_trial()
        self.open_btn.setEnabled(n is not None and n in self.trials)
        self.form.lock(running)

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.search is not None:  # finished trials stay; the running one is stopped
            self.search.cancel()
        super().closeEvent(event)
