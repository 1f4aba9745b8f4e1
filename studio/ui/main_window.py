"""The studio's main window: dockable panels, their layout, drag and drop.

Panels are ``QWidget(state, services, parent)``. The Graph and Netron views share the
centre (tabs); Model, Recipe, Profile, Runs and History are docks whose placement is
remembered (QSettings). Panels are built through ``load_panel``: one that fails to build
becomes a label with the reason, so a broken panel never keeps the window from opening.

The window is assembled from parts, one module each: actions, menus and toolbar
(window_actions), status bar and theme (window_status), opening models (window_models),
recipe/run/deploy commands (window_recipe) and the About text (about).
"""

from __future__ import annotations

import html
import importlib
import logging

from PySide6.QtCore import QByteArray, QSettings, Qt
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

from accel.models.runtime import model_file_suffixes
from studio.ui import theme
from studio.ui.about import about_html, library_versions
from studio.ui.window_actions import DEMO_MODEL, WindowActions
from studio.ui.window_geometry import clamped, first_size, scrolled
from studio.ui.window_models import MAX_RECENT, WindowModels
from studio.ui.window_recipe import WindowRecipe
from studio.ui.window_status import WindowStatus

# QFileDialog stays importable from here: tests patch studio.ui.main_window.QFileDialog
__all__ = [
    "QFileDialog",
    "DEMO_MODEL",
    "DOCKS",
    "MAX_RECENT",
    "MainWindow",
    "about_html",
    "library_versions",
    "load_panel",
]

log = logging.getLogger(__name__)

MODEL_SUFFIXES = model_file_suffixes()  # the runtimes' one suffix table
RECIPE_SUFFIXES = (".yaml", ".yml", ".json")
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
    """Instantiate a panel; one that fails to build becomes a label with the reason."""
    try:
        mod = importlib.import_module(module)
        return getattr(mod, cls)(state, services, parent)
    except Exception as exc:  # a panel must never keep the window from opening
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


class MainWindow(WindowActions, WindowStatus, WindowModels, WindowRecipe, QMainWindow):
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
        self.resize(first_size(self._available()))
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

        self._make_docks()
        self._default_state = self.saveState(LAYOUT_VERSION)

        self._make_actions()
        self._make_menus()
        self._make_toolbar()
        self._make_status_bar()
        self._wire_run_action()

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

    def _make_docks(self) -> None:
        """The panels, each in its dock; Profile, Runs and History share the bottom as tabs."""
        state, services = self.state, self.services
        self.panels: dict[str, QWidget] = {}
        self.docks: dict[str, QDockWidget] = {}
        for name, title, module, cls, area in DOCKS:
            panel = load_panel(module, cls, state, services, self)
            dock = QDockWidget(title, self)
            dock.setObjectName(f"dock_{name}")
            # In a scroll area: a panel that grows (an error, a result) scrolls inside its
            # dock and never makes the window outgrow the screen.
            dock.setWidget(scrolled(panel))
            self.addDockWidget(area, dock)
            self.panels[name] = panel
            self.docks[name] = dock
        # The Recipe panel takes the right side's full height (its palette and Run button).
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
        self.tabifyDockWidget(self.docks["profile"], self.docks["runs"])
        self.tabifyDockWidget(self.docks["runs"], self.docks["history"])
        self.docks["profile"].raise_()
        self.resizeDocks(
            [self.docks["model"], self.docks["recipe"]], [260, 480], Qt.Orientation.Horizontal
        )
        self.resizeDocks([self.docks["profile"]], [300], Qt.Orientation.Vertical)

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
            # The decorations are known once shown: keep the frame on the screen.
            self.setGeometry(clamped(self.frameGeometry(), self._available(), self._decoration()))
            if self.settings.value("window/state") is None:
                from PySide6.QtCore import QTimer

                QTimer.singleShot(0, self.fit_docks_to_window)

    def fit_docks_to_window(self) -> None:
        """Share the window by proportion (a laptop's 1366x768 and a 1920x1080 screen alike):
        the graph keeps about half the width and two thirds of the height."""
        w, h = self.width(), self.height()
        if w < 1200:  # a small screen: Model and Recipe share the right side as tabs
            self.tabifyDockWidget(self.docks["recipe"], self.docks["model"])
            self.docks["recipe"].raise_()
            self.resizeDocks([self.docks["recipe"]], [w // 2], Qt.Orientation.Horizontal)
        else:
            self.resizeDocks(
                [self.docks["model"], self.docks["recipe"]],
                [max(230, int(w * 0.17)), max(420, int(w * 0.33))],
                Qt.Orientation.Horizontal,
            )
        # Tall enough for History's buttons under its table at 768 px (they were cut off).
        self.resizeDocks(
            [self.docks["profile"]], [max(250, int(h * 0.34))], Qt.Orientation.Vertical
        )

    def restore_layout(self) -> None:
        geo = self.settings.value("window/geometry")
        if isinstance(geo, QByteArray):
            self.restoreGeometry(geo)
            self.setGeometry(clamped(self.frameGeometry(), self._available(), self._decoration()))
        st = self.settings.value("window/state")
        if isinstance(st, QByteArray):
            self.restoreState(st, LAYOUT_VERSION)

    def _available(self):
        """The available area of the screen the window is on (the primary one before)."""
        from PySide6.QtGui import QGuiApplication

        screen = self.screen() or QGuiApplication.primaryScreen()
        return screen.availableGeometry()

    def _decoration(self):
        from PySide6.QtCore import QSize

        return QSize(
            self.frameGeometry().width() - self.width(),
            self.frameGeometry().height() - self.height(),
        )

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
