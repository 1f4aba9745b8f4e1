"""Deploying a run to Triton: the ``deploy`` job, in a confined worker like `studio deploy`.

``deploy_triton(run_id, out, force=False)`` finds the run's servable model file
(``studio.serve_test.deploy_spec``), then a worker loads it, checks it runs on the run's
input spec, measures a batch sweep and writes the model repository into ``out``;
``deployFinished(run_id, DeployReport.to_dict() + {"artifact"} or None, error)`` ends it.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal

from studio.controllers.base import JobController
from studio.errors import UserError


class DeployController(JobController):
    """The Deploy action (see the module docstring)."""

    name = "deploy"
    latest_only = False  # every deploy the person asked for ends visibly
    deployFinished = Signal(str, object, str)  # run_id, DeployReport dict or None, error

    def deploy_triton(self, run_id: str, out: str, *, force: bool = False) -> str | None:
        """Write a Triton model repository for run ``run_id`` into ``out`` in a worker;
        the job id, or None when the run cannot be deployed (``deployFinished`` says why)."""
        from studio.serve_test import deploy_spec

        repo = self.ctx.repo
        if repo is None:
            self.deployFinished.emit(run_id, None, "no database: the run cannot be looked up")
            return None
        try:
            spec, art = deploy_spec(repo, run_id, out, force=force)
        except UserError as exc:
            self.deployFinished.emit(run_id, None, str(exc))
            return None
        device = spec.device or "cpu"
        handle = self.submit(spec, {"run_id": run_id, "artifact": art}, device=device)
        self.state.status.emit("writing the Triton model repository (measuring a batch sweep)…")
        return handle.job_id

    def failed(self, job_id: str, ctx: dict[str, Any], message: str) -> None:
        self.deployFinished.emit(ctx.get("run_id", ""), None, message)

    def succeeded(self, job_id: str, ctx: dict[str, Any], result: dict[str, Any]) -> None:
        self.deployFinished.emit(ctx["run_id"], {**result, "artifact": ctx["artifact"]}, "")
