"""The experiment store's API: runs, steps, metrics, parity, artifacts and profiles.

``Repository`` is the only way in or out; it returns the dataclasses of
``studio.store.records``. Each public method is one transaction; writes start
with BEGIN IMMEDIATE on SQLite (see ``db.write_engine``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import math
import os
import socket
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, and_, delete, exists, func, or_, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from accel.jsonable import jsonable
from studio.store import db as dbmod
from studio.store.models import (
    FINAL_STATUSES,
    RUN_STATUSES,
    STEP_STATUSES,
    ArtifactRow,
    MetricRow,
    ModelRow,
    ParityResultRow,
    ProfileLayerRow,
    ProfileRow,
    RecipeRow,
    RunRow,
    RunTagRow,
    SearchRow,
    StepRow,
    utcnow,
)
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
    SearchRecord,
    StepRecord,
    align_passes,
    to_json,
)

log = logging.getLogger(__name__)

EXPORT_FORMAT = "accel-studio.run/1"
BASELINE_INDEX = -1


class StoreError(RuntimeError):
    """The database cannot be opened or migrated; the message says which and why."""


class RunNotFound(KeyError):
    """No run (or more than one) matches the id or id prefix given."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "run not found"


# --- value helpers ------------------------------------------------------------------------


def _split_float(value: Any) -> tuple[float | None, bool]:
    """A metric value as (value, is_nan): NaN is stored as a flag, not as a float."""
    if value is None or isinstance(value, str):
        return None, False
    f = float(value)
    if math.isnan(f):
        return None, True
    return f, False


def _join_float(value: float | None, is_nan: bool) -> float | None:
    return math.nan if is_nan else value


def _json_safe(obj: Any) -> Any:
    """Non-finite floats become strings: PostgreSQL's JSON (rightly) rejects NaN."""
    return jsonable(obj, nonfinite="string")


def _aware(t: dt.datetime | None) -> dt.datetime | None:
    # SQLite drops the time zone; everything is stored in UTC.
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=dt.UTC)


