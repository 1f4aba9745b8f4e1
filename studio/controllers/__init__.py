"""The studio's feature controllers: one per feature, each with an explicit interface.

A controller runs its feature's worker jobs (``base.JobController``: a typed job spec in,
its declared kind to the pool, the job's end back to the controller that asked) and puts
results into ``studio.state.AppState`` and its own signals. ``studio.services.Services``
composes them for a window. No widget here; each module names what it does and emits.
"""

from studio.controllers.base import JobController, JobRouter, StudioContext, outcome_message
from studio.controllers.deploy import DeployController
from studio.controllers.diff import DiffController
from studio.controllers.exports import ExportController
from studio.controllers.models import ModelController
from studio.controllers.profile import ProfileController
from studio.controllers.runs import RunController
from studio.controllers.serve import ServeTestController

__all__ = [
    "DeployController",
    "DiffController",
    "ExportController",
    "JobController",
    "JobRouter",
    "ModelController",
    "ProfileController",
    "RunController",
    "ServeTestController",
    "StudioContext",
    "outcome_message",
]
