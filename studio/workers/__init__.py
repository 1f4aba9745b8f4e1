"""Worker processes that run jobs (recipes, profiles, analyses) away from the studio process.

``WorkerPool`` (no Qt) starts a fresh ``python -m studio.workers.entry`` per job and talks
to it with the JSON-lines protocol of ``protocol.py``; ``qt_bridge.py`` re-emits the pool's
updates as Qt signals for the GUI.
"""

from studio.workers.pool import JobHandle, JobOutcome, JobUpdate, WorkerPool

__all__ = ["JobHandle", "JobOutcome", "JobUpdate", "WorkerPool"]
