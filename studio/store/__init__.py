"""The experiment store: every run, step, metric, parity result, artifact and profile.

Use ``Repository.open(db)`` (``db``: a URL, a SQLite file, or None for the default file in
the user data folder); it migrates the schema at start-up. Queries return the plain
dataclasses of ``studio.store.records``.
"""

from studio.store.api import Store
from studio.store.db import default_db_path, resolve_db_url
from studio.store.records import (
    ArtifactRecord,
    Comparison,
    ModelRecord,
    ParityRecord,
    ProfileLayer,
    ProfileRecord,
    RecipeRecord,
    RunDetail,
    RunFilter,
    RunRecord,
    StepRecord,
)
from studio.store.repo import Repository, RunNotFound, StoreError

__all__ = [
    "ArtifactRecord",
    "Comparison",
    "ModelRecord",
    "ParityRecord",
    "ProfileLayer",
    "ProfileRecord",
    "RecipeRecord",
    "Repository",
    "RunDetail",
    "RunFilter",
    "RunNotFound",
    "RunRecord",
    "StepRecord",
    "Store",
    "StoreError",
    "default_db_path",
    "resolve_db_url",
]
