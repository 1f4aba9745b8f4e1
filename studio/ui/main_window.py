"""The studio's main window: dockable panels, menus, toolbar, status bar, drag and drop.

Panels are ``QWidget(state, services, parent)``. The Graph and Netron views share the
centre (tabs); Model, Recipe, Profile, Runs and History are docks whose placement is
remembered (QSettings). Panels written elsewhere (Recipe, Runs, History, the script
dialog) are imported lazily: a missing one leaves a placeholder saying so.
"""

from __future__ import annotations

import html
import importlib
import logging
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.ui import theme

log = logging.getLogger(__name__)

MODEL_SUFFIXES = (".onnx", ".pt", ".pt2", ".ts", ".pth")
RECIPE_SUFFIXES = (".yaml", ".yml", ".json")
DEMO_MODEL = "zoo:resnet"
MAX_RECENT = 10
LAYOUT_VERSION = 1  # bump when the set of docks changes: old saved layouts are ignored

# (object name, title, module, class, area)
DOCKS = [
    ("model", "Model", "studio.ui.model_view", "ModelView", Qt.DockWidgetArea.LeftDockWidgetArea),
    (
        "recipe",
        "Recipe",
        "studio.ui.recipe_view",
        "RecipeView",
        Qt.DockWidgetArea.RightDockWidgetArea,
    ),
    (
        "profile",
        "Profile",
        "studio.ui.profile_view",
        "ProfileView",
        Qt.DockWidgetArea.BottomDockWidgetArea,
    ),
    ("runs", "Runs", "studio.ui.runs_view", "RunsView", Qt.DockWidgetArea.BottomDockWidgetArea),
    (
        "history",
        "History",
        "studio.ui.history_view",
        "HistoryView",
        Qt.DockWidgetArea.BottomDockWidgetArea,
    ),
]


def load_panel(module: str, cls: str, state, services, parent=None) -> QWidget:
    """Instantiate a panel; a missing or broken one becomes a placeholder with the reason."""
    try:
        mod = importlib.import_module(module)
        return getattr(mod, cls)(state, services, parent)
    except Exception as exc:  # a panel must never keep the window from opening
        if isinstance(exc, ModuleNotFoundError) and exc.name == module:
            reason = f"{module} is not part of this build yet"
        else:
            log.exception("panel %s.%s failed to load", module, cls)
            reason = f"{cls} could not be loaded: {type(exc).__name__}: {exc}"
        w = QWidget(parent)
        w.setObjectName(f"placeholder_{cls}")
        lab = QLabel(reason)
        lab.setWordWrap(True)
        lab.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay = QVBoxLayout(w)
        lay.addWidget(lab)
        return w


# Imported when the window is built: a first import on the result path (shiboken's
# import hook reads each new module's source) would stall the GUI thread mid-flow.
WARM_IMPORTS = (
    "accel.models",
    "accel.models.inputs",
    "accel.graph",
    "accel.graph.layout",
    "accel.profile",
    "accel.profile.results",
    "accel.recipe",
    "studio.ui.open_model_dialog",
)


def warm_imports() -> None:
    for name in WARM_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # only a head start; the real import reports problems
            log.debug("warm import of %s failed", name, exc_info=True)


