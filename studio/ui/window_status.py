"""The main window's status bar (device, workers, database, runs folder) and theme menu."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QLabel

from studio.ui import theme


class WindowStatus:
    """Status-bar labels, the runs folder setting and the theme choice (mixin of MainWindow)."""

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


def _short_path(p: str, n: int = 48) -> str:
    return p if len(p) <= n else "…" + p[-(n - 1) :]
