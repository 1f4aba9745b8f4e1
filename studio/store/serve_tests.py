"""Serve-test results of runs (``studio serve-test``): store and read back.

A feature module of the store: it works on a ``Repository``'s sessions and returns plain
dataclasses, so callers (CLI, GUI) never see ORM rows. Input is the ``ServeReport.to_dict()``
shape from ``accel.deploy.serve`` (a dict, so the store does not import accel).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from studio.store.models import RunRow, ServeLoadRow, ServeSweepRow, ServeTestRow
from studio.store.repo import Repository, RunNotFound

DYNAMIC = "dynamic batching"


@dataclass(frozen=True)
class SweepPoint:
    batch: int
    latency_ms: float
    throughput: float


@dataclass(frozen=True)
class ServedPoint:
    clients: int
    dynamic_batching: bool
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    throughput: float
    overhead_ms: float | None


@dataclass(frozen=True)
class ServeTest:
    id: int
    run_id: str
    created_at: dt.datetime
    artifact_kind: str
    artifact_path: str
    preferred_batch_sizes: list[int]
    max_queue_delay_us: int
    max_batch_size: int
    direct_p50_ms: float | None
    sweep: list[SweepPoint] = field(default_factory=list)
    load: list[ServedPoint] = field(default_factory=list)

    def speedup(self, clients: int) -> float | None:
        """Throughput with dynamic batching over without, at ``clients``."""
        on = next((p for p in self.load if p.clients == clients and p.dynamic_batching), None)
        off = next((p for p in self.load if p.clients == clients and not p.dynamic_batching), None)
        if on is None or off is None or off.throughput <= 0:
            return None
        return on.throughput / off.throughput


def add_serve_test(
    repo: Repository, run_id: str, report: dict[str, Any], artifact: dict[str, Any] | None = None
) -> int:
    """Store one serve-test report of ``run_id``; returns its id."""
    repo.check_writable()
    direct = report.get("direct_p50_ms")
    art = artifact or {}
    with repo._write() as s:  # noqa: SLF001 - a feature module of the same store
        if s.get(RunRow, run_id) is None:
            raise RunNotFound(run_id)
        row = ServeTestRow(
            run_id=run_id,
            artifact_kind=str(art.get("kind", ""))[:32],
            artifact_path=str(art.get("path", "")),
            preferred_batch_sizes=[int(b) for b in report.get("preferred_batch_sizes", [])],
            max_queue_delay_us=int(report.get("max_queue_delay_us", 0)),
            max_batch_size=int(report.get("max_batch_size", 0)),
            direct_p50_ms=None if direct is None else float(direct),
        )
        for p in report.get("sweep", []):
            row.sweep.append(
                ServeSweepRow(
                    batch=int(p["batch"]),
                    latency_ms=float(p["latency_ms"]),
                    throughput=float(p["throughput"]),
                )
            )
        for p in report.get("load", []):
            row.load.append(
                ServeLoadRow(
                    clients=int(p["clients"]),
                    dynamic_batching=p["mode"] == DYNAMIC,
                    requests=int(p.get("requests", 0)),
                    errors=int(p.get("errors", 0)),
                    p50_ms=float(p["p50_ms"]),
                    p99_ms=float(p["p99_ms"]),
                    throughput=float(p["throughput"]),
                    overhead_ms=None if direct is None else float(p["p50_ms"]) - float(direct),
                )
            )
        s.add(row)
        s.flush()
        return row.id


def serve_tests(repo: Repository, run_id: str) -> list[ServeTest]:
    """The serve tests of ``run_id``, newest first."""
    with repo._read() as s:  # noqa: SLF001 - a feature module of the same store
        q = (
            select(ServeTestRow)
            .where(ServeTestRow.run_id == run_id)
            .order_by(ServeTestRow.created_at.desc(), ServeTestRow.id.desc())
        )
        return [_to_dataclass(r) for r in s.scalars(q)]


def _to_dataclass(r: ServeTestRow) -> ServeTest:
    return ServeTest(
        id=r.id,
        run_id=r.run_id,
        created_at=r.created_at,
        artifact_kind=r.artifact_kind,
        artifact_path=r.artifact_path,
        preferred_batch_sizes=list(r.preferred_batch_sizes or []),
        max_queue_delay_us=r.max_queue_delay_us,
        max_batch_size=r.max_batch_size,
        direct_p50_ms=r.direct_p50_ms,
        sweep=[SweepPoint(p.batch, p.latency_ms, p.throughput) for p in r.sweep],
        load=[
            ServedPoint(
                p.clients,
                p.dynamic_batching,
                p.requests,
                p.errors,
                p.p50_ms,
                p.p99_ms,
                p.throughput,
                p.overhead_ms,
            )
            for p in r.load
        ],
    )
