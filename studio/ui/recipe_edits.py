"""The Recipe panel's edits (a mixin of ``RecipeView``): step params, enable, order,
duplicate/remove, gates/benchmark/settings forms, and recipe files (open, save, script).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QListWidgetItem, QMessageBox

from accel.recipe import BenchSettings, Gates


class RecipeEditsMixin:
    def _params_changed(self, row: int, params: dict[str, Any]) -> None:
        steps = list(self.state.recipe.steps)
        if not (0 <= row < len(steps)) or steps[row].params == params:
            return
        steps[row] = steps[row].model_copy(update={"params": params})
        self._syncing = True
        try:
            self.state.update_steps(steps)
        finally:
            self._syncing = False
        item = self.steps.item(row)
        if item is not None:
            item.setText(
                f"{row + 1}. {steps[row].label}" + (f"  {_short(params)}" if params else "")
            )

    def _item_changed(self, item: QListWidgetItem) -> None:
        if self._syncing:
            return
        row = self.steps.row(item)
        steps = list(self.state.recipe.steps)
        enabled = item.checkState() == Qt.CheckState.Checked
        if 0 <= row < len(steps) and steps[row].enabled != enabled:
            steps[row] = steps[row].model_copy(update={"enabled": enabled})
            self.state.update_steps(steps)

    def _rows_moved(self, _parent, start: int, _end: int, _dest, row: int) -> None:
        if self._syncing:
            return
        steps = list(self.state.recipe.steps)
        step = steps.pop(start)
        steps.insert(row - 1 if row > start else row, step)
        self.state.update_steps(steps)

    def _move(self, delta: int) -> None:
        row = self.steps.currentRow()
        steps = list(self.state.recipe.steps)
        new = row + delta
        if not (0 <= row < len(steps) and 0 <= new < len(steps)):
            return
        steps[row], steps[new] = steps[new], steps[row]
        self.state.update_steps(steps)
        self.steps.setCurrentRow(new)

    def _duplicate(self) -> None:
        row = self.steps.currentRow()
        steps = list(self.state.recipe.steps)
        if 0 <= row < len(steps):
            steps.insert(row + 1, steps[row].model_copy())
            self.state.update_steps(steps)
            self.steps.setCurrentRow(row + 1)

    def _remove(self) -> None:
        row = self.steps.currentRow()
        steps = list(self.state.recipe.steps)
        if 0 <= row < len(steps):
            steps.pop(row)
            self.state.update_steps(steps)

    def _gates_changed(self, params: dict[str, Any]) -> None:
        if self._syncing:
            return
        gates = Gates.model_validate({**self.state.recipe.gates.model_dump(), **params})
        if gates != self.state.recipe.gates:
            self.state.set_recipe(
                self.state.recipe.model_copy(update={"gates": gates}), self.state.recipe_path
            )

    def _bench_changed(self, params: dict[str, Any]) -> None:
        if self._syncing:
            return
        bench = BenchSettings.model_validate({**self.state.recipe.benchmark.model_dump(), **params})
        if bench != self.state.recipe.benchmark:
            self.state.set_recipe(
                self.state.recipe.model_copy(update={"benchmark": bench}), self.state.recipe_path
            )

    def _settings_changed(self, *_: Any) -> None:
        if self._syncing:
            return
        r = self.state.recipe
        update = {
            "name": self.name_edit.text().strip() or "untitled",
            "device": self.device_combo.currentText(),
            "on_gate_fail": self.gate_combo.currentText(),
            "on_step_error": "skip" if self.skip_check.isChecked() else "stop",
        }
        if any(getattr(r, k) != v for k, v in update.items()):
            self.state.set_recipe(r.model_copy(update=update), self.state.recipe_path)

    # -- files, script, run ----------------------------------------------------------------
    def open_recipe(self, path: str | None = None) -> bool:
        from accel.recipe import load_recipe

        if not path:
            path, _ = QFileDialog.getOpenFileName(
                self, "Open recipe", "", "Recipes (*.yaml *.yml *.json)"
            )
        if not path:
            return False
        try:
            recipe = load_recipe(path)
        except Exception as exc:
            QMessageBox.warning(self, "Cannot open recipe", f"{path}:\n\n{exc}")
            return False
        self.state.set_recipe(recipe, str(path))
        if recipe.model.source != self.state.model_source and hasattr(self.services, "open_model"):
            self.services.open_model(recipe.model.source, recipe.model.input_spec)
        return True

    def save_recipe(self, path: str | None = None) -> bool:
        from accel.recipe import save_recipe

        if not path:
            path, _ = QFileDialog.getSaveFileName(
                self,
                "Save recipe",
                self.state.recipe_path or f"{self.state.recipe.name}.yaml",
                "Recipes (*.yaml *.yml *.json)",
            )
        if not path:
            return False
        try:
            save_recipe(self.state.recipe, path)
        except OSError as exc:
            QMessageBox.warning(self, "Cannot save recipe", f"{path}:\n\n{exc}")
            return False
        self.state.recipe_path = str(path)
        self.state.status.emit(f"recipe saved to {path}")
        return True

    def export_script(self) -> None:
        from studio.ui.script_dialog import ScriptDialog

        ScriptDialog(self.state, self.services, self).open()


def _short(params: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"({text[:60]}{'…' if len(text) > 60 else ''})"
