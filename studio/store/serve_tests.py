"""Serve-test results of runs (``studio serve-test``): store and read back.

A feature module of the store: ``ServeTests`` is one of ``Repository``'s parts (declared in
``studio.store.api.ServeTestStore``); it returns the plain dataclasses of
``studio.store.records`` (re-exported here), so callers (CLI, GUI) never see ORM rows. Input
is the ``ServeReport.to_dict()`` shape from ``accel.deploy.serve``, or for a generation run
(``"workload": "generate"``) ``LMServeReport.to_dict()`` from ``accel.deploy.serve_lm`` (a
dict, so the store does not import accel). ``add_serve_test(repo, ...)`` / ``serve_tests(repo, ...)`` call the methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from studio.store.base import StoreBase
from studio.store.errors import RunNotFound
from studio.store.models import (
    RunRow,
    ServeGenerationRow,
    ServeLoadRow,
    ServeSweepRow,
    ServeTestRow,
)
from studio.store.records import GenerationPoint, ServedPoint, ServeTest, SweepPoint

if TYPE_CHECKING:
    from studio.store.api import ServeTestStore

__all__ = [
    "CONTINUOUS",
    "DYNAMIC",
    "GenerationPoint",
    "ServeTest",
    "ServeTests",
    "ServedPoint",
    "SweepPoint",
    "add_serve_test",
    "serve_tests",
]

DYNAMIC = "dynamic batching"
CONTINUOUS = "continuous batching"
GENERATE = "generate"


class ServeTests(StoreBase):
    """Serve tests of runs: a report with its batch sweep and served-load points."""

    def add_serve_test(
        self, run_id: str, report: dict[str, Any], artifact: dict[str, Any] | None = None
    ) -> int:
        """Store one serve-test report of ``run_id``; returns its id."""
        self.check_writable()
        direct = report.get("direct_p50_ms")
        art = artifact or {}
        with self._write() as s:
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
                workload=str(report.get("workload") or "infer")[:16],
                prompt_tokens=_int_or_none(report.get("prompt_tokens")),
                new_tokens=_int_or_none(report.get("new_tokens")),
            )
            if row.workload == GENERATE:
                row.generation.extend(_generation_row(p) for p in report.get("load", []))
                s.add(row)
                s.flush()
                return row.id
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
                        avg_batch=_float_or_none(p.get("avg_batch")),
                    )
                )
            s.add(row)
            s.flush()
            return row.id

    def serve_tests(self, run_id: str) -> list[ServeTest]:
        """The serve tests of ``run_id``, newest first."""
        with self._read() as s:
            q = (
                select(ServeTestRow)
                .where(ServeTestRow.run_id == run_id)
                .order_by(ServeTestRow.created_at.desc(), ServeTestRow.id.desc())
            )
            return [_to_dataclass(r) for r in s.scalars(q)]


def add_serve_test(
    repo: ServeTestStore,
    run_id: str,
    report: dict[str, Any],
    artifact: dict[str, Any] | None = None,
) -> int:
    """Store one serve-test report of ``run_id``; returns its id."""
    return repo.add_serve_test(run_id, report, artifact)


def serve_tests(repo: ServeTestStore, run_id: str) -> list[ServeTest]:
    """The serve tests of ``run_id``, newest first."""
    return repo.serve_tests(run_id)


def _float_or_none(value: Any) -> float | None:
    """None for a missing or NaN value (the store keeps NaN as NULL)."""
    if value is None:
        return None
    value = float(value)
    return None if value != value else value


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _generation_row(p: dict[str, Any]) -> ServeGenerationRow:
    return ServeGenerationRow(
        clients=int(p["clients"]),
        continuous_batching=p["mode"] == CONTINUOUS,
        requests=int(p.get("requests", 0)),
        errors=int(p.get("errors", 0)),
        tokens=int(p.get("tokens", 0)),
        tokens_per_s=float(p["tokens_per_s"]),
        ttft_p50_ms=_float_or_none(p.get("ttft_p50_ms")),
        ttft_p99_ms=_float_or_none(p.get("ttft_p99_ms")),
        tpot_p50_ms=_float_or_none(p.get("tpot_p50_ms")),
    )


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
                p.avg_batch,
            )
            for p in r.load
        ],
        workload=r.workload or "infer",
        prompt_tokens=r.prompt_tokens,
        new_tokens=r.new_tokens,
        generation=[
            GenerationPoint(
                p.clients,
                p.continuous_batching,
                p.requests,
                p.errors,
                p.tokens,
                p.tokens_per_s,
                p.ttft_p50_ms,
                p.ttft_p99_ms,
                p.tpot_p50_ms,
            )
            for p in r.generation
        ],
    )
