"""Running recipes: the ``run_recipe`` job, recorded by the pool as a run.

``run_recipe(recipe=None, **submit)`` runs ``state.recipe`` by default. Code the recipe
names (a factory, data or metric function) runs only if the person opened it as the model
or confirms it (``confirm_code``, set by the main window); otherwise nothing runs and
``jobFailed("run", why)`` says so. ``runQueued(job_id, run_id)`` then
``runFinished(job_id, outcome)``; every event of the run says ``state.runsChanged``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Signal

from studio.controllers.base import JobController
from studio.usecases import UnconfirmedCode
from studio.workers import JobOutcome


class RunController(JobController):
    """The Run action (see the module docstring)."""

    name = "run"
    latest_only = False  # every run ends visibly
    runQueued = Signal(str, str)  # job_id, run_id ("" without a store)
    runFinished = Signal(str, object)  # job_id, JobOutcome

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Asked before a recipe's code runs: shows the references, returns yes/no.
        self.confirm_code: Callable[[list[str]], bool] | None = None

    def run_recipe(self, recipe: Any = None, **submit_kwargs: Any) -> str | None:
        """Run ``recipe`` (default: ``state.recipe``) in a worker; the pool records it.
        Returns the job id, or None when unconfirmed code kept it from running."""
        recipe = recipe if recipe is not None else self.state.recipe
        data = recipe.to_dict() if hasattr(recipe, "to_dict") else dict(recipe)
        source = (data.get("model") or {}).get("source") or self.state.model_source
        out = str(self.ctx.new_run_dir(str(data.get("name") or "recipe")))
        session = self.ctx.session
        unconfirmed = session.unconfirmed_code(data)
        if unconfirmed and self.confirm_code is not None and self.confirm_code(unconfirmed):
            session.confirm(unconfirmed)
        try:
            spec = session.run_spec(data, out=out, source=source)
        except UnconfirmedCode as exc:
            self.jobFailed.emit(self.name, str(exc))
            return None
        handle = self.submit(
            spec,
            {},
            model_source=source,
            recipe=data,
            name=str(data.get("name") or ""),
            **submit_kwargs,
        )
        self.runQueued.emit(handle.job_id, handle.run_id or "")
        if handle.run_id:
            self.state.current_run_id = handle.run_id
            self.state.currentRunChanged.emit(handle.run_id)
        self.state.runsChanged.emit()
        self.state.status.emit(f"running recipe {data.get('name') or ''}…")
        return handle.job_id

    def on_event(self, job_id: str, event: dict[str, Any]) -> None:
        super().on_event(job_id, event)
        self.state.runsChanged.emit()

    def on_finished(self, job_id: str, outcome: JobOutcome | None) -> None:
        self.context.pop(job_id, None)
        self.runFinished.emit(job_id, outcome)
        self.state.runsChanged.emit()
        self.state.status.emit(f"run {outcome.status if outcome else 'cancelled'}")
