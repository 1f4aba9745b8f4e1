"""ORM tables of the experiment store (SQLAlchemy 2.0 typed mappings).

Rows never leave ``studio.store``: ``repo.py`` turns them into plain dataclasses.
Every constraint is named through ``NAMING_CONVENTION`` so that alembic batch
migrations on SQLite can find and change them. NaN cannot be stored portably in a
float column, so metric-like tables keep ``value`` NULL and set ``is_nan`` instead
(as MLflow does).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

RUN_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled", "crashed", "timed_out")
STEP_STATUSES = ("running", "succeeded", "failed", "gate_failed", "skipped", "cancelled", "crashed")
FINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "crashed", "timed_out"})
SEARCH_STATUSES = ("running", "finished", "no_feasible", "cancelled", "failed", "crashed")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _status_check(column: str, name: str, values: tuple[str, ...]) -> CheckConstraint:
    quoted = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({quoted})", name=name)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class ModelRow(Base):
    """A model source as it was when a run or profile used it."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("source", "content_hash", "input_spec"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(1024))
    kind: Mapped[str] = mapped_column(String(16), default="torch")
    content_hash: Mapped[str] = mapped_column(String(128), default="")
    # Compact InputSpec string ("x:float32[batch,3,64,64]"); "" when unknown.
    input_spec: Mapped[str] = mapped_column(String(2048), default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RecipeRow(Base):
    """A recipe's content, deduplicated by hash."""

    __tablename__ = "recipes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(256), default="")
    schema_version: Mapped[int] = mapped_column(Integer, default=1)
    content: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RunRow(Base):
    __tablename__ = "runs"
    __table_args__ = (
        _status_check("status", "status", RUN_STATUSES),
        Index(None, "created_at"),
        Index(None, "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(256), default="")
    model_id: Mapped[int | None] = mapped_column(
        ForeignKey("models.id", ondelete="SET NULL"), index=True
    )
    recipe_id: Mapped[int | None] = mapped_column(
        ForeignKey("recipes.id", ondelete="SET NULL"), index=True
    )
    parent_run_id: Mapped[str | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )
    # The recipe search this run is a trial of (studio optimize), if any.
    search_id: Mapped[str | None] = mapped_column(
        ForeignKey("searches.id", ondelete="SET NULL"), index=True
    )
    kind: Mapped[str] = mapped_column(String(32), default="run_recipe")
    status: Mapped[str] = mapped_column(String(16), default="queued")
    device: Mapped[str] = mapped_column(String(64), default="")
    # Library versions, CPU / GPU names, hostname: what the worker reported.
    environment: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    baseline: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # What the job was asked to do (params of the job), so that a run can be re-run.
    job_params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    run_dir: Mapped[str] = mapped_column(String(2048), default="")
    notes: Mapped[str] = mapped_column(Text, default="")
    error: Mapped[str] = mapped_column(Text, default="")
    error_type: Mapped[str] = mapped_column(String(128), default="")
    exit_code: Mapped[int | None] = mapped_column(Integer)
    signal: Mapped[str] = mapped_column(String(32), default="")
    # "host:pid" of the studio process recording the run: if that process dies while the
    # run is queued or running, the next start-up marks the run as crashed.
    owner: Mapped[str] = mapped_column(String(128), default="", server_default="")
    # Last lines the worker wrote to stderr, kept when it crashed or timed out.
    log_tail: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    duration_s: Mapped[float | None] = mapped_column(Float)

    model: Mapped[ModelRow | None] = relationship()
    recipe: Mapped[RecipeRow | None] = relationship()
    tags: Mapped[list[RunTagRow]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="RunTagRow.tag"
    )
    steps: Mapped[list[StepRow]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="StepRow.index"
    )


class SearchRow(Base):
    """A recipe search (``studio optimize``); its trials are runs with ``search_id``."""

    __tablename__ = "searches"
    __table_args__ = (
        _status_check("status", "status", SEARCH_STATUSES),
        Index(None, "created_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(256), default="")
    status: Mapped[str] = mapped_column(String(16), default="running")
    model_source: Mapped[str] = mapped_column(String(1024), default="")
    device: Mapped[str] = mapped_column(String(64), default="")
    objective: Mapped[str] = mapped_column(String(32), default="latency")
    runs_on: Mapped[str] = mapped_column(String(512), default="")  # local pool / Ray address
    # SearchConfig.to_dict(): constraints, budget, passes, seed.
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Pareto front, best trial, reason, cache reuse, wall time (SearchResult, less trials).
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    out_dir: Mapped[str] = mapped_column(String(2048), default="")
    owner: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))


class RunTagRow(Base):
    __tablename__ = "run_tags"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(128), primary_key=True, index=True)


class StepRow(Base):
    """One recipe step of a run; index -1 holds the baseline (original model)."""

    __tablename__ = "steps"
    __table_args__ = (
        UniqueConstraint("run_id", "index"),
        _status_check("status", "status", STEP_STATUSES),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    pass_name: Mapped[str] = mapped_column(String(128))
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(16), default="running")
    duration_s: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The whole ParityReport.to_dict() as the runner sent it; parity_results holds it flat.
    parity: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    parity_passed: Mapped[bool | None] = mapped_column(Boolean)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    metrics: Mapped[list[MetricRow]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, lazy="selectin"
    )
    parity_results: Mapped[list[ParityResultRow]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, lazy="selectin"
    )
    artifacts: Mapped[list[ArtifactRow]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, lazy="selectin"
    )


class MetricRow(Base):
    __tablename__ = "metrics"
    __table_args__ = (UniqueConstraint("step_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step_id: Mapped[int] = mapped_column(ForeignKey("steps.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(128))
    value: Mapped[float | None] = mapped_column(Float)
    is_nan: Mapped[bool] = mapped_column(Boolean, default=False)


class ParityResultRow(Base):
    """One metric of one output of a step's parity check, with the output's verdict."""

    __tablename__ = "parity_results"
    __table_args__ = (UniqueConstraint("step_id", "output_name", "metric"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step_id: Mapped[int] = mapped_column(ForeignKey("steps.id", ondelete="CASCADE"), index=True)
    output_name: Mapped[str] = mapped_column(String(256))
    metric: Mapped[str] = mapped_column(String(64))
    value: Mapped[float | None] = mapped_column(Float)
    is_nan: Mapped[bool] = mapped_column(Boolean, default=False)
    passed: Mapped[bool | None] = mapped_column(Boolean)


class ArtifactRow(Base):
    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step_id: Mapped[int] = mapped_column(ForeignKey("steps.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(String(2048))
    sha256: Mapped[str] = mapped_column(String(64), default="")
    bytes: Mapped[int | None] = mapped_column(BigInteger)


class ProfileRow(Base):
    """A per-layer profile of a model (model_id) or of the model after a step (step_id)."""

    __tablename__ = "profiles"
    __table_args__ = (CheckConstraint("model_id IS NOT NULL OR step_id IS NOT NULL", name="owner"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int | None] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), index=True
    )
    step_id: Mapped[int | None] = mapped_column(
        ForeignKey("steps.id", ondelete="CASCADE"), index=True
    )
    device: Mapped[str] = mapped_column(String(64), default="")
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    rows: Mapped[list[ProfileLayerRow]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="ProfileLayerRow.index"
    )


class ProfileLayerRow(Base):
    __tablename__ = "profile_rows"
    __table_args__ = (UniqueConstraint("profile_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    profile_id: Mapped[int] = mapped_column(
        ForeignKey("profiles.id", ondelete="CASCADE"), index=True
    )
    index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(512))
    op_type: Mapped[str] = mapped_column(String(128), default="")
    time_ms: Mapped[float | None] = mapped_column(Float)
    percent: Mapped[float | None] = mapped_column(Float)
    flops: Mapped[float | None] = mapped_column(Float)
    params: Mapped[int | None] = mapped_column(BigInteger)
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ServeTestRow(Base):
    """One `studio serve-test` of a run: the direct batch sweep and the served load points."""

    __tablename__ = "serve_tests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    artifact_kind: Mapped[str] = mapped_column(String(32), default="")
    artifact_path: Mapped[str] = mapped_column(String(2048), default="")
    preferred_batch_sizes: Mapped[list[int]] = mapped_column(JSON, default=list)
    max_queue_delay_us: Mapped[int] = mapped_column(Integer, default=0)
    max_batch_size: Mapped[int] = mapped_column(Integer, default=0)
    direct_p50_ms: Mapped[float | None] = mapped_column(Float)
    # "infer" (one forward per request, dynamic batching) or "generate" (a streamed token
    # generation per request, continuous batching: its points are in ``generation``).
    workload: Mapped[str] = mapped_column(String(16), default="infer", server_default="infer")
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    new_tokens: Mapped[int | None] = mapped_column(Integer)

    sweep: Mapped[list[ServeSweepRow]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="ServeSweepRow.batch"
    )
    load: Mapped[list[ServeLoadRow]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="ServeLoadRow.id"
    )
    generation: Mapped[list[ServeGenerationRow]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="ServeGenerationRow.id"
    )


class ServeSweepRow(Base):
    """Direct (not served) call latency and throughput at one batch size."""

    __tablename__ = "serve_test_sweep"
    __table_args__ = (UniqueConstraint("serve_test_id", "batch"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    serve_test_id: Mapped[int] = mapped_column(
        ForeignKey("serve_tests.id", ondelete="CASCADE"), index=True
    )
    batch: Mapped[int] = mapped_column(Integer)
    latency_ms: Mapped[float] = mapped_column(Float)
    throughput: Mapped[float] = mapped_column(Float)  # samples per second


class ServeLoadRow(Base):
    """Served throughput and latency at one client count, with or without dynamic batching."""

    __tablename__ = "serve_test_load"
    __table_args__ = (UniqueConstraint("serve_test_id", "clients", "dynamic_batching"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    serve_test_id: Mapped[int] = mapped_column(
        ForeignKey("serve_tests.id", ondelete="CASCADE"), index=True
    )
    clients: Mapped[int] = mapped_column(Integer)
    dynamic_batching: Mapped[bool] = mapped_column(Boolean)
    requests: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    p50_ms: Mapped[float] = mapped_column(Float)
    p99_ms: Mapped[float] = mapped_column(Float)
    throughput: Mapped[float] = mapped_column(Float)  # requests (= samples) per second
    overhead_ms: Mapped[float | None] = mapped_column(Float)  # p50 served - direct batch-1 p50
    # Requests per model execution (Triton's metrics): the batches dynamic batching formed.
    avg_batch: Mapped[float | None] = mapped_column(Float)


class ServeGenerationRow(Base):
    """A served generation load at one client count, with or without continuous batching:
    the clients' time to first token, time per output token and tokens per second."""

    __tablename__ = "serve_test_generation"
    __table_args__ = (UniqueConstraint("serve_test_id", "clients", "continuous_batching"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    serve_test_id: Mapped[int] = mapped_column(
        ForeignKey("serve_tests.id", ondelete="CASCADE"), index=True
    )
    clients: Mapped[int] = mapped_column(Integer)
    continuous_batching: Mapped[bool] = mapped_column(Boolean)
    requests: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    tokens_per_s: Mapped[float] = mapped_column(Float)
    # NaN (no request finished) is stored as NULL
    ttft_p50_ms: Mapped[float | None] = mapped_column(Float)
    ttft_p99_ms: Mapped[float | None] = mapped_column(Float)
    tpot_p50_ms: Mapped[float | None] = mapped_column(Float)
