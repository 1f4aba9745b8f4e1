"""Per-layer profiles of a model or of a run's step."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from studio.store.base import BASELINE_INDEX, StoreBase
from studio.store.convert import profile_record
from studio.store.models import ModelRow, ProfileLayerRow, ProfileRow, StepRow
from studio.store.records import ProfileLayer, ProfileRecord, to_json
from studio.store.values import json_safe, split_float


class Profiles(StoreBase):
    """record_profile / get_profiles."""

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
            prof = ProfileRow(device=device, summary=json_safe(dict(summary or {})))
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
                        time_ms=split_float(d.get("time_ms"))[0],
                        percent=split_float(d.get("percent"))[0],
                        flops=split_float(d.get("flops"))[0],
                        params=d.get("params"),
                        memory_bytes=d.get("memory_bytes"),
                        extra=json_safe(extra),
                    )
                )
            s.add(prof)
            s.flush()
            return profile_record(prof)

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
            return [profile_record(p) for p in s.scalars(q)]
