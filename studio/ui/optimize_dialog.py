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

import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.fmt import fmt_bytes
from studio.tables import TIMING_HEADERS, speedup_cell, timing_cells
from studio.ui import plot_theme

log = logging.getLogger(__name__)

COLUMNS = ["#", "chain", "status", *TIMING_HEADERS, "cos drop", "size", "reused", "note"]
NOTE_COL = COLUMNS.index("note")


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

        # -- settings ----------------------------------------------------------------------
        form = QFormLayout()
        self.model_edit = QLineEdit(state.model_source or "")
        self.model_edit.setPlaceholderText("zoo:resnet, model.onnx, pkg.mod:factory ...")
        self.input_edit = QLineEdit(state.input_spec or "")
        self.input_edit.setPlaceholderText("default: the model's own input spec")
        self.device_combo = QComboBox()
        self.device_combo.addItems(
            ["cpu", *[ln.name for ln in services.pool.lanes if ln.name.startswith("cuda")]]
        )
        self.cosine_spin = QDoubleSpinBox()
        self.cosine_spin.setDecimals(5)
        self.cosine_spin.setRange(0.0, 1.0)
        self.cosine_spin.setSingleStep(0.0005)
        self.cosine_spin.setValue(0.001)
        self.cosine_spin.setToolTip("parity budget: 1 - the smallest cosine similarity allowed")
        self.objective_combo = QComboBox()
        from accel.search.engine import OBJECTIVES  # tokens_per_s, ttft: decoder LMs generating

        self.objective_combo.addItems(list(OBJECTIVES))
        self.objective_combo.setToolTip(
            "latency / throughput / size of one forward call; tokens_per_s / ttft: a decoder "
            "language model generating (prompt 128, 64 new tokens), gated on teacher-forced "
            "logits cosine"
        )
        self.budget_spin = QDoubleSpinBox()
        self.budget_spin.setRange(0.1, 24 * 60)
        self.budget_spin.setValue(15.0)
        self.budget_spin.setSuffix(" min")
        self.trials_spin = QSpinBox()
        self.trials_spin.setRange(0, 10000)
        self.trials_spin.setSpecialValueText("no limit")
        self.allow_prune = QCheckBox("pruning")
        self.allow_distill = QCheckBox("distillation after pruning")
        self.allow_distill.setToolTip(
            "train the pruned model towards the original's outputs on the calibration inputs "
            "(bounded steps and seconds, counted in the budget); kept only if held-out inputs agree"
        )
        self.allow_distill.setEnabled(False)
        self.allow_prune.toggled.connect(self.allow_distill.setEnabled)
        self.allow_qat = QCheckBox("QAT")
        allow = QHBoxLayout()
        allow.addWidget(self.allow_prune)
        allow.addWidget(self.allow_distill)
        allow.addWidget(self.allow_qat)
        self.allow_sensitivity = QCheckBox("quantization exclude sets (sensitivity)")
        self.allow_sensitivity.setToolTip(
            "analyse per-layer sensitivity first (counts in the budget) and search keeping the "
            "1, 3 or 10 % most sensitive layers in float"
        )
        allow.addWidget(self.allow_sensitivity)
        allow.addStretch(1)
        self.where_combo = QComboBox()
        self.where_combo.addItems(["local workers", "Ray cluster"])
        self.cluster_edit = QLineEdit()
        self.cluster_edit.setPlaceholderText("HOST:PORT, ray://HOST:PORT or auto")
        self.cluster_edit.setEnabled(False)
        self.where_combo.currentIndexChanged.connect(lambda i: self.cluster_edit.setEnabled(i == 1))
        where = QHBoxLayout()
        where.addWidget(self.where_combo)
        where.addWidget(self.cluster_edit, 1)
        self.out_edit = QLineEdit(str(Path(services.data_dir()) / "searches"))
        form.addRow("Model", self.model_edit)
        form.addRow("Input spec", self.input_edit)
        form.addRow("Device", self.device_combo)
        form.addRow("Max cosine drop", self.cosine_spin)
        form.addRow("Objective", self.objective_combo)
        form.addRow("Budget", self.budget_spin)
        form.addRow("Max trials", self.trials_spin)
        form.addRow("Allow passes that change weights", allow)
        form.addRow("Run trials on", where)
        form.addRow("Output folder", self.out_edit)
        settings = QWidget()
        settings.setLayout(form)

        # -- live results ------------------------------------------------------------------
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(False)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._sync_buttons)
        self.plot = pg.PlotWidget()
        self.plot.setLabel("bottom", "speedup vs original (x)")
        self.plot.setLabel("left", "cosine drop")
        self.plot.showGrid(x=True, y=True, alpha=0.3)
        self.scatter = pg.ScatterPlotItem(size=10, hoverable=True)
        self.front_scatter = pg.ScatterPlotItem(
            size=13, brush=pg.mkBrush(230, 120, 30), symbol="star"
        )
        self.whiskers = pg.ErrorBarItem(beam=0.0, pen=pg.mkPen(120, 120, 120))
        self.plot.addItem(self.whiskers)
        self.plot.addItem(self.scatter)
        self.plot.addItem(self.front_scatter)
        self.scatter.sigClicked.connect(self._on_point_clicked)
        self.front_scatter.sigClicked.connect(self._on_point_clicked)
        results = QSplitter(Qt.Orientation.Horizontal)
        results.addWidget(self.table)
        results.addWidget(self.plot)
        results.setSizes([560, 440])
        plot_theme.style_plot(self.plot, self.palette())

        # -- buttons -----------------------------------------------------------------------
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

        top = QSplitter(Qt.Orientation.Vertical)
        top.addWidget(settings)
        top.addWidget(results)
        top.setSizes([260, 380])
        lay = QVBoxLayout(self)
        lay.addWidget(top, 1)
        lay.addLayout(buttons)
        self._sync_buttons()

    # -- actions ---------------------------------------------------------------------------
    def config(self) -> Any:
        from accel.search import SearchConfig

        allow = tuple(
            n
            for n, box in (
                ("prune", self.allow_prune),
                ("distill", self.allow_distill),
                ("qat", self.allow_qat),
                ("sensitivity", self.allow_sensitivity),
            )
            if box.isChecked() and box.isEnabled()
        )
        return SearchConfig(
            model=self.model_edit.text().strip(),
            input_spec=self.input_edit.text().strip() or None,
            device=self.device_combo.currentText(),
            max_cosine_drop=self.cosine_spin.value(),
            objective=self.objective_combo.currentText(),
            budget_s=self.budget_spin.value() * 60.0,
            max_trials=self.trials_spin.value() or None,
            allow=allow,
            out_dir=self.out_edit.text().strip(),
        )

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
        cluster = None
        if self.where_combo.currentIndex() == 1:
            cluster = self.cluster_edit.text().strip()
            if not cluster:
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
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        return int(item.text()) if item is not None else None

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
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and int(item.text()) == number:
                self.table.selectRow(row)
                return

    # -- updates from the search thread ------------------------------------------------------
    def _on_started(self, search_id: str, where: str) -> None:
        self.search_id = search_id
        self.status_label.setText(f"Search {search_id[:8]} running; trials run in the {where}.")

    def _on_trial(self, t: Any) -> None:
        self.trials[t.number] = t
        row = next(
            (
                r
                for r in range(self.table.rowCount())
                if self.table.item(r, 0).text() == str(t.number)
            ),
            None,
        )
        if row is None:
            row = self.table.rowCount()
            self.table.insertRow(row)
        m = t.metrics
        drop = m.get("cosine_drop")
        # The original's and the trial's p50 and the speedup, from the trial's one comparison.
        timing = timing_cells(t.timing) if t.timing is not None else ["", "", ""]
        cells = [
            str(t.number),
            t.label,
            t.status,
            *timing,
            "" if drop is None else f"{drop:.2e}",
            fmt_bytes(m["size_bytes"]) if m.get("size_bytes") else "",
            str(t.reused_steps or ""),
            (t.gate or t.error or "")[:120],
        ]
        for col, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if col == NOTE_COL and (t.gate or t.error):
                item.setToolTip(t.gate or t.error)
            self.table.setItem(row, col, item)
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
        pts = self.points()
        normal = [p for p in pts if p[0] not in self.front]
        front = [p for p in pts if p[0] in self.front]
        self.scatter.setData(
            [{"pos": (s, d), "data": n} for n, s, d in normal],
            brush=pg.mkBrush(70, 130, 200),
            hoverable=True,
            tip=self.point_tip,
        )
        self.front_scatter.setData(
            [{"pos": (s, d), "data": n} for n, s, d in front], hoverable=True, tip=self.point_tip
        )
        lows, highs, xs, ys = [], [], [], []
        for n, s, d in pts:
            timing = self.trials[n].timing
            if timing is not None and timing.speedup_bounds is not None:
                lo, hi = timing.speedup_bounds
                xs.append(s)
                ys.append(d)
                lows.append(s - lo)
                highs.append(hi - s)
        if xs:
            import numpy as np

            self.whiskers.setData(
                x=np.array(xs), y=np.array(ys), left=np.array(lows), right=np.array(highs)
            )
            self.whiskers.setVisible(True)
        else:
            self.whiskers.setVisible(False)

    def point_tip(self, x: float, y: float, data: Any) -> str:
        """The hover label of a plotted trial: its number, chain, speedup and parity."""
        t = self.trials.get(int(data))
        chain = t.label if t is not None else "?"
        speed = speedup_cell(t.timing) if t is not None and t.timing else f"{x:.2f}×"
        front = " · on the Pareto front" if int(data) in self.front else ""
        return f"trial {int(data)}: {chain}\nspeedup {speed}, cosine drop {y:.2g}{front}"

    def _on_point_clicked(self, _item: Any, points: Any, *_: Any) -> None:
        if len(points):
            self.select_trial(int(points[0].data()))

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
                text += f" Best: trial {b.number} {b.label}"
                if b.metrics.get("speedup"):
                    text += f" ({b.metrics['speedup']:.2f}x)"
                text += f"; saved as {outcome.files.get('best')}."
                self.select_trial(res.best)
            if res.reason:
                text += " " + res.reason.splitlines()[0]
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
        for w in (
            self.model_edit,
            self.input_edit,
            self.device_combo,
            self.cosine_spin,
            self.objective_combo,
            self.budget_spin,
            self.trials_spin,
            self.where_combo,
            self.out_edit,
        ):
            w.setEnabled(not running)

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.search is not None:  # finished trials stay; the running one is stopped
            self.search.cancel()
        super().closeEvent(event)
