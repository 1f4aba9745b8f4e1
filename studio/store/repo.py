"""The experiment store's SQLAlchemy implementation: ``Repository``.

``Repository`` composes the store's feature modules (mixins over ``studio.store.base``):
``runs`` (create, status, tags, recovery, delete), ``events`` (runner events -> steps,
metrics, parity, artifacts), ``queries`` (get, list, search, compare), ``profiles``,
``searches`` and ``serve_tests``. This module opens the database and holds what spans
features (export, unrecorded-run import). Callers type against ``studio.store.api.Store``.
Queries return the dataclasses of ``studio.store.records``; each public method is one
transaction; writes start with BEGIN IMMEDIATE on SQLite (see ``db.write_engine``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import make_url

from studio.store import db as dbmod
from studio.store.base import BASELINE_INDEX
from studio.store.convert import model_record, recipe_record
from studio.store.errors import RunNotFound, StoreError
from studio.store.events import RunEvents
from studio.store.models import ModelRow, RunRow
from studio.store.profiles import Profiles
from studio.store.queries import RunQueries
from studio.store.records import ModelRecord, RecipeRecord, to_json
from studio.store.runs import RunWrites
from studio.store.searches import Searches
from studio.store.serve_tests import ServeTests
from studio.store.values import (  # re-exported: importable from studio.store.repo as before
    flatten_parity,
    json_safe,
    process_owner,
    recipe_hash,
)

log = logging.getLogger(__name__)

EXPORT_FORMAT = "accel-studio.run/1"

__all__ = [
    "BASELINE_INDEX",
    "EXPORT_FORMAT",
    "Repository",
    "RunNotFound",
    "StoreError",
    "flatten_parity",
    "process_owner",
    "recipe_hash",
]


class Repository(RunWrites, RunEvents, RunQueries, Profiles, Searches, ServeTests):
    """Runs and their results in a SQL database (SQLite by default, PostgreSQL works).

    The features live in their own modules (runs, events, queries, profiles, searches,
    serve_tests); this class composes them and opens the database.
    ``studio.store.api.Store`` is the typed interface callers use.
    """

    @classmethod
    def open(cls, db: str | os.PathLike[str] | None = None, *, migrate: bool = True) -> Repository:
        """Open (and migrate) the database given by ``--db``, settings or the default file."""
        url = dbmod.resolve_db_url(db)
        path = dbmod.sqlite_path(url)
        if path is not None and path.is_file() and not _writable(path):
            return cls._open_read_only(path)
        try:
            engine = dbmod.make_engine(url)
            if migrate:
                dbmod.migrate(engine)
        except dbmod.NewerDatabaseError as exc:
            raise StoreError(str(exc)) from None
        except Exception as exc:
            shown = make_url(url).render_as_string(hide_password=True)
            raise StoreError(
                f"cannot open the database {shown}: {type(exc).__name__}: {exc}. "
                f"Check --db, ${dbmod.DB_ENV} or the 'database' setting."
            ) from exc
        repo = cls(engine, owns_engine=True)
        # Runs left "running" by a studio that was killed end as crashed whenever the store
        # is opened (history, show, the GUI...), not only when the next run starts.
        try:
            repo.recover_interrupted()
        except Exception as exc:  # noqa: BLE001 - e.g. a read-only database: reading still works
            log.info("could not recover interrupted runs: %s", exc)
        return repo

    @classmethod
    def _open_read_only(cls, path: Path) -> Repository:
        """A SQLite file (or its folder) we may not write: open it for reading only, so the
        history can still be read; recording refuses with a clear message (check_writable)."""
        from urllib.parse import quote

        url = f"sqlite:///file:{quote(str(path))}?mode=ro&immutable=1&uri=true"
        engine = dbmod.make_engine(url)
        try:
            current, head = dbmod.current_revision(engine), dbmod.head_revision()
        except Exception as exc:
            engine.dispose()
            raise StoreError(f"cannot read the database {path}: {exc}") from None
        if current != head:
            engine.dispose()
            raise StoreError(
                f"the database {path} is read-only and at schema revision {current}, this studio "
                f"needs {head}; make the file and its folder writable once to upgrade it"
            )
        log.info("database %s is read-only: history can be read, runs cannot be recorded", path)
        return cls(engine, owns_engine=True)

    def add_model(
        self, source: str, kind: str = "torch", content_hash: str = "", input_spec: str = ""
    ) -> ModelRecord:
        """The model row for this (source, hash, input spec), created when new."""
        with self._write() as s:
            return model_record(self._model_row(s, source, kind, content_hash, input_spec))

    def add_recipe(self, content: Mapping[str, Any]) -> RecipeRecord:
        with self._write() as s:
            return recipe_record(self._recipe_row(s, content))

    def list_models(self) -> list[ModelRecord]:
        with self._read() as s:
            return [model_record(r) for r in s.scalars(select(ModelRow).order_by(ModelRow.id))]

    def import_unrecorded(self, record: Mapping[str, Any]) -> str:
        """Record a run the pool kept in a file when the store failed (``unrecorded_run.json``;
        the caller checked the file, ``studio.run_records.check_unrecorded``); returns its run
        id. A row the failed save left ``running`` (or that a later start marked
        ``crashed``) is restored from the record when it is the same run (same recipe and
        model source); a run recorded otherwise is refused."""
        if record.get("format") != "accel-studio-unrecorded-run/1":
            raise StoreError("not an unrecorded-run file (format accel-studio-unrecorded-run/1)")
        run = dict(record.get("run") or {})
        run_id = str(run.get("run_id") or "")
        if run_id and self._reset_interrupted(run_id, run):
            pass  # the left-behind row is cleared; the events below fill it again
        else:
            self.create_run(**{k: v for k, v in run.items() if k in _CREATE_RUN_ARGS})
        for event in record.get("events") or []:
            self.record_event(run_id, event)
        final = {k: v for k, v in dict(record.get("final") or {}).items() if k in _STATUS_ARGS}
        self.set_status(run_id, str(record.get("status") or "failed"), **final)
        return run_id

    def _reset_interrupted(self, run_id: str, run: Mapping[str, Any]) -> bool:
        """False when no row has this id; True after clearing the row a failed save left
        behind (running or crashed) for this same run; StoreError otherwise."""
        with self._write() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                return False
            if row.status not in ("running", "crashed", "queued"):
                raise StoreError(f"run {run_id} is already in the database ({row.status})")
            same_recipe = run.get("recipe") is None or (
                row.recipe is not None and row.recipe.hash == recipe_hash(dict(run["recipe"]))
            )
            same_model = not run.get("model_source") or (
                row.model is not None and row.model.source == run["model_source"]
            )
            if not (same_recipe and same_model):
                raise StoreError(
                    f"run {run_id} in the database has another recipe or model than this "
                    "record: it is not the run the record describes"
                )
            for step in list(row.steps):
                s.delete(step)
            row.status, row.finished_at, row.duration_s = "queued", None, None
            row.error = row.error_type = row.signal = row.log_tail = ""
            row.exit_code = None
        return True

    def export_run(self, run_id: str) -> dict[str, Any]:
        """A run as one JSON document (format ``accel-studio.run/1``)."""
        d = self.get_run(run_id)
        doc = to_json(d)
        doc["format"] = EXPORT_FORMAT
        doc["profiles"] = [to_json(p) for p in self.get_profiles(run_id=d.id)]
        return json_safe(doc)

    def export_run_json(self, run_id: str, path: str | os.PathLike[str]) -> Path:
        out = Path(path)
        out.write_text(json.dumps(self.export_run(run_id), indent=2, sort_keys=False))
        return out

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` on SQLite ("ok" when clean); "ok" elsewhere."""
        if self.engine.dialect.name != "sqlite":
            return "ok"
        with self.engine.connect() as conn:
            rows = conn.exec_driver_sql("PRAGMA integrity_check").fetchall()
        return "\n".join(str(r[0]) for r in rows)


_CREATE_RUN_ARGS = {
    "run_id",
    "model_source",
    "recipe",
    "kind",
    "device",
    "parent_run_id",
    "tags",
    "notes",
    "name",
    "job_params",
}
_STATUS_ARGS = {"error", "error_type", "exit_code", "signal", "log_tail"}


def _writable(path: Path) -> bool:
    """May this process write the SQLite file and create its journal files next to it?"""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
