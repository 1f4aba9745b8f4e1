"""Run lifecycle: create, change status, rename / tag, recover runs a killed studio left
running, delete (optionally with the run's files)."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import select

from studio.store.base import StoreBase
from studio.store.convert import run_record
from studio.store.errors import RunNotFound
from studio.store.models import ArtifactRow, RunRow, RunTagRow, StepRow, utcnow
from studio.store.records import RunRecord
from studio.store.values import aware, check_status, clean_tags, json_safe, process_owner

log = logging.getLogger(__name__)


class RunWrites(StoreBase):
    """Writing runs (the pool's recorder calls create_run / set_status here)."""

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
        check_status(status)
        with self._write() as s:
            row = RunRow(
                id=run_id or uuid.uuid4().hex,
                name=name,
                kind=kind,
                status=status,
                device=device,
                environment=json_safe(dict(environment or {})),
                baseline={},
                summary={},
                job_params=json_safe(dict(job_params or {})),
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
            row.tags = [RunTagRow(tag=t) for t in clean_tags(tags)]
            s.add(row)
            s.flush()
            return run_record(row, row.model, row.recipe, [t.tag for t in row.tags])

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
        check_status(status)
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
                row.summary = json_safe(dict(summary))

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
                current = clean_tags(tags)
            current = clean_tags([*current, *add_tags])
            drop = set(remove_tags)
            current = [t for t in current if t not in drop]
            if current != [t.tag for t in row.tags]:
                row.tags = [RunTagRow(tag=t) for t in current]
            s.flush()
            return run_record(row, row.model, row.recipe, current)

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
            if pid != os.getpid() and not _process_alive(pid, aware(created)):
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
            times = [aware(row.started_at), aware(row.created_at)]
            for step in s.scalars(select(StepRow).where(StepRow.run_id == run_id)):
                times += [aware(step.started_at), aware(step.finished_at)]
        known = [t for t in times if t is not None]
        return max(known) if known else None

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


def _prune_empty(folder: Path, stop: Path | None) -> None:
    while stop is not None and folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
