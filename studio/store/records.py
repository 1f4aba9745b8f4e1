"""Plain dataclasses returned by the store (ORM rows never leave studio.store)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from accel.timing.result import StepTiming


def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def to_json(obj: Any) -> Any:
    """Dataclasses / datetimes -> JSON-friendly values (NaN stays float('nan'))."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dt.datetime):
        return _iso(obj)
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_json(v) for v in obj]
    return obj


@dataclass(frozen=True)
class ModelRecord:
    id: int
    source: str
    kind: str
    content_hash: str
    input_spec: str
    created_at: dt.datetime


@dataclass(frozen=True)
class RecipeRecord:
    id: int
    hash: str
    name: str
    schema_version: int
    content: dict[str, Any]
    created_at: dt.datetime


@dataclass(frozen=True)
class ArtifactRecord:
    kind: str
    path: str
    sha256: str
    bytes: int | None


@dataclass(frozen=True)
class ParityRecord:
    """One output of a step's parity check: its metrics and its verdict."""

    output_name: str
    passed: bool | None
    metrics: dict[str, float | None]


@dataclass(frozen=True)
class StepRecord:
    index: int  # -1: baseline (the original model)
    pass_name: str
    params: dict[str, Any]
    status: str
    duration_s: float | None
    error: str
    metrics: dict[str, float | None]  # NaN comes back as float("nan")
    parity_passed: bool | None
    parity: list[ParityRecord]
    artifacts: list[ArtifactRecord]
    details: dict[str, Any] = field(default_factory=dict)
    parity_report: dict[str, Any] | None = None
    # Latencies and speedup from one comparison (studio.store.timing_keys); ``metrics``
    # then holds the rest (size, accuracy, the pass's own numbers).
    timing: StepTiming | None = None

    def worst_parity(self) -> tuple[str, str, float | None] | None:
        """(output, metric, value) of the worst metric: a failing output first, then the
        largest max_abs; None without parity results."""
        if not self.parity:
            return None
        ordered = sorted(self.parity, key=lambda p: (p.passed is not False, p.output_name))
        out = ordered[0]
        for key in ("max_abs", "max_rel", "mean_abs", "cosine"):
            if key in out.metrics:
                return out.output_name, key, out.metrics[key]
        if out.metrics:
            key = sorted(out.metrics)[0]
            return out.output_name, key, out.metrics[key]
        return out.output_name, "", None


@dataclass(frozen=True)
class RunRecord:
    """One row of the history list."""

    id: str
    name: str
    kind: str
    status: str
    device: str
    model_source: str
    model_kind: str
    recipe_name: str
    recipe_hash: str
    parent_run_id: str | None
    tags: list[str]
    notes: str
    error: str
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    duration_s: float | None
    # The last measured step's timing from the run's summary (None: no step was timed;
    # the interval is absent in runs recorded before speedups had one).
    final: StepTiming | None = None
    noise: str | None = None  # the run's noise line: which steps were timed on a busy machine

    @property
    def short_id(self) -> str:
        return self.id[:8]


@dataclass(frozen=True)
class RunDetail:
    run: RunRecord
    environment: dict[str, Any]
    baseline: dict[str, Any]
    summary: dict[str, Any]
    job_params: dict[str, Any]
    recipe: dict[str, Any] | None
    model_input_spec: str
    model_content_hash: str
    run_dir: str
    error_type: str
    exit_code: int | None
    signal: str
    log_tail: str
    steps: list[StepRecord]

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def status(self) -> str:
        return self.run.status

    def step(self, index: int) -> StepRecord | None:
        return next((s for s in self.steps if s.index == index), None)


@dataclass(frozen=True)
class ProfileLayer:
    index: int
    name: str
    op_type: str
    time_ms: float | None = None
    percent: float | None = None
    flops: float | None = None
    params: int | None = None
    memory_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProfileRecord:
    id: int
    model_id: int | None
    step_id: int | None
    device: str
    summary: dict[str, Any]
    created_at: dt.datetime
    rows: list[ProfileLayer]


@dataclass(frozen=True)
class RunFilter:
    """Filters of the history list; None / empty means "any"."""

    status: tuple[str, ...] = ()
    model: str | None = None  # substring of the model source
    recipe: str | None = None  # substring of the recipe name or a recipe hash prefix
    device: str | None = None
    tags: tuple[str, ...] = ()  # all of these tags
    search: str | None = None  # words found in name, tags, notes, model, recipe (all words)
    kind: str | None = None
    pass_name: str | None = None  # runs with a step of this pass
    parent_run_id: str | None = None
    search_id: str | None = None  # trials of this search
    since: dt.datetime | None = None
    until: dt.datetime | None = None


