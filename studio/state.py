"""Application state: plain values plus Qt signals that views connect to.

Views take the state in ``__init__`` and connect to its signals (napari style);
controllers (``studio/controllers/``) do the heavy work in workers and threads
and put results here. Nothing in this object does heavy work.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from accel.recipe import Recipe, Step, load_recipe


def default_recipe(source: str = "zoo:resnet") -> Recipe:
    return load_recipe({"name": "untitled", "model": {"source": source}, "steps": []})


class AppState(QObject):
    """The single source of truth shared by all panels."""

    modelChanged = Signal()  # model_source / model_info changed (a new model was opened)
    modelLoading = Signal(str)  # a model source started loading
    modelFailed = Signal(str)  # loading failed: message for the user
    graphChanged = Signal()  # graph (accel.graph.Graph) replaced
    profileChanged = Signal()  # profile (ModelProfile) replaced
    recipeChanged = Signal()  # recipe edited (steps, params, gates...)
    selectionChanged = Signal(str)  # selected node id or module path ("" = none)
    overlayChanged = Signal(str)  # graph overlay: none | latency | params | dtype | parity
    runsChanged = Signal()  # a run started, progressed or finished (history may refresh)
    currentRunChanged = Signal(str)  # run id selected in Runs / History
    runsDeleted = Signal(list)  # run ids deleted from the history
    status = Signal(str)  # one-line message for the status bar

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.model_source: str | None = None
        self.input_spec: str | None = None
        self.model_info: dict[str, Any] = {}
        self.graph: Any = None
        self.profile: Any = None
        self.layer_parity: dict[str, float] = {}
        self.recipe: Recipe = default_recipe()
        self.recipe_path: str | None = None
        self.selected: str = ""
        self.overlay: str = "none"
        self.current_run_id: str | None = None

    # -- model ---------------------------------------------------------------------------
    def set_model(self, source: str, info: dict[str, Any], input_spec: str | None = None) -> None:
        self.model_source = source
        self.model_info = dict(info)
        self.input_spec = input_spec or info.get("input_spec")
        self.graph = None
        self.profile = None
        self.layer_parity = {}
        self.selected = ""
        model = self.recipe.model.model_copy(
            update={"source": source, "input_spec": self.input_spec}
        )
        self.recipe = self.recipe.model_copy(update={"model": model})
        self.modelChanged.emit()
        self.recipeChanged.emit()

    def set_graph(self, graph: Any) -> None:
        self.graph = graph
        self.graphChanged.emit()

    def set_profile(self, profile: Any) -> None:
        self.profile = profile
        self.profileChanged.emit()

    # -- recipe --------------------------------------------------------------------------
    def set_recipe(self, recipe: Recipe, path: str | None = None) -> None:
        self.recipe = recipe
        self.recipe_path = path
        self.recipeChanged.emit()

    def add_step(
        self, pass_name: str, params: dict[str, Any] | None = None, index: int | None = None
    ) -> int:
        """Append (or insert) a step; returns its index. Records a click as a recipe step."""
        steps = list(self.recipe.steps)
        step = Step.model_validate({"pass": pass_name, "params": params or {}})
        index = len(steps) if index is None else index
        steps.insert(index, step)
        self.recipe = self.recipe.model_copy(update={"steps": steps})
        self.recipeChanged.emit()
        return index

    def update_steps(self, steps: list[Step]) -> None:
        self.recipe = self.recipe.model_copy(update={"steps": list(steps)})
        self.recipeChanged.emit()

    # -- selection / overlays ------------------------------------------------------------
    def select(self, key: str) -> None:
        if key != self.selected:
            self.selected = key
            self.selectionChanged.emit(key)

    def set_overlay(self, overlay: str) -> None:
        if overlay != self.overlay:
            self.overlay = overlay
            self.overlayChanged.emit(overlay)
