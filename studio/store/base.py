"""The part every store feature shares: the engines, one session per transaction, the
model / recipe / step rows that several features create, status changes and run-id lookup.

Feature modules (runs, events, queries, profiles, searches) are mixins over ``StoreBase``;
``studio.store.repo.Repository`` composes them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any, Self

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from studio.store import db as dbmod
from studio.store.errors import RunNotFound, StoreError
from studio.store.models import FINAL_STATUSES, ModelRow, RecipeRow, RunRow, StepRow, utcnow
from studio.store.values import aware, is_number, json_safe, recipe_hash

BASELINE_INDEX = -1


class StoreBase:
    """Engines and sessions of one database; see ``Repository.open``."""

    def __init__(self, engine: Engine, *, owns_engine: bool = False) -> None:
        self.engine = engine
        self._write_engine = dbmod.write_engine(engine)
        self._owns_engine = owns_engine

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def where(self) -> str:
        """The database for people: a SQLite file's path (also when it was opened read-only
        through a ``file:`` URI), else the URL without its password."""
        from urllib.parse import unquote

        url = self.engine.url
        if url.get_backend_name() == "sqlite" and url.database:
            return unquote(url.database.removeprefix("file:"))
        return self.url

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_writable(self) -> None:
        """Raise StoreError unless runs can be recorded: the database accepts a write (not
        read-only) and, for SQLite, its pages pass a quick check (not damaged). Nothing is
        changed: the probe write is rolled back."""
        from sqlalchemy import text

        try:
            with self._write_engine.connect() as conn:
                if conn.dialect.name == "sqlite":
                    problems = [r[0] for r in conn.exec_driver_sql("PRAGMA quick_check(3)")]
                    if problems != ["ok"]:
                        raise StoreError(
                            f"the database {self.where} is damaged ({'; '.join(problems)}); "
                            "runs cannot be recorded. Restore a backup (studio.db.bak-*) or "
                            "use another database with --db."
                        )
                conn.execute(text("UPDATE alembic_version SET version_num = version_num"))
                conn.rollback()
        except StoreError:
            raise
        except Exception as exc:
            reason = str(exc).splitlines()[0][:300]
            raise StoreError(
                f"the database {self.where} cannot record runs ({reason}). Check that the file "
                "and its folder are writable, or use another database with --db."
            ) from None

    @contextlib.contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s:
            yield s

    @contextlib.contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._write_engine, expire_on_commit=False) as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise

    def _model_row(
        self, s: Session, source: str, kind: str, content_hash: str, input_spec: str
    ) -> ModelRow:
        q = select(ModelRow).where(
            ModelRow.source == source,
            ModelRow.content_hash == content_hash,
            ModelRow.input_spec == input_spec,
        )
        row = s.scalars(q).first()
        if row is not None:
            return row
        try:
            with s.begin_nested():
                row = ModelRow(
                    source=source, kind=kind, content_hash=content_hash, input_spec=input_spec
                )
                s.add(row)
        except IntegrityError:  # another process inserted it meanwhile (PostgreSQL)
            row = s.scalars(q).one()
        return row

    def _recipe_row(self, s: Session, content: Mapping[str, Any]) -> RecipeRow:
        content = json_safe(dict(content))
        h = recipe_hash(content)
        row = s.scalars(select(RecipeRow).where(RecipeRow.hash == h)).first()
        if row is not None:
            return row
        version = content.get("schema_version", content.get("version", 1))
        try:
            with s.begin_nested():
                row = RecipeRow(
                    hash=h,
                    name=str(content.get("name") or "")[:256],
                    schema_version=int(version) if is_number(version) else 1,
                    content=content,
                )
                s.add(row)
        except IntegrityError:
            row = s.scalars(select(RecipeRow).where(RecipeRow.hash == h)).one()
        return row

    def _step_row(self, s: Session, run_id: str, index: int) -> StepRow:
        step = s.scalars(
            select(StepRow).where(StepRow.run_id == run_id, StepRow.index == index)
        ).first()
        if step is None:
            step = StepRow(
                run_id=run_id, index=index, pass_name="", params={}, details={}, error=""
            )
            s.add(step)
            s.flush()
            step._fresh = True  # type: ignore[attr-defined]
        return step

    def _apply_status(
        self, s: Session, row: RunRow, status: str, at: dt.datetime | None = None
    ) -> None:
        now = at or utcnow()
        was_final = row.status in FINAL_STATUSES and row.finished_at is not None
        row.status = status
        if status == "running" and row.started_at is None:
            row.started_at = now
        if status in FINAL_STATUSES and not was_final:
            # The first final status wins the times: the runner's run_finished comes
            # before the pool's own end-of-job status.
            row.finished_at = now
            start = aware(row.started_at) or aware(row.created_at)
            if start is not None:
                row.duration_s = (now - start).total_seconds()
        if status in FINAL_STATUSES:
            if status != "succeeded":
                step_status = "cancelled" if status in ("cancelled", "timed_out") else "crashed"
                if status == "failed":
                    step_status = "failed"
                for step in s.scalars(
                    select(StepRow).where(StepRow.run_id == row.id, StepRow.status == "running")
                ):
                    step.status = step_status
                    step.finished_at = now

    def resolve_run_id(self, run_id: str) -> str:
        """A full run id from an id or a unique prefix of one."""
        with self._read() as s:
            if s.get(RunRow, run_id) is not None:
                return run_id
            if len(run_id) < 4:
                raise RunNotFound(f"no run {run_id!r} (give at least 4 characters of its id)")
            ids = s.scalars(
                select(RunRow.id).where(RunRow.id.startswith(run_id, autoescape=True)).limit(2)
            ).all()
        if not ids:
            raise RunNotFound(f"no run {run_id!r}; `studio history` lists the runs")
        if len(ids) > 1:
            raise RunNotFound(f"run id prefix {run_id!r} is ambiguous; give more characters")
        return ids[0]