@dataclass(frozen=True)
class Comparison:
    """Runs side by side: ``rows[(position, pass name, metric)] = [value per run]``.

    Steps are aligned by pass, not by index: ``position`` is the step's place in one merged
    sequence of every run's passes (``align_passes``), so the export_onnx of a 3-step recipe
    and of a 4-step one share a row. ``positions[i][step index]`` is that place for run i."""

    runs: list[RunDetail]
    columns: list[str]  # run ids, in the order asked
    rows: dict[tuple[int, str, str], list[float | None]]
    parity: dict[tuple[int, str], list[bool | None]]
    # Each step's timing per run (latencies and speedup from one comparison; the metric
    # ``rows`` hold the other numbers).
    timings: dict[tuple[int, str], list[StepTiming | None]] = field(default_factory=dict)
    slots: list[str] = field(default_factory=list)  # pass name at each position
    positions: list[dict[int, int]] = field(default_factory=list)


def align_passes(sequences: list[list[str]]) -> tuple[list[str], list[list[int]]]:
    """Merge several runs' pass sequences into one, so equal passes line up.

    A slot is (pass, occurrence): the second export_onnx of a run only meets the second one
    of another. Runs are merged in order; a pass not seen yet goes just before the run's next
    pass that is already placed (after the last one it matched), or at the end. Returns the
    merged pass names and, per run, each step's position.
    """
    merged: list[tuple[str, int]] = []
    for seq in sequences:
        seen: dict[str, int] = {}
        slots = []
        for name in seq:
            slots.append((name, seen.get(name, 0)))
            seen[name] = slots[-1][1] + 1
        cursor = -1
        for k, slot in enumerate(slots):
            if slot in merged:  # (one met out of order keeps its place; the cursor stays)
                cursor = max(cursor, merged.index(slot))
                continue
            later = [merged.index(x) for x in slots[k + 1 :] if x in merged]
            later = [i for i in later if i > cursor]
            cursor = min(later) if later else len(merged)
            merged.insert(cursor, slot)
    where = {slot: i for i, slot in enumerate(merged)}
    out = []
    for seq in sequences:
        seen = {}
        pos = []
        for name in seq:
            k = seen.get(name, 0)
            seen[name] = k + 1
            pos.append(where[(name, k)])
        out.append(pos)
    return [name for name, _ in merged], out


@dataclass(frozen=True)
class SearchRecord:
    """A recipe search and how many of its trials are recorded."""

    id: str
    name: str
    status: str
    model_source: str
    device: str
    objective: str
    runs_on: str
    config: dict[str, Any]
    summary: dict[str, Any]
    out_dir: str
    created_at: dt.datetime
    finished_at: dt.datetime | None
    trials: int

    @property
    def short_id(self) -> str:
        return self.id[:8]


# --- serve tests (studio serve-test; studio.store.serve_tests) ---------------------------


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
    avg_batch: float | None = None  # requests per model execution (Triton's metrics)


@dataclass(frozen=True)
class GenerationPoint:
    """A served generation load (``studio serve-test`` of a generation run)."""

    clients: int
    continuous_batching: bool
    requests: int
    errors: int
    tokens: int
    tokens_per_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None


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
    workload: str = "infer"  # "generate": a streamed generation test, its points in generation
    prompt_tokens: int | None = None
    new_tokens: int | None = None
    generation: list[GenerationPoint] = field(default_factory=list)

    def generation_pair(
        self, clients: int
    ) -> tuple[GenerationPoint | None, GenerationPoint | None]:
        """The generation points at ``clients``: (without, with) continuous batching."""
        at = [p for p in self.generation if p.clients == clients]
        off = next((p for p in at if not p.continuous_batching), None)
        return off, next((p for p in at if p.continuous_batching), None)

    def generation_gain(self, clients: int) -> float | None:
        """Tokens/s with continuous batching over without, at ``clients``."""
        off, on = self.generation_pair(clients)
        if on is None or off is None or off.tokens_per_s <= 0:
            return None
        return on.tokens_per_s / off.tokens_per_s

    def pair(self, clients: int) -> tuple[ServedPoint | None, ServedPoint | None]:
        """The load points at ``clients``: (without, with) dynamic batching."""
        at = [p for p in self.load if p.clients == clients]
        off = next((p for p in at if not p.dynamic_batching), None)
        return off, next((p for p in at if p.dynamic_batching), None)

    def speedup(self, clients: int) -> float | None:
        """Throughput with dynamic batching over without, at ``clients``."""
        off, on = self.pair(clients)
        if on is None or off is None or off.throughput <= 0:
            return None
        return on.throughput / off.throughput
