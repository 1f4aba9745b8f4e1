"""Opening models from the main window: the dialog, recent models, the first start."""

from __future__ import annotations

from studio.ui.window_actions import DEMO_MODEL

MAX_RECENT = 10


class WindowModels:
    """Model loading and the recent-models list (mixin of MainWindow)."""

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