def recipe_hash(content: Mapping[str, Any]) -> str:
    text = json.dumps(_json_safe(content), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def flatten_parity(parity: Mapping[str, Any] | None) -> list[tuple[str, str, Any, bool | None]]:
    """ParityReport.to_dict() -> [(output name, metric, value, output passed)].

    Numbers (and booleans other than the verdict, as 0/1) of each output become
    metrics; nested dicts are flattened with dots.
    """
    if not parity:
        return []
    rows: list[tuple[str, str, Any, bool | None]] = []
    for i, out in enumerate(parity.get("outputs") or []):
        if not isinstance(out, Mapping):
            continue
        name = str(out.get("name") or out.get("output") or out.get("path") or f"output{i}")
        passed = out.get("passed")
        passed = bool(passed) if isinstance(passed, bool) else None

        def walk(prefix: str, d: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
            for k, v in d.items():
                key = f"{prefix}{k}"
                if key in ("name", "output", "path", "passed"):
                    continue
                if isinstance(v, bool):
                    yield key, float(v)
                elif _is_number(v):
                    yield key, v
                elif isinstance(v, str) and v in ("NaN", "nan"):
                    yield key, math.nan
                elif isinstance(v, Mapping):
                    yield from walk(f"{key}.", v)

        seen: set[str] = set()
        for key, value in walk("", out):
            if key not in seen:
                seen.add(key)
                rows.append((name, key[:64], value, passed))
    return rows


# --- the repository -----------------------------------------------------------------------


class Repository:
    """Runs and their results in a SQL database (SQLite by default, PostgreSQL works)."""

    def __init__(self, engine: Engine, *, owns_engine: bool = False) -> None:
        self.engine = engine
        self._write_engine = dbmod.write_engine(engine)
        self._owns_engine = owns_engine

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

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    # --- models and recipes ---------------------------------------------------------------

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
        content = _json_safe(dict(content))
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
                    schema_version=int(version) if _is_number(version) else 1,
                    content=content,
                )
                s.add(row)
        except IntegrityError:
            row = s.scalars(select(RecipeRow).where(RecipeRow.hash == h)).one()
        return row

    def add_model(
        self, source: str, kind: str = "torch", content_hash: str = "", input_spec: str = ""
    ) -> ModelRecord:
        """The model row for this (source, hash, input spec), created when new."""
        with self._write() as s:
            return _model_record(self._model_row(s, source, kind, content_hash, input_spec))

    def add_recipe(self, content: Mapping[str, Any]) -> RecipeRecord:
        with self._write() as s:
            return _recipe_record(self._recipe_row(s, content))

    def list_models(self) -> list[ModelRecord]:
        with self._read() as s:
            return [_model_record(r) for r in s.scalars(select(ModelRow).order_by(ModelRow.id))]

    # --- runs -----------------------------------------------------------------------------

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
    ) -> RunRecord:
        """Record a new run (``queued`` unless told otherwise) and return it."""
        _check_status(status)
        with self._write() as s:
            row = RunRow(
                id=run_id or uuid.uuid4().hex,
                name=name,
                kind=kind,
                status=status,
                device=device,
                environment=_json_safe(dict(environment or {})),
                baseline={},
                summary={},
                job_params=_json_safe(dict(job_params or {})),
                notes=notes,
                parent_run_id=parent_run_id,
                owner=process_owner(),
                created_at=utcnow(),
            )
            if model_source:
                row.model = self._model_row(s, model_source, model_kind, model_hash, input_spec)
            if recipe is not None:
                row.recipe = self._recipe_row(s, recipe)
            if status == "running":
                row.started_at = row.created_at
            row.tags = [RunTagRow(tag=t) for t in _clean_tags(tags)]
            s.add(row)
            s.flush()
            return _run_record(row, row.model, row.recipe, [t.tag for t in row.tags])

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
    ) -> None:
        """Change a run's status; a final status also closes its still-running steps.
        ``at``: when it happened (default: now), e.g. a crashed run's last sign of life."""
        _check_status(status)
        with self._write() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id!r}")
            self._apply_status(s, row, status, at)
            if error is not None:
                row.error = error
            if error_type is not None:
                row.error_type = error_type[:128]
            if exit_code is not None:
                row.exit_code = exit_code
            if signal is not None:
                row.signal = signal[:32]
            if log_tail is not None:
                row.log_tail = log_tail
            if summary is not None:
                row.summary = _json_safe(dict(summary))

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
            start = _aware(row.started_at) or _aware(row.created_at)
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

    def update_run(
        self,
        run_id: str,
        *,
        name: str | None = None,
        notes: str | None = None,
        tags: Iterable[str] | None = None,
        add_tags: Iterable[str] = (),
        remove_tags: Iterable[str] = (),
    ) -> RunRecord:
        """Rename, annotate or re-tag a run (``tags`` replaces, add/remove edit)."""
        run_id = self.resolve_run_id(run_id)
        with self._write() as s:
            row = s.get(RunRow, run_id)
            assert row is not None
            if name is not None:
                row.name = name
            if notes is not None:
                row.notes = notes
            current = [t.tag for t in row.tags]
            if tags is not None:
                current = _clean_tags(tags)
            current = _clean_tags([*current, *add_tags])
            drop = set(remove_tags)
            current = [t for t in current if t not in drop]
            if current != [t.tag for t in row.tags]:
                row.tags = [RunTagRow(tag=t) for t in current]
            s.flush()
            return _run_record(row, row.model, row.recipe, current)

    def recover_interrupted(self) -> list[str]:
        """Mark as crashed the queued / running runs whose recording process (on this
        machine) is gone: the studio was killed mid-run. Their finished steps are kept.
        Returns the run ids changed."""
        host = socket.gethostname()
        with self._read() as s:
            rows = s.execute(
                select(RunRow.id, RunRow.owner, RunRow.created_at).where(
                    RunRow.status.in_(["queued", "running"]),
                    RunRow.owner.startswith(f"{host}:", autoescape=True),
                )
            ).all()
        dead: list[tuple[str, int]] = []
        for run_id, owner, created in rows:
            try:
                pid = int(owner.rsplit(":", 1)[1])
            except (IndexError, ValueError):
                continue
            if pid != os.getpid() and not _process_alive(pid, _aware(created)):
                dead.append((run_id, pid))
        for run_id, pid in dead:
            self.set_status(
                run_id,
                "crashed",
                error=f"the studio process that ran this job (pid {pid}) exited before the run "
                "finished; the steps it finished are kept",
                error_type="StudioExited",
                at=self._last_sign_of_life(run_id),
            )
        if dead:
            log.warning("marked %d interrupted runs as crashed", len(dead))
        return [r for r, _ in dead]

    def _last_sign_of_life(self, run_id: str) -> dt.datetime | None:
        """The newest time the run's recorder wrote: a step's start or end, else the run's
        start (a crashed run's duration ends there, not when someone noticed)."""
        with self._read() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                return None
            times = [_aware(row.started_at), _aware(row.created_at)]
            for step in s.scalars(select(StepRow).where(StepRow.run_id == run_id)):
                times += [_aware(step.started_at), _aware(step.finished_at)]
        known = [t for t in times if t is not None]
        return max(known) if known else None

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
                            f"the database {self.url} is damaged ({'; '.join(problems)}); "
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
                f"the database {self.url} cannot record runs ({reason}). Check that the file "
                "and its folder are writable, or use another database with --db."
            ) from None

    def import_unrecorded(self, record: Mapping[str, Any]) -> str:
        """Record a run the pool kept in a file when the store failed (``unrecorded_run.json``);
        returns its run id. Importing twice is refused."""
        if record.get("format") != "accel-studio-unrecorded-run/1":
            raise StoreError("not an unrecorded-run file (format accel-studio-unrecorded-run/1)")
        run = dict(record.get("run") or {})
        run_id = str(run.get("run_id") or "")
        with self._read() as s:
            if run_id and s.get(RunRow, run_id) is not None:
                raise StoreError(f"run {run_id} is already in the database")
        self.create_run(**{k: v for k, v in run.items() if k in _CREATE_RUN_ARGS})
        for event in record.get("events") or []:
            self.record_event(run_id, event)
        final = {k: v for k, v in dict(record.get("final") or {}).items() if k in _STATUS_ARGS}
        self.set_status(run_id, str(record.get("status") or "failed"), **final)
        return run_id

    # --- events from the runner -----------------------------------------------------------

    def record_event(self, run_id: str, event: Mapping[str, Any]) -> None:
        """Apply one runner event (``accel.events`` ``to_dict()`` form) to a run.

        Progress and log events are not stored (too many; the pool keeps a log tail).
        """
        kind = event.get("event")
        if kind in ("progress", "log", None):
            return
        with self._write() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id!r}")
            if kind == "run_started":
                self._on_run_started(s, row, event)
            elif kind == "step_started":
                step = self._step_row(s, run_id, int(event["index"]))
                step.pass_name = str(event.get("pass_name", ""))
                step.params = _json_safe(dict(event.get("params") or {}))
                step.status = "running"
                step.started_at = utcnow()
            elif kind == "step_finished":
                self._on_step_finished(s, run_id, event)
            elif kind == "run_finished":
                status = str(event.get("status", "succeeded"))
                _check_status(status)
                self._apply_status(s, row, status)
                if event.get("duration_s") is not None:
                    row.duration_s = float(event["duration_s"])
                row.summary = _json_safe(dict(event.get("summary") or {}))
            elif kind == "run_failed":
                row.error = str(event.get("error", ""))
                row.error_type = str(event.get("error_type", ""))[:128]
                if event.get("traceback"):
                    row.log_tail = str(event["traceback"])
                if row.status not in FINAL_STATUSES:
                    self._apply_status(s, row, "failed")
            else:
                log.debug("ignoring unknown event %r for run %s", kind, run_id)

    def _on_run_started(self, s: Session, row: RunRow, event: Mapping[str, Any]) -> None:
        self._apply_status(s, row, "running")
        row.run_dir = str(event.get("run_dir") or "")
        if event.get("device"):
            row.device = str(event["device"])
        row.environment = _json_safe(dict(event.get("environment") or {}))
        baseline = dict(event.get("baseline") or {})
        row.baseline = _json_safe(baseline)
        source = event.get("model_source")
        model_hash = str(event.get("model_hash") or "")
        spec = str(event.get("input_spec") or "")
        if source and (
            row.model is None
            or row.model.source != source
            or (model_hash and row.model.content_hash != model_hash)
        ):
            row.model = self._model_row(
                s, str(source), str(event.get("model_kind") or "torch"), model_hash, spec
            )
        if row.recipe is None and event.get("recipe"):
            row.recipe = self._recipe_row(s, event["recipe"])
        if baseline:
            step = self._step_row(s, row.id, BASELINE_INDEX)
            step.pass_name = "baseline"
            step.status = "succeeded"
            step.finished_at = utcnow()
            _set_metrics(s, step, baseline)

    def _on_step_finished(self, s: Session, run_id: str, event: Mapping[str, Any]) -> None:
        step = self._step_row(s, run_id, int(event["index"]))
        step.pass_name = str(event.get("pass_name") or step.pass_name or "")
        status = str(event.get("status", "succeeded"))
        if status not in STEP_STATUSES:
            log.warning(
                "step %s of run %s: unknown status %r stored as failed", step.index, run_id, status
            )
            status = "failed"
        step.status = status
        step.duration_s = _split_float(event.get("duration_s"))[0]
        step.error = str(event.get("error") or "")
        step.details = _json_safe(dict(event.get("details") or {}))
        step.finished_at = utcnow()
        _set_metrics(s, step, event.get("metrics") or {})
        parity = event.get("parity")
        step.parity = _json_safe(dict(parity)) if parity else None
        step.parity_passed = parity.get("passed") if parity else None
        fresh = getattr(step, "_fresh", False)  # just inserted: nothing to replace
        if not fresh:
            s.execute(delete(ParityResultRow).where(ParityResultRow.step_id == step.id))
        for out_name, metric, value, passed in flatten_parity(parity):
            v, nan = _split_float(value)
            s.add(
                ParityResultRow(
                    step_id=step.id,
                    output_name=out_name[:256],
                    metric=metric,
                    value=v,
                    is_nan=nan,
                    passed=passed,
                )
            )
        if not fresh:
            s.execute(delete(ArtifactRow).where(ArtifactRow.step_id == step.id))
        for art in event.get("artifacts") or []:
            s.add(
                ArtifactRow(
                    step_id=step.id,
                    kind=str(art.get("kind", ""))[:32],
                    path=str(art.get("path", "")),
                    sha256=str(art.get("sha256") or ""),
                    bytes=art.get("bytes"),
                )
            )

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

    # --- reading --------------------------------------------------------------------------

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

    def get_run(self, run_id: str) -> RunDetail:
        """A run with its steps, metrics, parity results and artifacts."""
        run_id = self.resolve_run_id(run_id)
        with self._read() as s:
            row = s.scalars(
                select(RunRow)
                .where(RunRow.id == run_id)
                .options(
                    selectinload(RunRow.model),
                    selectinload(RunRow.recipe),
                    selectinload(RunRow.steps),
                )
            ).one()
            steps = [_step_record(st) for st in row.steps]
            return RunDetail(
                run=_run_record(row, row.model, row.recipe, [t.tag for t in row.tags]),
                environment=row.environment or {},
                baseline=row.baseline or {},
                summary=row.summary or {},
                job_params=row.job_params or {},
                recipe=row.recipe.content if row.recipe is not None else None,
                model_input_spec=row.model.input_spec if row.model is not None else "",
                model_content_hash=row.model.content_hash if row.model is not None else "",
                run_dir=row.run_dir,
                error_type=row.error_type,
                exit_code=row.exit_code,
                signal=row.signal,
                log_tail=row.log_tail,
                steps=steps,
            )

    def _filtered(self, q: Any, f: RunFilter | None) -> Any:
        if f is None:
            return q
        conds = []
        if f.status:
            conds.append(RunRow.status.in_(list(f.status)))
        if f.kind:
            conds.append(RunRow.kind == f.kind)
        if f.device:
            conds.append(RunRow.device.startswith(f.device, autoescape=True))
        if f.model:
            conds.append(ModelRow.source.contains(f.model, autoescape=True))
        if f.recipe:
            conds.append(
                or_(
                    RecipeRow.name.contains(f.recipe, autoescape=True),
                    RecipeRow.hash.startswith(f.recipe, autoescape=True),
                )
            )
        if f.pass_name:
            conds.append(
                exists().where(and_(StepRow.run_id == RunRow.id, StepRow.pass_name == f.pass_name))
            )
        if f.parent_run_id:
            conds.append(RunRow.parent_run_id == f.parent_run_id)
        if f.search_id:
            conds.append(RunRow.search_id == f.search_id)
        if f.since is not None:
            conds.append(RunRow.created_at >= f.since)
        if f.until is not None:
            conds.append(RunRow.created_at < f.until)
        for tag in f.tags:
            conds.append(exists().where(and_(RunTagRow.run_id == RunRow.id, RunTagRow.tag == tag)))
        for word in (f.search or "").split():
            pattern = f"%{_escape_like(word.lower())}%"
            conds.append(
                or_(
                    func.lower(RunRow.name).like(pattern, escape="\\"),
                    func.lower(RunRow.notes).like(pattern, escape="\\"),
                    func.lower(ModelRow.source).like(pattern, escape="\\"),
                    func.lower(RecipeRow.name).like(pattern, escape="\\"),
                    RunRow.id.startswith(word.lower(), autoescape=True),
                    exists().where(
                        and_(
                            RunTagRow.run_id == RunRow.id,
                            func.lower(RunTagRow.tag).like(pattern, escape="\\"),
                        )
                    ),
                )
            )
        return q.where(*conds) if conds else q

    def _list_query(self, cols: Sequence[Any]) -> Any:
        return (
            select(*cols)
            .select_from(RunRow)
            .outerjoin(ModelRow, RunRow.model_id == ModelRow.id)
            .outerjoin(RecipeRow, RunRow.recipe_id == RecipeRow.id)
        )

    def list_runs(
        self,
        filter: RunFilter | None = None,
        *,
        limit: int = 50,
        offset: int = 0,
        oldest_first: bool = False,
    ) -> list[RunRecord]:
        """A page of runs, newest first, matching ``filter``."""
        cols = [
            RunRow,
            ModelRow.source,
            ModelRow.kind,
            RecipeRow.name,
            RecipeRow.hash,
        ]
        q = self._filtered(self._list_query(cols), filter)
        order = (
            (RunRow.created_at.asc(), RunRow.id.asc())
            if oldest_first
            else (RunRow.created_at.desc(), RunRow.id.desc())
        )
        q = q.order_by(*order).limit(limit).offset(offset)
        with self._read() as s:
            rows = s.execute(q).all()
            ids = [r[0].id for r in rows]
            tags: dict[str, list[str]] = {i: [] for i in ids}
            if ids:
                for run_id, tag in s.execute(
                    select(RunTagRow.run_id, RunTagRow.tag)
                    .where(RunTagRow.run_id.in_(ids))
                    .order_by(RunTagRow.tag)
                ):
                    tags[run_id].append(tag)
            return [_run_record_flat(r[0], r[1], r[2], r[3], r[4], tags[r[0].id]) for r in rows]

    def count_runs(self, filter: RunFilter | None = None) -> int:
        q = self._filtered(self._list_query([func.count(RunRow.id)]), filter)
        with self._read() as s:
            return int(s.execute(q).scalar_one())

    def search(self, text: str, *, limit: int = 50) -> list[RunRecord]:
        """Runs whose name, tags, notes, model or recipe contain every word of ``text``."""
        return self.list_runs(RunFilter(search=text), limit=limit)

    def compare(self, run_ids: Sequence[str]) -> Comparison:
        """Runs side by side: every (step, metric) with one value per run (None if absent)."""
        details = [self.get_run(r) for r in run_ids]
        n = len(details)
        steps = [
            sorted((st for st in d.steps if st.index >= 0), key=lambda s: s.index) for d in details
        ]
        slots, places = align_passes([[st.pass_name for st in ss] for ss in steps])
        positions = [{st.index: p for st, p in zip(ss, pl)} for ss, pl in zip(steps, places)]
        rows: dict[tuple[int, str, str], list[float | None]] = {}
        parity: dict[tuple[int, str], list[bool | None]] = {}
        for i, d in enumerate(details):
            for st in d.steps:
                pos = positions[i].get(st.index, st.index)
                for key, value in st.metrics.items():
                    rows.setdefault((pos, st.pass_name, key), [None] * n)[i] = value
                if st.parity_passed is not None:
                    parity.setdefault((pos, st.pass_name), [None] * n)[i] = st.parity_passed
        ordered = dict(sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])))
        return Comparison(
            runs=details,
            columns=[d.id for d in details],
            rows=ordered,
            parity=parity,
            slots=slots,
            positions=positions,
        )

    # --- delete / export ------------------------------------------------------------------

    def delete_run(self, run_id: str, *, delete_files: bool = False) -> list[str]:
        """Delete a run (its steps, metrics, parity results, artifacts rows and profiles).

        With ``delete_files`` the artifact files are removed too, and the run folder if
        that leaves it empty. Returns the files removed. Re-runs keep existing; their
        parent link is cleared.
        """
        run_id = self.resolve_run_id(run_id)
        removed: list[str] = []
        with self._write() as s:
            row = s.get(RunRow, run_id)
            assert row is not None
            paths = s.scalars(
                select(ArtifactRow.path).join(StepRow).where(StepRow.run_id == run_id)
            ).all()
            run_dir = row.run_dir
            s.delete(row)
        if delete_files:
            for p in paths:
                path = Path(p)
                if path.is_file():
                    path.unlink()
                    removed.append(p)
                    _prune_empty(path.parent, stop=Path(run_dir) if run_dir else None)
            if run_dir and Path(run_dir).is_dir():
                with contextlib.suppress(OSError):
                    Path(run_dir).rmdir()  # only when empty: it may hold user files
        return removed

    def export_run(self, run_id: str) -> dict[str, Any]:
        """A run as one JSON document (format ``accel-studio.run/1``)."""
        d = self.get_run(run_id)
        doc = to_json(d)
        doc["format"] = EXPORT_FORMAT
        doc["profiles"] = [to_json(p) for p in self.get_profiles(run_id=d.id)]
        return _json_safe(doc)

    def export_run_json(self, run_id: str, path: str | os.PathLike[str]) -> Path:
        out = Path(path)
        out.write_text(json.dumps(self.export_run(run_id), indent=2, sort_keys=False))
        return out

    # --- profiles -------------------------------------------------------------------------

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
    ) -> ProfileRecord:
        """Store a per-layer profile of a model (``model_source``) or of a run's step."""
        if model_source is None and run_id is None:
            raise ValueError("record_profile needs model_source or run_id + step_index")
        with self._write() as s:
            prof = ProfileRow(device=device, summary=_json_safe(dict(summary or {})))
            if run_id is not None:
                prof.step_id = self._step_row(
                    s, run_id, BASELINE_INDEX if step_index is None else step_index
                ).id
            if model_source is not None:
                prof.model_id = self._model_row(
                    s, model_source, model_kind, model_hash, input_spec
                ).id
            for i, r in enumerate(rows):
                d = to_json(r) if isinstance(r, ProfileLayer) else dict(r)
                known = {"index", "name", "op_type", "time_ms", "percent", "flops", "params"}
                known |= {"memory_bytes", "extra"}
                extra = dict(d.get("extra") or {})
                extra.update({k: v for k, v in d.items() if k not in known})
                prof.rows.append(
                    ProfileLayerRow(
                        index=i,
                        name=str(d.get("name", ""))[:512],
                        op_type=str(d.get("op_type", ""))[:128],
                        time_ms=_split_float(d.get("time_ms"))[0],
                        percent=_split_float(d.get("percent"))[0],
                        flops=_split_float(d.get("flops"))[0],
                        params=d.get("params"),
                        memory_bytes=d.get("memory_bytes"),
                        extra=_json_safe(extra),
                    )
                )
            s.add(prof)
            s.flush()
            return _profile_record(prof)

    def get_profiles(
        self,
        *,
        model_source: str | None = None,
        run_id: str | None = None,
        step_index: int | None = None,
    ) -> list[ProfileRecord]:
        q = select(ProfileRow).options(selectinload(ProfileRow.rows)).order_by(ProfileRow.id)
        if model_source is not None:
            q = q.join(ModelRow, ProfileRow.model_id == ModelRow.id).where(
                ModelRow.source == model_source
            )
        if run_id is not None:
            q = q.join(StepRow, ProfileRow.step_id == StepRow.id).where(StepRow.run_id == run_id)
            if step_index is not None:
                q = q.where(StepRow.index == step_index)
        with self._read() as s:
            return [_profile_record(p) for p in s.scalars(q)]

    # --- maintenance ----------------------------------------------------------------------

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` on SQLite ("ok" when clean); "ok" elsewhere."""
        if self.engine.dialect.name != "sqlite":
            return "ok"
        with self.engine.connect() as conn:
            rows = conn.exec_driver_sql("PRAGMA integrity_check").fetchall()
        return "\n".join(str(r[0]) for r in rows)

    # --- recipe searches (studio optimize) ------------------------------------------------

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
    ) -> SearchRecord:
        """Record a search that is starting (status ``running``)."""
        with self._write() as s:
            row = SearchRow(
                id=search_id,
                name=name[:256],
                status="running",
                model_source=model_source[:1024],
                device=device,
                objective=objective,
                runs_on=runs_on[:512],
                config=_json_safe(dict(config or {})),
                summary={},
                out_dir=out_dir,
                owner=process_owner(),
                created_at=utcnow(),
            )
            s.add(row)
            s.flush()
            return _search_record(row, 0)

    def finish_search(self, search_id: str, status: str, summary: Mapping[str, Any]) -> None:
        """Set a search's final status and summary (front, best trial, reason, reuse)."""
        from studio.store.models import SEARCH_STATUSES

        if status not in SEARCH_STATUSES:
            raise ValueError(f"unknown search status {status!r}; one of {SEARCH_STATUSES}")
        with self._write() as s:
            row = s.get(SearchRow, search_id)
            if row is None:
                raise RunNotFound(f"no search {search_id!r}")
            row.status = status
            row.summary = _json_safe(dict(summary))
            row.finished_at = utcnow()

    def add_search_trial(self, search_id: str, run_id: str) -> None:
        """Attach a recorded run to its search."""
        with self._write() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id!r}")
            row.search_id = search_id

    def get_search(self, search_id: str) -> SearchRecord:
        """A search by id or unique id prefix."""
        with self._read() as s:
            rows = s.scalars(
                select(SearchRow).where(SearchRow.id.startswith(search_id, autoescape=True))
            ).all()
            if not rows:
                raise RunNotFound(
                    f"no search with id {search_id!r}; see `studio history --searches`"
                )
            if len(rows) > 1:
                raise RunNotFound(f"search id {search_id!r} is ambiguous; give more characters")
            return _search_record(rows[0], self._trial_count(s, rows[0].id))

    def list_searches(self, limit: int = 50) -> list[SearchRecord]:
        """Searches, newest first."""
        with self._read() as s:
            rows = s.scalars(
                select(SearchRow).order_by(SearchRow.created_at.desc()).limit(limit)
            ).all()
            return [_search_record(r, self._trial_count(s, r.id)) for r in rows]

    def recover_searches(self) -> list[str]:
        """Mark as crashed the running searches whose studio process (on this machine) is
        gone; their recorded trials stay. Returns the search ids changed."""
        import psutil

        host = socket.gethostname()
        with self._read() as s:
            rows = s.execute(
                select(SearchRow.id, SearchRow.owner).where(
                    SearchRow.status == "running",
                    SearchRow.owner.startswith(f"{host}:", autoescape=True),
                )
            ).all()
        dead = []
        for search_id, owner in rows:
            try:
                pid = int(owner.rsplit(":", 1)[1])
            except (IndexError, ValueError):
                continue
            if pid != os.getpid() and not psutil.pid_exists(pid):
                dead.append(search_id)
        for search_id in dead:
            reason = "the studio process that ran this search exited before it finished"
            self.finish_search(search_id, "crashed", {"reason": reason})
        return dead

    @staticmethod
    def _trial_count(s: Session, search_id: str) -> int:
        return int(
            s.scalar(select(func.count()).select_from(RunRow).where(RunRow.search_id == search_id))
            or 0
        )


# --- row -> record --------------------------------------------------------------------------


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


def _process_alive(pid: int, since: dt.datetime | None) -> bool:
    """Is the process ``pid`` the one that created a run at ``since``? (A pid reused by a
    newer process does not keep a dead studio's run "running".)"""
    import psutil

    try:
        proc = psutil.Process(pid)
        started = dt.datetime.fromtimestamp(proc.create_time(), dt.UTC)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return psutil.pid_exists(pid) and not _is_zombie(pid)
    if proc.status() == psutil.STATUS_ZOMBIE:
        return False
    return since is None or started <= since + dt.timedelta(seconds=2)


def _is_zombie(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001
        return False


def process_owner() -> str:
    """``host:pid`` of this process (the recorder of the runs it creates)."""
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


def _check_status(status: str) -> None:
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}; one of {', '.join(RUN_STATUSES)}")


def _clean_tags(tags: Iterable[str]) -> list[str]:
    out: list[str] = []
    for t in tags:
        t = str(t).strip()[:128]
        if t and t not in out:
            out.append(t)
    return out


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _prune_empty(folder: Path, stop: Path | None) -> None:
    while stop is not None and folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _set_metrics(s: Session, step: StepRow, metrics: Mapping[str, Any]) -> None:
    if not getattr(step, "_fresh", False):
        s.execute(delete(MetricRow).where(MetricRow.step_id == step.id))
    for key, value in metrics.items():
        if isinstance(value, bool):
            value = float(value)
        if value is not None and not _is_number(value):
            continue  # non-numeric entries belong in details
        v, nan = _split_float(value)
        s.add(MetricRow(step_id=step.id, key=str(key)[:128], value=v, is_nan=nan))


def _model_record(r: ModelRow) -> ModelRecord:
    return ModelRecord(
        id=r.id,
        source=r.source,
        kind=r.kind,
        content_hash=r.content_hash,
        input_spec=r.input_spec,
        created_at=_aware(r.created_at),  # type: ignore[arg-type]
    )


def _recipe_record(r: RecipeRow) -> RecipeRecord:
    return RecipeRecord(
        id=r.id,
        hash=r.hash,
        name=r.name,
        schema_version=r.schema_version,
        content=r.content,
        created_at=_aware(r.created_at),  # type: ignore[arg-type]
    )


def _run_record(
    r: RunRow, model: ModelRow | None, recipe: RecipeRow | None, tags: list[str]
) -> RunRecord:
    return _run_record_flat(
        r,
        model.source if model else None,
        model.kind if model else None,
        recipe.name if recipe else None,
        recipe.hash if recipe else None,
        tags,
    )


def _run_record_flat(
    r: RunRow,
    model_source: str | None,
    model_kind: str | None,
    recipe_name: str | None,
    recipe_hash_: str | None,
    tags: list[str],
) -> RunRecord:
    return RunRecord(
        id=r.id,
        name=r.name,
        kind=r.kind,
        status=r.status,
        device=r.device,
        model_source=model_source or "",
        model_kind=model_kind or "",
        recipe_name=recipe_name or "",
        recipe_hash=recipe_hash_ or "",
        parent_run_id=r.parent_run_id,
        tags=list(tags),
        notes=r.notes,
        error=r.error,
        created_at=_aware(r.created_at),  # type: ignore[arg-type]
        started_at=_aware(r.started_at),
        finished_at=_aware(r.finished_at),
        duration_s=r.duration_s,
        final=_final_speedup(r.summary),
    )


def _final_speedup(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The speedup part of a run's summary (see accel.runner._summary)."""
    s = summary or {}
    if s.get("final_speedup") is None:
        return {}
    return {
        "speedup": s.get("final_speedup"),
        "speedup_low": s.get("final_speedup_low"),
        "speedup_high": s.get("final_speedup_high"),
        "noisy": bool(s.get("noise")),
        "noise": s.get("noise"),
        "latency_p50_ms": s.get("final_latency_p50_ms"),
        "baseline_latency_p50_ms": s.get("baseline_latency_p50_ms"),
    }


def _step_record(st: StepRow) -> StepRecord:
    parity: dict[str, ParityRecord] = {}
    for p in st.parity_results:
        rec = parity.setdefault(p.output_name, ParityRecord(p.output_name, p.passed, {}))
        rec.metrics[p.metric] = _join_float(p.value, p.is_nan)
    return StepRecord(
        index=st.index,
        pass_name=st.pass_name,
        params=st.params or {},
        status=st.status,
        duration_s=st.duration_s,
        error=st.error,
        metrics={m.key: _join_float(m.value, m.is_nan) for m in st.metrics},
        parity_passed=st.parity_passed,
        parity=list(parity.values()),
        artifacts=[ArtifactRecord(a.kind, a.path, a.sha256, a.bytes) for a in st.artifacts],
        details=st.details or {},
        parity_report=st.parity,
    )


def _profile_record(p: ProfileRow) -> ProfileRecord:
    return ProfileRecord(
        id=p.id,
        model_id=p.model_id,
        step_id=p.step_id,
        device=p.device,
        summary=p.summary or {},
        created_at=_aware(p.created_at),  # type: ignore[arg-type]
        rows=[
            ProfileLayer(
                index=r.index,
                name=r.name,
                op_type=r.op_type,
                time_ms=r.time_ms,
                percent=r.percent,
                flops=r.flops,
                params=r.params,
                memory_bytes=r.memory_bytes,
                extra=r.extra or {},
            )
            for r in p.rows
        ],
    )


def _search_record(row: SearchRow, trials: int) -> SearchRecord:
    return SearchRecord(
        id=row.id,
        name=row.name,
        status=row.status,
        model_source=row.model_source,
        device=row.device,
        objective=row.objective,
        runs_on=row.runs_on,
        config=dict(row.config or {}),
        summary=dict(row.summary or {}),
        out_dir=row.out_dir,
        created_at=_aware(row.created_at),
        finished_at=_aware(row.finished_at) if row.finished_at else None,
        trials=trials,
    )
