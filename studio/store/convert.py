"""ORM rows -> the plain records of ``studio.store.records`` (callers never see rows)."""

from __future__ import annotations

from studio.store.base import BASELINE_INDEX
from studio.store.models import ModelRow, ProfileRow, RecipeRow, RunRow, SearchRow, StepRow
from studio.store.records import (
    ArtifactRecord,
    ModelRecord,
    ParityRecord,
    ProfileLayer,
    ProfileRecord,
    RecipeRecord,
    RunRecord,
    SearchRecord,
    StepRecord,
)
from studio.store.timing_keys import final_timing, step_timing, without_timing
from studio.store.values import aware, join_float


def model_record(r: ModelRow) -> ModelRecord:
    return ModelRecord(
        id=r.id,
        source=r.source,
        kind=r.kind,
        content_hash=r.content_hash,
        input_spec=r.input_spec,
        created_at=aware(r.created_at),  # type: ignore[arg-type]
    )


def recipe_record(r: RecipeRow) -> RecipeRecord:
    return RecipeRecord(
        id=r.id,
        hash=r.hash,
        name=r.name,
        schema_version=r.schema_version,
        content=r.content,
        created_at=aware(r.created_at),  # type: ignore[arg-type]
    )


def run_record(
    r: RunRow, model: ModelRow | None, recipe: RecipeRow | None, tags: list[str]
) -> RunRecord:
    return run_record_flat(
        r,
        model.source if model else None,
        model.kind if model else None,
        recipe.name if recipe else None,
        recipe.hash if recipe else None,
        tags,
    )


def run_record_flat(
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
        created_at=aware(r.created_at),  # type: ignore[arg-type]
        started_at=aware(r.started_at),
        finished_at=aware(r.finished_at),
        duration_s=r.duration_s,
        final=final_timing(r.summary),
        noise=(r.summary or {}).get("noise"),
    )


def step_record(st: StepRow) -> StepRecord:
    parity: dict[str, ParityRecord] = {}
    for p in st.parity_results:
        rec = parity.setdefault(p.output_name, ParityRecord(p.output_name, p.passed, {}))
        rec.metrics[p.metric] = join_float(p.value, p.is_nan)
    metrics = {m.key: join_float(m.value, m.is_nan) for m in st.metrics}
    return StepRecord(
        index=st.index,
        pass_name=st.pass_name,
        params=st.params or {},
        status=st.status,
        duration_s=st.duration_s,
        error=st.error,
        metrics=without_timing(metrics),
        parity_passed=st.parity_passed,
        parity=list(parity.values()),
        artifacts=[ArtifactRecord(a.kind, a.path, a.sha256, a.bytes) for a in st.artifacts],
        details=st.details or {},
        parity_report=st.parity,
        timing=step_timing(metrics, st.details, baseline=st.index == BASELINE_INDEX),
    )


def profile_record(p: ProfileRow) -> ProfileRecord:
    return ProfileRecord(
        id=p.id,
        model_id=p.model_id,
        step_id=p.step_id,
        device=p.device,
        summary=p.summary or {},
        created_at=aware(p.created_at),  # type: ignore[arg-type]
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


def search_record(row: SearchRow, trials: int) -> SearchRecord:
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
        created_at=aware(row.created_at),
        finished_at=aware(row.finished_at) if row.finished_at else None,
        trials=trials,
    )
