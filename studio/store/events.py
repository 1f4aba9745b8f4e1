"""Runner events -> rows: a run's start (environment, baseline), its steps, metrics, parity
results and artifacts, and its end. The pool's dispatcher thread is the only caller."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from accel.timing.result import StepTiming
from studio.store.base import BASELINE_INDEX, StoreBase
from studio.store.errors import RunNotFound
from studio.store.models import (
    FINAL_STATUSES,
    STEP_STATUSES,
    ArtifactRow,
    ParityResultRow,
    RunRow,
    utcnow,
)
from studio.store.timing_keys import to_metrics
from studio.store.values import check_status, flatten_parity, json_safe, set_metrics, split_float

log = logging.getLogger(__name__)


class RunEvents(StoreBase):
    """``record_event``: one ``accel.events`` event (``to_dict()`` form) applied to a run."""

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
                step.params = json_safe(dict(event.get("params") or {}))
                step.status = "running"
                step.started_at = utcnow()
            elif kind == "step_finished":
                self._on_step_finished(s, run_id, event)
            elif kind == "run_finished":
                status = str(event.get("status", "succeeded"))
                check_status(status)
                self._apply_status(s, row, status)
                if event.get("duration_s") is not None:
                    row.duration_s = float(event["duration_s"])
                row.summary = json_safe(dict(event.get("summary") or {}))
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
        row.environment = json_safe(dict(event.get("environment") or {}))
        baseline = dict(event.get("baseline") or {})
        row.baseline = json_safe(baseline)
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
        timing = _timing(event.get("baseline_timing"))
        if baseline or timing is not None:
            step = self._step_row(s, row.id, BASELINE_INDEX)
            step.pass_name = "baseline"
            step.status = "succeeded"
            step.finished_at = utcnow()
            if timing is not None:
                step.details = {"timing": timing.to_json()}
            set_metrics(s, step, {**baseline, **to_metrics(timing)})

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
        step.duration_s = split_float(event.get("duration_s"))[0]
        step.error = str(event.get("error") or "")
        details = dict(event.get("details") or {})
        timing = _timing(event.get("timing"))
        if timing is not None:
            details["timing"] = timing.to_json()
        step.details = json_safe(details)
        step.finished_at = utcnow()
        set_metrics(s, step, {**(event.get("metrics") or {}), **to_metrics(timing)})
        parity = event.get("parity")
        step.parity = json_safe(dict(parity)) if parity else None
        step.parity_passed = parity.get("passed") if parity else None
        fresh = getattr(step, "_fresh", False)  # just inserted: nothing to replace
        if not fresh:
            s.execute(delete(ParityResultRow).where(ParityResultRow.step_id == step.id))
        for out_name, metric, value, passed in flatten_parity(parity):
            v, nan = split_float(value)
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


def _timing(d: Any) -> StepTiming | None:
    """An event's StepTiming (its JSON form, from a worker) or None."""
    if isinstance(d, StepTiming):
        return d
    return StepTiming.from_json(d) if isinstance(d, Mapping) and d else None
