"""Profiling the current model: the ``profile`` job, its result in ``state.profile``.

``profile_current(**settings)`` profiles the open model in a worker (its Chrome trace in the
data folder; a decoder LM also generating, split per layer, unless ``generate`` is off); the
result lands in ``state.set_profile`` with ``profileReady`` and is stored
in the database off the GUI thread (``studio.usecases.store_profile``, as `studio profile
--store` does). A result for a model no longer open is dropped.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from PySide6.QtCore import Signal

from accel.job_specs import ProfileJob
from studio.controllers.base import JobController
from studio.usecases import store_profile

log = logging.getLogger(__name__)


class ProfileController(JobController):
    """The Profile action (see the module docstring)."""

    name = "profile"
    profileReady = Signal()  # state.profile is set
    # A decoder LM is also profiled generating (the Profile panel's Generation box).
    generate = True

    def profile_current(self, **profile_kwargs: Any) -> str | None:
        """Profile the current model in a worker; the result lands in ``state.profile``."""
        st = self.state
        if not st.model_source:
            self.jobFailed.emit(self.name, "open a model first")
            return None
        trace = self.ctx.data_dir() / "traces" / "last_profile_trace.json"
        trace.parent.mkdir(parents=True, exist_ok=True)
        settings: dict[str, Any] = {"trace_path": str(trace)}
        if self.generate and st.model_info.get("generation_split", "") is None:
            settings["generate"] = True
        settings.update(profile_kwargs)
        spec = self.spec(ProfileJob, st.model_source, st.input_spec, **settings)
        if spec is None:
            return None
        context = {"source": st.model_source, "input_spec": st.input_spec}
        job_id = self.submit(spec, context, device="cpu", priority=5).job_id
        st.status.emit(f"profiling {st.model_source}…")
        return job_id

    def succeeded(self, job_id: str, ctx: dict[str, Any], result: dict[str, Any]) -> None:
        from accel.job_results import ProfileResult

        if ctx.get("source") != self.state.model_source:
            return  # the model changed while profiling
        profiled = ProfileResult.from_dict(result)
        prof = profiled.profile
        self.state.set_profile(prof)
        self.profileReady.emit()
        self.state.status.emit(f"profiled {ctx.get('source')}: {prof.total_ms:.2f} ms per forward")
        self._record(profiled)

    def _record(self, profiled: Any) -> None:
        repo = self.ctx.repo
        if repo is None:
            return

        def work() -> None:
            try:
                store_profile(repo, profiled)
            except Exception:
                log.exception("could not store the profile")

        # SQLite writes can wait on a busy lock: never on the GUI thread.
        threading.Thread(target=work, name="record-profile", daemon=True).start()
