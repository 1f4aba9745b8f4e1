"""Recipe panel: pass palette, step list, generated parameter forms, gates, run.

Clicking a pass in the palette (double-click or Add) records it as a step of
``state.recipe``; other panels (the graph's context menu) add steps through
``state`` too, and ``state.recipeChanged`` keeps this view in sync.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QToolButton,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from accel.passes import list_passes
from accel.plan import placement, start_form, step_problems
from accel.recipe import BenchSettings, Gates
from accel.recipe_checks import step_warnings
from studio.ui.param_form import ParamForm
from studio.ui.recipe_edits import RecipeEditsMixin, _short
from studio.ui.recipe_palette import PassPalette
from studio.ui.slots import on_click

log = logging.getLogger(__name__)


class RecipeView(RecipeEditsMixin, QWidget):
    """Build a recipe by clicking passes; edit, reorder, save, export, run."""

    runRequested = Signal()
    runnableChanged = Signal(bool, str)  # can the recipe run now; the Run button's tooltip

    def __init__(self, state, services, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.services = services
        self._passes = {p.name: p for p in list_passes()}
        self._syncing = False
        self._form: ParamForm | None = None
        self._form_key: tuple[int, str] | None = None  # (row, pass) the open form edits
        self._recipe_problems: list[str] = []

        pal_box = self._make_palette()
        steps_box = self._make_steps()
        self._make_forms(services)
        bar = self._make_bar()
        self._assemble(pal_box, steps_box, bar)
        state.recipeChanged.connect(self.refresh)
        state.modelChanged.connect(self.refresh)
        self.refresh()

    # -- building ----------------------------------------------------------------------------
    def _make_palette(self) -> QWidget:
        """The passes by category; double-click or Add puts one in the recipe."""
        self._pass_palette = PassPalette(self.state, self._passes)
        self._pass_palette.addRequested.connect(self._add_from_palette)
        self.palette = self._pass_palette.tree
        self.palette_hint = self._pass_palette.hint
        self._palette_items = self._pass_palette.items
        return self._pass_palette

    def _make_steps(self) -> QWidget:
        """The recipe's steps (checked = enabled, drag to reorder) and their buttons."""
        self.steps = QListWidget()
        self.steps.setObjectName("stepList")
        self.steps.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        self.steps.model().rowsMoved.connect(self._rows_moved)
        self.steps.itemChanged.connect(self._item_changed)
        self.steps.currentRowChanged.connect(self._show_step)
        btns = QHBoxLayout()
        self.btn_up = self._tool("▲", "Move the step up", lambda: self._move(-1))
        self.btn_down = self._tool("▼", "Move the step down", lambda: self._move(1))
        self.btn_dup = self._tool("Copy", "Duplicate the step", self._duplicate)
        self.btn_remove = self._tool("✕", "Remove the step (Del)", self._remove)
        self.btn_remove.setShortcut(QKeySequence.StandardKey.Delete)
        for b in (self.btn_up, self.btn_down, self.btn_dup, self.btn_remove):
            btns.addWidget(b)
        btns.addStretch(1)
        steps_box = QWidget()
        sv = QVBoxLayout(steps_box)
        sv.setContentsMargins(0, 0, 0, 0)
        steps_label = QLabel("<b>Steps</b> (checked = enabled, drag to reorder)")
        steps_label.setWordWrap(True)  # a narrow dock wraps it, never widens for it
        sv.addWidget(steps_label)
        sv.addWidget(self.steps, 1)
        sv.addLayout(btns)
        return steps_box

    def _make_forms(self, services) -> None:
        """Tabs: the selected step's form, parity gates, benchmark, recipe settings."""
        self.tabs = QTabWidget()
        self.step_area = QScrollArea()
        self.step_area.setWidgetResizable(True)
        self.step_title = QLabel()
        self.step_title.setWordWrap(True)
        step_tab = QWidget()
        st = QVBoxLayout(step_tab)
        st.addWidget(self.step_title)
        st.addWidget(self.step_area, 1)
        self.tabs.addTab(step_tab, "Step")
        self.gates_form = ParamForm(Gates, self.state.recipe.gates.model_dump())
        self.gates_form.changed.connect(self._gates_changed)
        self.gates_form.validityChanged.connect(self._update_run_button)
        self.tabs.addTab(_scroll(self.gates_form), "Parity gates")
        self.bench_form = ParamForm(BenchSettings, self.state.recipe.benchmark.model_dump())
        self.bench_form.changed.connect(self._bench_changed)
        self.bench_form.validityChanged.connect(self._update_run_button)
        self.tabs.addTab(_scroll(self.bench_form), "Benchmark")
        settings_tab = QWidget()
        fl = QFormLayout(settings_tab)
        self.name_edit = QLineEdit()
        self.name_edit.editingFinished.connect(self._settings_changed)
        self.device_combo = QComboBox()
        self.device_combo.addItem("cpu")
        for lane in getattr(getattr(services, "pool", None), "lanes", []) or []:
            if lane.name.startswith("cuda"):
                self.device_combo.addItem(lane.name)
        self.device_combo.currentIndexChanged.connect(self._settings_changed)
        self.gate_combo = QComboBox()
        self.gate_combo.addItems(["warn", "stop"])
        self.gate_combo.setToolTip(
            "when a step fails its parity gate: warn and go on, or stop the run"
        )
        self.gate_combo.currentIndexChanged.connect(self._settings_changed)
        self.skip_check = QCheckBox("skip a step that fails and continue")
        self.skip_check.setObjectName("skipFailingSteps")
        self.skip_check.setToolTip(
            "on_step_error: skip. A step that cannot apply or raises is recorded as skipped "
            "and the run goes on with the model from before it (off: the run stops there)"
        )
        self.skip_check.toggled.connect(self._settings_changed)
        fl.addRow("name", self.name_edit)
        fl.addRow("device", self.device_combo)
        fl.addRow("on gate failure", self.gate_combo)
        fl.addRow("on step error", self.skip_check)
        self.tabs.addTab(settings_tab, "Recipe")

    def _make_bar(self) -> QHBoxLayout:
        """New, Open, Save, Export script on the left; Run on the right."""
        bar = QHBoxLayout()
        # Compact buttons (no 80 px minimum each): the bar fits a 1024 px wide window.
        self.btn_new = self._tool("New", "Start a new, empty recipe for this model", self.new)
        self.btn_open = self._tool("Open…", "Open a recipe file", self.open_recipe)
        self.btn_save = self._tool("Save…", "Save the recipe as a file", self.save_recipe)
        self.btn_script = self._tool(
            "Export script…", "Export the recipe as a Python script", self.export_script
        )
        self.btn_run = QPushButton("Run")
        self.btn_run.setObjectName("runButton")
        self.btn_run.setToolTip("Run the recipe in a worker (Ctrl+R)")
        on_click(self.btn_run.clicked, self.run)
        self.warning = QLabel()
        self.warning.setObjectName("recipeWarning")
        self.warning.setStyleSheet("color: #d9480f;")
        self.warning.setWordWrap(True)
        self.warning.hide()
        self.problem = QLabel()
        self.problem.setStyleSheet("color: #d03030;")
        self.problem.setWordWrap(True)
        for b in (self.btn_new, self.btn_open, self.btn_save, self.btn_script):
            bar.addWidget(b)
        bar.addStretch(1)
        bar.addWidget(self.btn_run)
        return bar

    def _assemble(self, pal_box: QWidget, steps_box: QWidget, bar: QHBoxLayout) -> None:
        # Palette and steps side by side, the forms below: fits a narrow dock and a wide one.
        # Pass names are never cut off ("quantize_onnx_dyn…"): the widest one fits.
        widest = max(
            (self.palette.fontMetrics().horizontalAdvance(n) for n in self._passes), default=0
        )
        self.palette.setMinimumWidth(max(170, widest + 56))
        self.steps.setMinimumWidth(140)
        top = QSplitter()
        top.addWidget(pal_box)
        top.addWidget(steps_box)
        top.setChildrenCollapsible(False)
        # The banners (what to fix, warnings) head the lower pane: when one comes or goes
        # the palette, the steps and their buttons stay where they were (issue 28, 8).
        lower = QWidget()
        lv = QVBoxLayout(lower)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(self.problem)
        lv.addWidget(self.warning)
        lv.addWidget(self.tabs, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(lower)
        # The step form gets the larger share: at 768 px it showed about one row.
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        self.tabs.setMinimumHeight(170)
        root = QVBoxLayout(self)
        root.addLayout(bar)
        root.addWidget(split, 1)

    @staticmethod
    def _tool(text: str, tip: str, slot) -> QToolButton:
        b = QToolButton()
        b.setText(text)
        b.setToolTip(tip)
        on_click(b.clicked, slot)
        return b

    # -- state -> view ---------------------------------------------------------------------
    def refresh(self) -> None:
        self._syncing = True
        try:
            recipe = self.state.recipe
            row = self.steps.currentRow()
            self.steps.clear()
            start = self._start_form()
            step_why = step_problems(recipe.steps, start, recipe.device, self._layers())
            problems = []
            warnings = step_warnings(recipe.steps, recipe.device)
            for i, step in enumerate(recipe.steps):
                item = QListWidgetItem(
                    f"{i + 1}. {step.label}" + (f"  {_short(step.params)}" if step.params else "")
                )
                item.setFlags(
                    item.flags() | Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsDragEnabled
                )
                item.setCheckState(
                    Qt.CheckState.Checked if step.enabled else Qt.CheckState.Unchecked
                )
                why = step_why[i]
                if why:
                    item.setForeground(Qt.GlobalColor.red)
                    item.setToolTip(why)
                    if step.enabled:
                        problems.append(f"step {i + 1}: {why}")
                elif i in warnings:
                    item.setText("⚠ " + item.text())
                    item.setForeground(QColor("#d9480f"))
                    item.setToolTip(warnings[i])
                else:
                    p = self._passes.get(step.pass_name)
                    item.setToolTip(p.summary if p else "")
                self.steps.addItem(item)
            self.warning.setText("\n".join(f"⚠ step {i + 1}: {w}" for i, w in warnings.items()))
            self.warning.setVisible(bool(warnings))
            if self.steps.count():
                self.steps.setCurrentRow(min(max(row, 0), self.steps.count() - 1))
            else:
                self._show_step(-1)
            self._recipe_problems = problems
            self._sync_step_form(self.steps.currentRow())
            self.name_edit.setText(recipe.name)
            self.device_combo.setCurrentText(recipe.device)
            self.gate_combo.setCurrentText(recipe.on_gate_fail)
            self.skip_check.setChecked(recipe.on_step_error == "skip")
            self.gates_form.set_values(recipe.gates.model_dump())
            self.bench_form.set_values(recipe.benchmark.model_dump())
            self._pass_palette.update_places(start)
        finally:
            self._syncing = False
        self._update_run_button()

    def form_problems(self) -> list[str]:
        """What the open forms hold that is not valid yet ("step 2 (prune): ratio: …")."""
        out = []
        forms = [("Parity gates", self.gates_form), ("Benchmark", self.bench_form)]
        if self._form is not None and self._form_key is not None:
            row, name = self._form_key
            forms.insert(0, (f"step {row + 1} ({name})", self._form))
        for where, form in forms:
            for field, msg in form.errors().items():
                out.append(f"{where}: {field.replace('_', ' ')}: {msg}")
        return out

    def _update_run_button(self, *_: Any) -> None:
        recipe = self.state.recipe
        problems = list(getattr(self, "_recipe_problems", [])) + self.form_problems()
        # The banner keeps each problem to what to change (a layer-pattern typo's close
        # names); the sample of names and the pattern help are in its tooltip.
        self.problem.setText("\n".join(_banner_line(p) for p in problems))
        self.problem.setToolTip("\n\n".join(problems))
        self.problem.setVisible(bool(problems))
        self.btn_run.setEnabled(bool(recipe.enabled_steps()) and not problems)
        if problems:
            tip = "fix first: " + problems[0]
        elif recipe.enabled_steps():
            tip = "Run the recipe in a worker (Ctrl+R)"
        else:
            tip = "add at least one step to run"
        self.btn_run.setToolTip(tip)
        self.btn_run.setStatusTip(tip)
        self.runnableChanged.emit(self.btn_run.isEnabled(), tip)

    def _start_form(self) -> str | None:
        """The loaded model's form (accel.plan.start_form: from its source or kind)."""
        info = self.state.model_info or {}
        return start_form(self.state.recipe.model.source, info.get("kind"))

    def _layers(self) -> list[tuple[str, str]] | None:
        """The opened model's (module name, type name) pairs, which the inspect job read in
        its worker (model_info "layers"), when the recipe is for that model; None: unknown
        (no layer patterns are checked then)."""
        layers = (self.state.model_info or {}).get("layers")
        if not layers or self.state.model_source != self.state.recipe.model.source:
            return None
        return [(str(name), str(type_name)) for name, type_name in layers]

    def _show_step(self, row: int) -> None:
        if not self._syncing:  # refresh() syncs the form once it has rebuilt the list
            self._sync_step_form(row)

    def _sync_step_form(self, row: int) -> None:
        """Show the form of step ``row``; the open form of the same step is kept (so a
        field being typed in keeps its focus) and only updated when the step changed."""
        steps = self.state.recipe.steps
        key = (row, steps[row].pass_name) if 0 <= row < len(steps) else None
        if key is not None and key == self._form_key and self._form is not None:
            if self._form.is_valid() and self._form.validate()[0] != steps[row].params:
                self._form.set_values(steps[row].params)
            return
        old = self.step_area.takeWidget()
        if old is not None:
            old.deleteLater()
        self._form, self._form_key = None, None
        if key is None:
            self.step_title.setText("Add a step from the pass palette (double-click a pass).")
            self.step_area.setWidget(QWidget())
            return
        step = steps[row]
        p = self._passes.get(step.pass_name)
        if p is None:
            self.step_title.setText(f"Unknown pass {step.pass_name!r}")
            self.step_area.setWidget(QWidget())
            return
        self.step_title.setText(f"<b>{row + 1}. {p.name}</b> — {p.summary}")
        form = ParamForm(p.Config, step.params)
        form.changed.connect(lambda params, r=row: self._params_changed(r, params))
        form.validityChanged.connect(self._update_run_button)
        self._form, self._form_key = form, key
        self.step_area.setWidget(form)
        self._update_run_button()

    # -- view -> state ---------------------------------------------------------------------
    def _add_from_palette(self, item: QTreeWidgetItem | None) -> None:
        if item is None:
            return
        name = item.data(0, Qt.ItemDataRole.UserRole)
        if not name or item.isDisabled():
            return
        index = self.state.add_step(name, index=self._insert_index(name))
        self.steps.setCurrentRow(index)

    def _insert_index(self, name: str) -> int | None:
        """Where accel.plan puts a new ``name`` step: None appends (see ``placement``)."""
        recipe = self.state.recipe
        return placement(recipe.steps, name, self._start_form(), recipe.device).index

    def new(self) -> None:
        """A new, empty recipe for the open model (the steps' panel buttons stay put)."""
        from studio.state import default_recipe

        fresh = default_recipe(self.state.recipe.model.source)
        self.state.set_recipe(fresh.model_copy(update={"model": self.state.recipe.model}))
        self.state.status.emit("new recipe: add steps from the pass palette")

    def run(self) -> bool:
        """Run the recipe when it can run (the Run button's check); False: not run, the
        status bar says why."""
        # Ctrl+R does not move the focus: commit what is typed in the forms first.
        for form in (self._form, self.gates_form, self.bench_form):
            if form is not None:
                form.commit()
        self._update_run_button()
        if not self.btn_run.isEnabled():
            self.state.status.emit("not run: " + self.btn_run.toolTip().removeprefix("fix first: "))
            return False
        self.runRequested.emit()
        self.services.run_recipe(self.state.recipe)
        return True


def _scroll(w: QWidget) -> QScrollArea:
    s = QScrollArea()
    s.setWidgetResizable(True)
    s.setWidget(w)
    return s


def _banner_line(problem: str) -> str:
    """``problem`` up to the sample of names that accel.layer_patterns adds ("Names look
    like: ..."); other problems are shown whole."""
    head, sep, _ = problem.partition(" Names look like:")
    return head + (" (hover for the layer names)" if sep else "")