class MainWindow(QMainWindow):
    """The studio window. ``settings`` defaults to the app's QSettings (tests pass their own)."""

    def __init__(self, state, services, settings: QSettings | None = None, parent=None) -> None:
        super().__init__(parent)
        self.state = state
        self.services = services
        services.confirm_code = self.confirm_recipe_code
        self.settings = settings or QSettings()
        self.setObjectName("MainWindow")
        self.setWindowTitle("Accel Studio")
        self.setAcceptDrops(True)
        self.setDockNestingEnabled(True)
        self.resize(1400, 900)
        warm_imports()

        from studio.ui.graph_view import GraphView
        from studio.ui.netron_view import NetronView

        self.graph_view = GraphView(state, services, self)
        self.netron_view = NetronView(state, services, self)
        self.center = QTabWidget()
        self.center.setDocumentMode(True)
        self.center.addTab(self.graph_view, "Graph")
        self.center.addTab(self.netron_view, "Netron")
        self.setCentralWidget(self.center)

        self.panels: dict[str, QWidget] = {}
        self.docks: dict[str, QDockWidget] = {}
        for name, title, module, cls, area in DOCKS:
            panel = load_panel(module, cls, state, services, self)
            dock = QDockWidget(title, self)
            dock.setObjectName(f"dock_{name}")
            dock.setWidget(panel)
            self.addDockWidget(area, dock)
            self.panels[name] = panel
            self.docks[name] = dock
        self.tabifyDockWidget(self.docks["profile"], self.docks["runs"])
        self.tabifyDockWidget(self.docks["runs"], self.docks["history"])
        self.docks["profile"].raise_()
        self.resizeDocks(
            [self.docks["model"], self.docks["recipe"]], [260, 480], Qt.Orientation.Horizontal
        )
        self.resizeDocks([self.docks["profile"]], [300], Qt.Orientation.Vertical)
        self._default_state = self.saveState(LAYOUT_VERSION)

        self._make_actions()
        self._make_menus()
        self._make_toolbar()
        self._make_status_bar()

        state.status.connect(lambda msg: self.statusBar().showMessage(msg, 8000))
        from studio.ui.slots import report_slot_errors

        report_slot_errors(lambda msg: self.statusBar().showMessage(msg, 15000))
        state.modelChanged.connect(self._on_model_changed)
        state.modelFailed.connect(self._on_model_failed)
        services.runQueued.connect(self._show_runs)
        services.busyChanged.connect(self._update_busy)
        services.profileReady.connect(lambda: self.docks["profile"].raise_())
        self.restore_layout()
        theme.apply(theme.saved(self.settings))
        self._sync_theme_menu()

    # -- actions --------------------------------------------------------------------------
    def _action(
        self, text: str, slot, shortcut: str | QKeySequence | None = None, tip: str = ""
    ) -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(QKeySequence(shortcut))
        if tip:
            act.setStatusTip(tip)
            act.setToolTip(f"{tip} ({act.shortcut().toString()})" if shortcut else tip)
        act.triggered.connect(lambda *_args, s=slot: s())  # not triggered(bool)'s flag
        self.addAction(act)
        return act

    def _make_actions(self) -> None:
        self.act_open = self._action(
            "&Open model…",
            self.open_model_dialog,
            QKeySequence.StandardKey.Open,
            "Open a model file, a zoo model or a module:factory",
        )
        self.act_open_recipe = self._action(
            "Open &recipe…",
            self.open_recipe_dialog,
            "Ctrl+Shift+O",
            "Open a recipe (.yaml / .json)",
        )
        self.act_save_recipe = self._action(
            "&Save recipe as…", self.save_recipe_dialog, "Ctrl+Shift+S", "Save the current recipe"
        )
        self.act_export_script = self._action(
            "Export &script…",
            self.export_script,
            "Ctrl+E",
            "Export the recipe as a plain Python script",
        )
        self.act_quit = self._action("&Quit", self.close, QKeySequence.StandardKey.Quit)
        self.act_profile = self._action(
            "&Profile", self.profile, "Ctrl+P", "Time every layer of the current model"
        )
        self.act_export_onnx = self._action(
            "Export to ONNX for Netron",
            self.services.export_onnx,
            None,
            "Export the current torch model to ONNX",
        )
        self.act_run = self._action(
            "&Run recipe", self.run_recipe, "Ctrl+R", "Run the recipe in a worker"
        )
        self.act_deploy = self._action(
            "&Deploy run to Triton…",
            lambda: self.deploy_run(),
            None,
            "Write a Triton model repository for the selected run's final model",
        )
        self.act_deploy.setEnabled(False)
        self.state.currentRunChanged.connect(lambda rid: self.act_deploy.setEnabled(bool(rid)))
        self.services.deployFinished.connect(self._on_deployed)
        self.act_optimize = self._action(
            "&Optimize…",
            self.optimize_dialog,
            "Ctrl+Shift+R",
            "Search for the fastest recipe within a parity budget",
        )
        self.act_find = self._action(
            "&Find in graph",
            self.find_in_graph,
            QKeySequence.StandardKey.Find,
            "Search graph nodes by name or op",
        )
        self.act_fit = self._action(
            "Fit &graph", self.graph_view.fit, "F", "Fit the graph in the view"
        )
        self.act_reset_layout = self._action("Reset panel layout", self.reset_layout)
        self.act_about = self._action("&About Accel Studio", self.about)
        self.act_runs_dir = self._action(
            "Runs &folder…", self.choose_runs_dir, tip="Choose where run artifacts are saved"
        )
        self.act_demo = self._action("Open the demo model", lambda: self.open_model(DEMO_MODEL))

    def _make_menus(self) -> None:
        mb = self.menuBar()
        m = mb.addMenu("&File")
        m.addAction(self.act_open)
        self.recent_menu = m.addMenu("Open r&ecent")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        m.addAction(self.act_demo)
        m.addSeparator()
        m.addAction(self.act_open_recipe)
        m.addAction(self.act_save_recipe)
        m.addAction(self.act_export_script)
        m.addSeparator()
        m.addAction(self.act_runs_dir)
        m.addAction(self.act_quit)
        m = mb.addMenu("&Model")
        m.addAction(self.act_profile)
        m.addAction(self.act_export_onnx)
        m = mb.addMenu("&Recipe")
        m.addAction(self.act_run)
        m.addAction(self.act_deploy)
        m.addAction(self.act_optimize)
        m = mb.addMenu("&View")
        m.addAction(self.act_find)
        m.addAction(self.act_fit)
        m.addSeparator()
        for dock in self.docks.values():
            m.addAction(dock.toggleViewAction())
        m.addAction(self.act_reset_layout)
        m.addSeparator()
        tm = m.addMenu("&Theme")
        self.theme_group = QActionGroup(self)
        self.theme_actions: dict[str, QAction] = {}
        for key, label in (("system", "Follow the system"), ("light", "Light"), ("dark", "Dark")):
            act = tm.addAction(label)
            act.setCheckable(True)
            act.triggered.connect(lambda _=False, k=key: self.set_theme(k))
            self.theme_group.addAction(act)
            self.theme_actions[key] = act
        m = mb.addMenu("&Help")
        m.addAction(self.act_about)

    def _make_toolbar(self) -> None:
        tb = self.addToolBar("Main")
        tb.setObjectName("toolbar_main")
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        for act in (self.act_open, self.act_profile, self.act_run):
            tb.addAction(act)
        tb.addSeparator()
        tb.addAction(self.act_find)
        tb.addAction(self.act_fit)

    def _make_status_bar(self) -> None:
        sb = self.statusBar()
        self.device_label = QLabel(f"device: {self.services.device}")
        self.device_label.setToolTip("Worker lanes (jobs run in worker processes)")
        self.workers_label = QLabel("workers: idle")
        db = self.services.db_path or "no database"
        self.db_label = QLabel(f"db: {_short_path(db)}")
        self.db_label.setToolTip(db)
        saved = self.settings.value("runs_dir", "")
        if saved:
            self.services.runs_dir = Path(str(saved))
        self.runs_label = QLabel()
        self._update_runs_label()
        for w in (self.device_label, self.workers_label, self.db_label, self.runs_label):
            w.setContentsMargins(8, 0, 8, 0)
            sb.addPermanentWidget(w)

    def _update_runs_label(self) -> None:
        root = str(self.services.runs_root())
        self.runs_label.setText(f"runs: {_short_path(root)}")
        self.runs_label.setToolTip(f"Run artifacts go to {root} (File ▸ Runs folder… to change)")

    def choose_runs_dir(self, path: str | None = None) -> None:
        if path is None:
            path = QFileDialog.getExistingDirectory(
                self, "Folder for run artifacts", str(self.services.runs_root())
            )
        if not path:
            return
        self.services.runs_dir = Path(path)
        self.settings.setValue("runs_dir", str(path))
        self._update_runs_label()
        self.statusBar().showMessage(f"run artifacts now go to {path}", 8000)

    def _update_busy(self, n: int) -> None:
        self.workers_label.setText(f"workers: {n} busy" if n else "workers: idle")

    # -- theme ----------------------------------------------------------------------------
    def set_theme(self, key: str) -> None:
        theme.apply(key)
        self.settings.setValue("theme", key)
        self._sync_theme_menu()

    def _sync_theme_menu(self) -> None:
        act = self.theme_actions.get(theme.saved(self.settings))
        if act is not None:
            act.setChecked(True)

    # -- models ---------------------------------------------------------------------------
    def open_model(
        self, source: str, input_spec: str | None = None, trust_pickle: bool = False
    ) -> None:
        self.services.open_model(source, input_spec, trust_pickle=trust_pickle)

    def open_model_dialog(self) -> None:
        from studio.ui.open_model_dialog import OpenModelDialog

        last = str(self.settings.value("last_model", "") or "")
        dlg = OpenModelDialog(self, recent=self.recent_models(), last=last)
        if last.startswith("zoo:"):
            dlg.tabs.setCurrentWidget(dlg.zoo)
        if dlg.exec() and dlg.source():
            self.open_model(dlg.source(), dlg.input_spec(), dlg.trust_pickle())

    def recent_models(self) -> list[str]:
        value = self.settings.value("recent_models", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def _remember(self, source: str) -> None:
        recent = [source] + [r for r in self.recent_models() if r != source]
        self.settings.setValue("recent_models", recent[:MAX_RECENT])
        self.settings.setValue("last_model", source)

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        recent = self.recent_models()
        for src in recent:
            self.recent_menu.addAction(src, lambda s=src: self.open_model(s))
        if not recent:
            self.recent_menu.addAction("(none)").setEnabled(False)

    def _on_model_changed(self) -> None:
        src = self.state.model_source or ""
        self.setWindowTitle(f"{src} — Accel Studio" if src else "Accel Studio")
        if src:
            self._remember(src)

    def _show_runs(self, *_: object) -> None:
        """Bring the Runs panel forward when a run starts (its row is selected there)."""
        dock = self.docks.get("runs")
        if dock is not None:
            dock.show()
            dock.raise_()

    def _on_model_failed(self, message: str) -> None:
        self.statusBar().showMessage(message.splitlines()[0], 15000)

    def open_initial_model(self, source: str | None = None) -> None:
        """``source`` if given, else the demo model on the first start, else the last model."""
        if source:
            self.open_model(source)
            return
        if not self.settings.value("started_before", False, type=bool):
            self.settings.setValue("started_before", True)
            self.open_model(DEMO_MODEL)
            return
        last = self.settings.value("last_model", "", type=str)
        if last:
            self.open_model(last)

    # -- recipe / run / profile -----------------------------------------------------------
    def profile(self) -> None:
        if self.services.profile_current():
            self.docks["profile"].raise_()

    def run_recipe(self) -> None:
        if not self.state.recipe.steps:
            self.statusBar().showMessage(
                "the recipe has no steps: add some in the Recipe panel", 8000
            )
        self.services.run_recipe()
        self.docks["runs"].raise_()

    def confirm_recipe_code(self, refs: list[str]) -> bool:
        """Ask before a recipe's code is imported and called (SECURITY.md): a recipe file
        cannot decide that by itself."""
        text = (
            "This recipe names Python code that running it will import and call:\n\n"
            + "\n".join(f"  • {r}" for r in refs)
            + "\n\nImporting a module runs its code with your permissions. Run it only if "
            "you trust where the recipe and this code come from."
        )
        box = QMessageBox(QMessageBox.Icon.Warning, "Run code from the recipe?", text, parent=self)
        run = box.addButton("Import and run", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is run

    def deploy_run(self, out: str | None = None) -> None:
        """Deploy the current run (a finished one with an ONNX/TorchScript/... model file)
        as a Triton model repository into ``out`` (asked for when None)."""
        run_id = self.state.current_run_id
        if not run_id:
            return
        if out is None:
            out = QFileDialog.getExistingDirectory(self, "Triton model repository folder")
            if not out:
                return
        force = False
        folder = Path(out)
        if folder.is_dir() and any(folder.iterdir()):
            answer = QMessageBox.question(
                self, "Replace folder?", f"{out} is not empty. Replace its contents?"
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
            force = True
        self.services.deploy_triton(run_id, out, force=force)

    def _on_deployed(self, run_id: str, result: object, error: str) -> None:
        if error or not isinstance(result, dict):
            self.statusBar().showMessage(f"deploy failed: {error}", 10000)
            box = QMessageBox(
                QMessageBox.Icon.Warning, "Cannot deploy this run", error, parent=self
            )
            box.open()  # not exec(): nothing waits on it
            return
        sizes = ", ".join(map(str, result.get("preferred_batch_sizes") or [])) or "none"
        self.statusBar().showMessage(
            f"wrote {result['model_dir']} ({result['platform']}, preferred batch sizes {sizes})",
            10000,
        )

    def optimize_dialog(self) -> None:
        from studio.ui.optimize_dialog import OptimizeDialog

        dlg = getattr(self, "_optimize", None)
        if dlg is None:
            dlg = self._optimize = OptimizeDialog(self.state, self.services, self)
            dlg.recipeOpened.connect(lambda _label: self.docks["recipe"].raise_())
        dlg.show()
        dlg.raise_()

    def load_recipe_file(self, path: str) -> bool:
        from accel.recipe import load_recipe

        try:
            recipe = load_recipe(Path(path))
        except Exception as exc:
            QMessageBox.warning(self, "Cannot open recipe", f"{path}:\n{exc}")
            return False
        self.state.set_recipe(recipe, path)
        src = recipe.model.source if recipe.model else None
        if src and src != self.state.model_source:
            self.open_model(src, getattr(recipe.model, "input_spec", None))
        self.statusBar().showMessage(f"recipe {path} loaded", 8000)
        return True

    def open_recipe_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open recipe", "", "Recipes (*.yaml *.yml *.json)"
        )
        if path:
            self.load_recipe_file(path)

    def save_recipe_dialog(self) -> None:
        from accel.recipe import save_recipe

        path, _ = QFileDialog.getSaveFileName(
            self,
            "Save recipe",
            self.state.recipe_path or "recipe.yaml",
            "Recipes (*.yaml *.yml *.json)",
        )
        if path:
            save_recipe(self.state.recipe, path)
            self.state.recipe_path = path
            self.statusBar().showMessage(f"recipe saved to {path}", 8000)

    def export_script(self) -> None:
        try:
            mod = importlib.import_module("studio.ui.script_dialog")
        except ModuleNotFoundError:
            QMessageBox.information(
                self,
                "Export script",
                "The script dialog is not part of this build yet; use `studio export-script RECIPE`.",
            )
            return
        cls = getattr(mod, "ScriptDialog", None)
        if cls is not None:
            cls(self.state, self.services, self).exec()

    # -- graph ----------------------------------------------------------------------------
    def find_in_graph(self) -> None:
        self.center.setCurrentWidget(self.graph_view)
        self.graph_view.focus_search()

    # -- drag and drop --------------------------------------------------------------------
    @staticmethod
    def _dropped_files(event) -> list[str]:
        md = event.mimeData()
        if not md.hasUrls():
            return []
        return [u.toLocalFile() for u in md.urls() if u.isLocalFile()]

    def dragEnterEvent(self, event) -> None:  # noqa: N802
        files = self._dropped_files(event)
        if any(f.lower().endswith(MODEL_SUFFIXES + RECIPE_SUFFIXES) for f in files):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event) -> None:  # noqa: N802
        handled = self.open_paths(self._dropped_files(event))
        if handled:
            event.acceptProposedAction()

    def open_paths(self, paths: list[str]) -> int:
        """Open dropped files: recipes are loaded, the first model file is opened."""
        n = 0
        model = None
        for p in paths:
            low = p.lower()
            if low.endswith(RECIPE_SUFFIXES):
                n += self.load_recipe_file(p)
            elif low.endswith(MODEL_SUFFIXES) and model is None:
                model = p
        if model is not None:
            self.open_model(model)
            n += 1
        return n

    # -- layout ---------------------------------------------------------------------------
    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        if not getattr(self, "_docks_fitted", False):
            self._docks_fitted = True
            if self.settings.value("window/state") is None:
                from PySide6.QtCore import QTimer

                QTimer.singleShot(0, self.fit_docks_to_window)

    def fit_docks_to_window(self) -> None:
        """Share the window by proportion (a laptop's 1366x768 and a 1920x1080 screen alike):
        the graph keeps about half the width and two thirds of the height."""
        w, h = self.width(), self.height()
        self.resizeDocks(
            [self.docks["model"], self.docks["recipe"]],
            [max(230, int(w * 0.17)), max(420, int(w * 0.33))],
            Qt.Orientation.Horizontal,
        )
        self.resizeDocks([self.docks["profile"]], [max(200, int(h * 0.3))], Qt.Orientation.Vertical)

    def restore_layout(self) -> None:
        geo = self.settings.value("window/geometry")
        if isinstance(geo, QByteArray):
            self.restoreGeometry(geo)
        st = self.settings.value("window/state")
        if isinstance(st, QByteArray):
            self.restoreState(st, LAYOUT_VERSION)

    def save_layout(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState(LAYOUT_VERSION))

    def reset_layout(self) -> None:
        self.restoreState(self._default_state, LAYOUT_VERSION)
        for dock in self.docks.values():
            dock.show()

    # -- about / close --------------------------------------------------------------------
    def about(self) -> None:
        where = (
            f"<p>Database: {html.escape(self.services.db_path or 'none')}<br>"
            f"Run artifacts: {html.escape(str(self.services.runs_root()))}</p>"
        )
        QMessageBox.about(self, "About Accel Studio", about_html() + where)

    def closeEvent(self, event) -> None:  # noqa: N802
        self.save_layout()
        self.settings.sync()
        self.netron_view.release()
        super().closeEvent(event)


def _short_path(p: str, n: int = 48) -> str:
    return p if len(p) <= n else "…" + p[-(n - 1) :]


def library_versions() -> dict[str, str]:
    """Versions of the libraries the studio uses (without importing heavy ones)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for dist in (
        "accel-studio",
        "torch",
        "onnx",
        "onnxruntime",
        "onnxruntime-gpu",
        "torchao",
        "torch-pruning",
        "PySide6",
        "pyqtgraph",
        "SQLAlchemy",
        "netron",
    ):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    import platform

    out["Python"] = platform.python_version()
    return out


def about_html() -> str:
    rows = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in library_versions().items())
    return (
        "<h3>Accel Studio</h3><p>Profile, optimize and verify PyTorch and ONNX models. "
        "Every run is benchmarked, checked against the original and stored.</p>"
        f"<table cellspacing=4>{rows}</table>"
    )
