"""Recipe searches (``studio optimize``): the search row, its trials (runs) and its end."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from studio.store.base import StoreBase
from studio.store.convert import search_record
from studio.store.errors import RunNotFound
from studio.store.models import RunRow, SearchRow, utcnow
from studio.store.records import SearchRecord
from studio.store.values import json_safe, process_owner


class Searches(StoreBase):
    """create / finish / list searches and attach trial runs."""

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
                config=json_safe(dict(config or {})),
                summary={},
                out_dir=out_dir,
                owner=process_owner(),
                created_at=utcnow(),
            )
            s.add(row)
            s.flush()
            return search_record(row, 0)

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
            row.summary = json_safe(dict(summary))
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
            return search_record(rows[0], self._trial_count(s, rows[0].id))

    def list_searches(self, limit: int = 50) -> list[SearchRecord]:
        """Searches, newest first."""
        with self._read() as s:
            rows = s.scalars(
                select(SearchRow).order_by(SearchRow.created_at.desc()).limit(limit)
            ).all()
            return [search_record(r, self._trial_count(s, r.id)) for r in rows]

    def search_priors(self, limit: int = 200) -> list[dict[str, Any]]:
        """The best recipes of finished searches (their summary's ``prior``: model family,
        size class, device, CPU, steps, score), newest first: the next search's seeds for
        similar models (accel.search.seeds.Prior)."""
        with self._read() as s:
            rows = s.scalars(
                select(SearchRow.summary)
                .where(SearchRow.status == "finished")
                .order_by(SearchRow.created_at.desc())
                .limit(limit)
            ).all()
        return [dict(r["prior"]) for r in rows if isinstance(r, dict) and r.get("prior")]

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
