"""Recipe, run, profile and deploy commands of the main window."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

from studio.ui.availability import set_available


class WindowRecipe:
    """Profile, run, deploy, optimize and recipe files (mixin of MainWindow)."""

    # -- recipe / run / profile -----------------------------------------------------------
    def profile(self) -> None:
        if self.services.profile_current():
            self.docks["profile"].raise_()

    def run_recipe(self) -> None:
        """Run through the Recipe panel, whose check (accel.plan's pre-flight problems, the
        forms' errors, an empty recipe) refuses what cannot run, saying why."""
        panel = self.panels.get("recipe")
        if hasattr(panel, "run"):
            if panel.run():
                self.docks["runs"].raise_()
            return
        self.statusBar().showMessage("not run: the Recipe panel could not be loaded", 8000)

    def _wire_run_action(self) -> None:
        """Recipe ▸ Run, the toolbar's Run and Ctrl+R are enabled when the panel's Run
        button is; disabled, their tooltip and status tip say why."""
        history = self.panels.get("history")
        if hasattr(history, "deployRequested"):
            history.deployRequested.connect(lambda _run_id: self.deploy_run())
        panel = self.panels.get("recipe")
        if not hasattr(panel, "runnableChanged"):
            self._run_state(False, "the Recipe panel could not be loaded")
            return
        panel.runnableChanged.connect(self._run_state)
        self._run_state(panel.btn_run.isEnabled(), panel.btn_run.toolTip())

    def _sync_run_actions(self, run_id: str) -> None:
        """Deploy and Serve test follow the current run (a History selection too): enabled
        when it can be deployed / served here, else their tooltip and status tip say why."""
        from studio.serve_test import deploy_unavailable_reason, unavailable_reason

        repo = getattr(self.services, "repo", None)
        for act, why, tip in (
            (
                self.act_deploy,
                deploy_unavailable_reason(repo, run_id),
                "Write a Triton model repository for the selected run's final model",
            ),
            (
                self.act_serve_test,
                unavailable_reason(repo, run_id),
                "Serve the selected run's model with Triton on 127.0.0.1 under concurrent clients",
            ),
        ):
            set_available(act, why, tip)

    def _run_state(self, ok: bool, why: str) -> None:
        set_available(self.act_run, None if ok else why, "Run the recipe in a worker (Ctrl+R)")

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

    def serve_test_run(self) -> None:
        """The serve-test dialog for the current run (it shows why when it cannot run)."""
        from studio.ui.serve_test_dialog import ServeTestDialog

        if self.state.current_run_id:
            self._serve_dialog = ServeTestDialog(self.services, self.state.current_run_id, self)
            self._serve_dialog.show()

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
        from studio.ui.script_dialog import ScriptDialog

        ScriptDialog(self.state, self.services, self).exec()
