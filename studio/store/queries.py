"""Reading runs: one run with its steps, filtered pages of runs (History), text search and
the side-by-side comparison (Compare)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.orm import selectinload

from accel.timing.result import StepTiming
from studio.store.base import StoreBase
from studio.store.convert import run_record, run_record_flat, step_record
from studio.store.models import ModelRow, RecipeRow, RunRow, RunTagRow, StepRow
from studio.store.records import Comparison, RunDetail, RunFilter, RunRecord, align_passes
from studio.store.values import escape_like


class RunQueries(StoreBase):
    """History and Compare queries."""

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
            steps = [step_record(st) for st in row.steps]
            return RunDetail(
                run=run_record(row, row.model, row.recipe, [t.tag for t in row.tags]),
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
            pattern = f"%{escape_like(word.lower())}%"
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
            return [run_record_flat(r[0], r[1], r[2], r[3], r[4], tags[r[0].id]) for r in rows]

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
        timings: dict[tuple[int, str], list[StepTiming | None]] = {}
        for i, d in enumerate(details):
            for st in d.steps:
                pos = positions[i].get(st.index, st.index)
                for key, value in st.metrics.items():
                    rows.setdefault((pos, st.pass_name, key), [None] * n)[i] = value
                if st.parity_passed is not None:
                    parity.setdefault((pos, st.pass_name), [None] * n)[i] = st.parity_passed
                if st.timing is not None:
                    timings.setdefault((pos, st.pass_name), [None] * n)[i] = st.timing
        ordered = dict(sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])))
        return Comparison(
            runs=details,
            columns=[d.id for d in details],
            rows=ordered,
            parity=parity,
            timings=dict(sorted(timings.items())),
            slots=slots,
            positions=positions,
        )

    # --- delete / export ------------------------------------------------------------------
