"""The store's typed interface: what the services, the CLI commands and the GUI call.

Like MLflow's ``AbstractStore`` beside its ``SqlAlchemyStore``: callers are typed against
these Protocols, ``studio.store.repo.Repository`` (SQLAlchemy) is the implementation.
This module imports no SQLAlchemy. The feature Protocols match the feature modules
(runs + events, queries, profiles, searches, serve tests); ``Store`` is all of them plus opening and
closing. tests/studio/test_store_api.py checks that every method here has the same
signature in ``Repository`` and that ``Repository`` has no public method missing here.

The worker pool needs only four of these calls: see ``studio.workers.recorder.RunRecorder``.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from studio.store.records import (
    Comparison,
    ModelRecord,
    ProfileLayer,
    ProfileRecord,
    RecipeRecord,
    RunDetail,
    RunFilter,
    RunRecord,
    SearchRecord,
    ServeTest,
)


@runtime_checkable
class RunWriter(Protocol):
    """Recording runs: create, status, runner events, tags, deletion (studio.store.runs,
    studio.store.events)."""

    def create_run(
        self,
        *,
        model_source: str | None = None,
        model_kind: str = "torch",
        model_hash: str = "",
        input_spec: str = "",
        recipe: Mapping[str, Any] | None = None,
        kind: str = "run_recipe",
        device: str = "",
        environment: Mapping[str, Any] | None = None,
        parent_run_id: str | None = None,
        tags: Iterable[str] = (),
        notes: str = "",
        name: str = "",
        job_params: Mapping[str, Any] | None = None,
        status: str = "queued",
        run_id: str | None = None,
    ) -> RunRecord: ...

    def set_status(
        self,
        run_id: str,
        status: str,
        *,
        error: str | None = None,
        error_type: str | None = None,
        exit_code: int | None = None,
        signal: str | None = None,
        log_tail: str | None = None,
        summary: Mapping[str, Any] | None = None,
        at: dt.datetime | None = None,
    ) -> None: ...

    def record_event(self, run_id: str, event: Mapping[str, Any]) -> None: ...

    def update_run(
        self,
        run_id: str,
        *,
        name: str | None = None,
        notes: str | None = None,
        tags: Iterable[str] | None = None,
        add_tags: Iterable[str] = (),
        remove_tags: Iterable[str] = (),
    ) -> RunRecord: ...

    def recover_interrupted(self) -> list[str]: ...

    def delete_run(self, run_id: str, *, delete_files: bool = False) -> list[str]: ...

    def check_writable(self) -> None: ...

    def import_unrecorded(self, record: Mapping[str, Any]) -> str: ...


@runtime_checkable
class RunReader(Protocol):
    """Reading runs: History, Compare, export (studio.store.queries)."""

    def resolve_run_id(self, run_id: str) -> str: ...

    def get_run(self, run_id: str) -> RunDetail: ...

    def list_runs(
        self,
        filter: RunFilter | None = None,
        *,
        limit: int = 50,
        offset: int = 0,
        oldest_first: bool = False,
    ) -> list[RunRecord]: ...

    def count_runs(self, filter: RunFilter | None = None) -> int: ...

    def search(self, text: str, *, limit: int = 50) -> list[RunRecord]: ...

    def compare(self, run_ids: Sequence[str]) -> Comparison: ...

    def export_run(self, run_id: str) -> dict[str, Any]: ...

    def export_run_json(self, run_id: str, path: str | os.PathLike[str]) -> Path: ...


@runtime_checkable
class ProfileStore(Protocol):
    """Per-layer profiles of models and steps (studio.store.profiles)."""

    def record_profile(
        self,
        rows: Iterable[Mapping[str, Any] | ProfileLayer],
        *,
        model_source: str | None = None,
        model_kind: str = "torch",
        model_hash: str = "",
        input_spec: str = "",
        run_id: str | None = None,
        step_index: int | None = None,
        device: str = "",
        summary: Mapping[str, Any] | None = None,
    ) -> ProfileRecord: ...

    def get_profiles(
        self,
        *,
        model_source: str | None = None,
        run_id: str | None = None,
        step_index: int | None = None,
    ) -> list[ProfileRecord]: ...


@runtime_checkable
class SearchStore(Protocol):
    """Recipe searches and their trials (studio.store.searches)."""

    def create_search(
        self,
        *,
        search_id: str,
        model_source: str,
        device: str = "",
        objective: str = "latency",
        config: Mapping[str, Any] | None = None,
        runs_on: str = "",
        out_dir: str = "",
        name: str = "",
    ) -> SearchRecord: ...

    def finish_search(self, search_id: str, status: str, summary: Mapping[str, Any]) -> None: ...

    def add_search_trial(self, search_id: str, run_id: str) -> None: ...

    def get_search(self, search_id: str) -> SearchRecord: ...

    def list_searches(self, limit: int = 50) -> list[SearchRecord]: ...

    def search_priors(self, limit: int = 200) -> list[dict[str, Any]]: ...

    def recover_searches(self) -> list[str]: ...


@runtime_checkable
class ServeTestStore(Protocol):
    """Serve tests of runs (studio.store.serve_tests)."""

    def add_serve_test(
        self, run_id: str, report: dict[str, Any], artifact: dict[str, Any] | None = None
    ) -> int: ...

    def serve_tests(self, run_id: str) -> list[ServeTest]: ...


@runtime_checkable
class Store(RunWriter, RunReader, ProfileStore, SearchStore, ServeTestStore, Protocol):
    """The whole store, as ``Repository.open(db)`` returns it."""

    @property
    def url(self) -> str: ...

    @property
    def where(self) -> str: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def add_model(
        self, source: str, kind: str = "torch", content_hash: str = "", input_spec: str = ""
    ) -> ModelRecord: ...

    def add_recipe(self, content: Mapping[str, Any]) -> RecipeRecord: ...

    def list_models(self) -> list[ModelRecord]: ...

    def integrity_check(self) -> str: ...
