"""The main window's actions, menus and toolbar (a mixin of :class:`MainWindow`)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence

DEMO_MODEL = "zoo:resnet"


class WindowActions:
    """Builds ``act_*``, the menu bar and the toolbar; the slots live in the other parts."""

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
        self._make_model_actions()
        self._make_view_actions()

    def _make_model_actions(self) -> None:
        """Profile, export, run, deploy, serve test, optimize."""
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
        self.services.deployFinished.connect(self._on_deployed)
        self.act_serve_test = self._action(
            "Serve &test run…",
            lambda: self.serve_test_run(),
            None,
            "Serve the selected run's model with Triton on 127.0.0.1 under concurrent clients",
        )
        # Enabled for the current run when it can be deployed / served, else saying why.
        self.state.currentRunChanged.connect(self._sync_run_actions)
        # ... and again when a run ends: the current run is often the one that just finished,
        # and it was still running when it became current (its record is final by now: the
        # pool records a job's end before it announces it)
        if hasattr(self.services, "runFinished"):
            self.services.runFinished.connect(
                lambda *_: self._sync_run_actions(self.state.current_run_id or "")
            )
        self._sync_run_actions(self.state.current_run_id or "")
        self.act_optimize = self._action(
            "&Optimize…",
            self.optimize_dialog,
            "Ctrl+Shift+R",
            "Search for the fastest recipe within a parity budget",
        )

    def _make_view_actions(self) -> None:
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
        m.addAction(self.act_serve_test)
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
