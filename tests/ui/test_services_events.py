"""Services reads job events as accel.events objects: progress reaches jobProgress, other
kinds (a plugin's own events) are ignored."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")


class FakePool:
    lanes: list = []

    def subscribe(self, fn):
        return lambda: None

    def submit(self, kind, params=None, **kw):
        class H:
            job_id = "job1"
            run_id = None

        return H()

    def shutdown(self, **kw):
        pass


def test_progress_events_reach_job_progress(qtbot):
    from accel.events import Progress
    from studio.services import Services
    from studio.state import AppState

    services = Services(AppState(), pool=FakePool(), open_store=False)
    services.state.model_source = "zoo:mlp"
    job_id = services.profile_current()
    seen: list = []
    services.jobProgress.connect(lambda *a: seen.append(a))
    services.router.on_event(job_id, Progress(-1, 0.5, "timing layers").to_dict())
    services.router.on_event(job_id, {"event": "plugin_thing", "fraction": 0.9})
    assert seen == [(job_id, "profile", 0.5, "timing layers")]
