"""Serve tests of a run: the ``serve_test`` job, stored with the run like the CLI's.

``serve_test(run_id, **options)`` (clients, batches, duration_s, max_requests of
``studio.serve_test.job_params``) serves the run's model with PyTriton on loopback in a
worker; a generation run's stateful LM is served token by token instead (``lm_job``: clients,
requests, duration_s; with and without continuous batching); progress comes as ``jobProgress``; the result is stored (``store_result``, off the
GUI thread) and announced by ``serveTestFinished(job_id, run_id, {"serve_test_id",
"saved_to"?, "report"} or None, error)``. Every serve test is kept, also when another one
started since. Raises ``studio.errors.UserError`` when the run cannot be served.
"""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import Signal

from accel.job_specs import ServeTestJob
from studio.controllers.base import JobController


class ServeTestController(JobController):
    """The Serve test dialog's job (see the module docstring)."""

    name = "serve"
    latest_only = False
    serveTestFinished = Signal(str, str, object, str)

    def serve_test(self, run_id: str, **options: Any) -> str:
        """Serve-test run ``run_id`` in a worker; returns the job id."""
        from studio.serve_test import job_params, lm_job

        lm = lm_job(
            self.ctx.repo,
            run_id,
            clients=options.get("clients"),
            requests=options.get("requests"),
            duration_s=options.get("duration_s"),
        )
        if lm is not None:
            spec, art = lm
            message = "generation serve test: Triton streams the LM's tokens on 127.0.0.1…"
        else:
            options.pop("requests", None)
            params, art = job_params(self.ctx.repo, run_id, **options)
            spec = ServeTestJob.from_params(params)
            message = "serve test: batch sweep, then Triton on 127.0.0.1…"
        context = {"run_id": str(spec.run_id), "artifact": art}
        job_id = self.submit(spec, context, device="cpu").job_id
        self.state.status.emit(message)
        return job_id

    def failed(self, job_id: str, ctx: dict[str, Any], message: str) -> None:
        self.serveTestFinished.emit(job_id, ctx.get("run_id", ""), None, message)

    def succeeded(self, job_id: str, ctx: dict[str, Any], result: dict[str, Any]) -> None:
        repo = self.ctx.repo

        def work() -> None:
            from studio.serve_test import store_result

            try:
                info = store_result(repo, ctx["run_id"], result, ctx["artifact"])
            except Exception as exc:  # noqa: BLE001 - shown to the user as is
                self.serveTestFinished.emit(job_id, ctx["run_id"], None, f"not stored: {exc}")
                return
            self.serveTestFinished.emit(job_id, ctx["run_id"], {**info, "report": result}, "")

        threading.Thread(target=work, name="serve-test-store", daemon=True).start()
