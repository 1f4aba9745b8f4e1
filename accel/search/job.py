"""The job a search runs in a worker (or a Ray task) for each spec it hands out: a trial
(``accel.search.trial.run_trial``) or, for a spec with ``retime``, the final side-by-side
re-timing of the top trials (``accel.search.retime.run_retime``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_search_job(
    spec: dict[str, Any], emit: Callable[[dict[str, Any]], None], cancel: Callable[[], bool]
) -> dict[str, Any]:
    """Run ``spec`` as a trial, or as the final re-timing when it lists ``retime``."""
    if spec.get("retime") is not None:
        from accel.search.retime import run_retime

        return run_retime(spec, emit, cancel)
    from accel.search.trial import run_trial

    return run_trial(spec, emit, cancel)
