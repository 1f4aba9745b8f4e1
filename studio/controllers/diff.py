"""The graph diff: what a run's step did to the original graph (the ``graph_diff`` job).

``diff_steps(run_id)`` lists the steps of a run that saved a model (what the diff can
compare with); ``diff_run(run_id, step_index)`` diffs the original graph against one of them
in a worker and ``diffReady({"graph", "diff", "step", "artifact", "run_id"})`` brings it.
Both default to ``state.current_run_id``; a result for a model no longer open is dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal

from accel.job_specs import GraphDiffJob
from studio.controllers.base import JobController


class DiffController(JobController):
    """The graph panel's Diff toggle (see the module docstring)."""

    name = "diff"
    diffReady = Signal(object)  # {"graph", "diff", "step", "artifact", "run_id"}

    def diff_steps(self, run_id: str | None = None) -> list[tuple[int, str]]:
        """``(step index, "2. bf16")`` for the steps of run ``run_id`` that saved a model."""
        from accel.graph.layer_parity import saved_step_models

        run_id = run_id or self.state.current_run_id
        repo = self.ctx.repo
        if not run_id or repo is None:
            return []
        try:
            run_dir = repo.get_run(run_id).run_dir
        except Exception:  # noqa: BLE001 - a deleted run: nothing to pick
            return []
        if not run_dir or not Path(run_dir).is_dir():
            return []
        return [(i, f"{i + 1}. {name}") for i, name, _ in saved_step_models(run_dir)]

    def diff_run(self, run_id: str | None = None, step_index: int | None = None) -> str | None:
        """Diff the original graph against the model saved by step ``step_index`` (default:
        the last step that saved one) of run ``run_id`` in a worker; the job id, or None
        after ``jobFailed`` said why."""
        st = self.state
        run_id = run_id or st.current_run_id
        repo = self.ctx.repo
        if not run_id or repo is None or not st.model_source:
            why = "run a recipe first: the diff compares a run's step with the original"
            self.jobFailed.emit(self.name, why)
            return None
        try:
            run_dir = repo.get_run(run_id).run_dir
        except Exception as exc:
            self.jobFailed.emit(self.name, f"run {run_id} not found: {exc}")
            return None
        if not run_dir:
            self.jobFailed.emit(self.name, "this run has no run folder (it did not start)")
            return None
        step = None if step_index is None else int(step_index)
        fields = {"run_dir": str(run_dir), "step_index": step}
        spec = self.spec(GraphDiffJob, st.model_source, st.input_spec, **fields)
        if spec is None:
            return None
        context = {"source": st.model_source, "run_id": run_id}
        job_id = self.submit(spec, context, device="cpu", priority=5).job_id
        st.status.emit("comparing graphs…")
        return job_id

    def succeeded(self, job_id: str, ctx: dict[str, Any], result: dict[str, Any]) -> None:
        if ctx.get("source") == self.state.model_source:
            self.diffReady.emit(dict(result, run_id=ctx.get("run_id")))
