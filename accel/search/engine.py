"""The recipe search: rule-based seeds, then Optuna multi-objective sampling.

``run_search(config, executor)`` builds the space from the passes (``space.build_space``),
enqueues the known-good stacks for the model's family and device (the original model first:
it is the reference every speedup is measured against), and asks Optuna's TPE sampler
(seeded, multi-objective: the chosen objective, the parity error and the size) for the
rest. Trials run on an executor (in this process, the studio's worker pool, or a Ray
cluster) in batches of ``executor.slots`` and are told back in order, so a seed and the
same measured values give the same trials. A trial that fails the parity gate is stopped
before it is timed and told to Optuna as pruned; one that fails or crashes as failed; the
search goes on until the trial count or the wall-time budget is spent, or it is cancelled.

With the latency objective the search ends with a final side-by-side re-timing
(accel.search.retime): its top ``final_top_k`` trials within the constraints, each timed
against the original in its own measurement minutes apart, are timed together with the
original in ONE round-robin measurement, and the winner is chosen on it. ``final_share`` of
the budget is kept for it once two trials qualify. The result's ``final`` holds that
measurement; the best's reported speedup comes from it (``SearchResult.best_timing``), while
each trial keeps its own figure. A re-timing cut short (deadline, cancel, failure) keeps no
figure, and the best is then chosen on the trials' own figures.

Latency is measured, so with ``objective="latency"`` two searches can differ once timing
noise reorders trials; with ``objective="size"`` every value the sampler sees is
deterministic and a seed reproduces the whole search.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from accel.search.generation import (
    GENERATION_OBJECTIVES,
    generation_bench,
    generation_only_exclusions,
    generation_seeds,
    objective_exclusions,
)
from accel.search.generation import PRIMARY as GENERATION_PRIMARY
from accel.search.rule_out import holds_ruled_out, rule_out
from accel.search.runtime_settings import add_runtime_settings
from accel.search.seeds import (
    Seed,
    hardware_exclusions,
    model_family,
    narrow_to_hardware,
    plan_seeds,
    size_class,
)
from accel.search.sensitivity_space import AFTER as SENSITIVITY_AFTER
from accel.search.sensitivity_space import ALLOW as SENSITIVITY
from accel.search.space import SearchError, SearchSpace, build_space, model_layer_types, steps_for
from accel.timing.result import StepTiming

log = logging.getLogger(__name__)

# The clock of budgets and deadlines (seconds, monotonic). Tests replace it with a fake one.
CLOCK: Callable[[], float] = time.monotonic

OBJECTIVES = ("latency", "throughput", "size", *GENERATION_OBJECTIVES)
# Optuna objective (metric key, direction) per user objective; parity error and size follow.
_PRIMARY = {
    # Latency as the speedup over the original timed in the same rounds: a latency measured
    # minutes apart on a shared machine is not comparable, a same-time ratio is.
    "latency": ("speedup", "maximize"),
    "throughput": ("throughput", "maximize"),
    "size": ("size_bytes", "minimize"),
    **GENERATION_PRIMARY,  # tokens_per_s, ttft: ratios against the original, same rounds
}
# Objectives whose figure is a ratio against the original timed in the same rounds: the
# original against itself is 1 by definition, so its trial is built and gated, not timed
# (on a ResNet-50 at 1 thread that timing was 10 s before the first real trial). Every
# trial's row still shows the original's p50 from its own comparison.
UNTIMED_ORIGINAL = ("latency", *GENERATION_OBJECTIVES)
MAX_DUPLICATES = 40  # proposals in a row already tried: the space is exhausted
MAX_FINAL_TOP_K = 8  # trials timed together in the final re-timing, at most


@dataclass
class SearchConfig:
    """What to search for. ``budget_s`` and ``max_trials`` bound the search (either may be
    None, not both); ``allow``: opt-in passes (``prune``, ``qat``) and ``sensitivity``
    (quantization exclude sets from a sensitivity analysis, its time counted in the budget,
    see accel.search.sensitivity_space); ``passes``: only these
    pass names; ``exclude``: never these."""

    model: str
    input_spec: str | None = None
    device: str = "cpu"
    trust_pickle: bool = False
    max_cosine_drop: float = 0.001
    max_accuracy_drop: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    objective: str = "latency"
    budget_s: float | None = 15 * 60
    max_trials: int | None = None
    allow: tuple[str, ...] = ()
    passes: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    max_steps: int = 4
    seed: int = 0
    use_seeds: bool = True
    out_dir: str = "search"  # best.yaml, search.json; trials/ and cache/ unless below
    artifacts_dir: str | None = None  # trial folders and the cache (a folder nodes share)
    cache_dir: str | None = None  # default: ARTIFACTS/cache
    cache_max_entries: int = 32
    cache_max_bytes: int = 8 * 1024**3
    trial_timeout_s: float | None = 600.0
    bench_iters: int = 30
    bench_warmup: int = 3
    bench_rounds: int = 5
    bench_min_time_s: float = 0.5
    bench_threads: int | None = None
    bench_dims: dict[str, int] = field(default_factory=dict)
    # tokens_per_s / ttft objectives: prompt_tokens, new_tokens, batch (accel.generate)
    generate: dict[str, int] = field(default_factory=dict)
    # The final side-by-side re-timing (latency objective, accel.search.retime): the top
    # ``final_top_k`` trials within the parity budget timed together with the original in
    # one measurement, the winner chosen on it; ``final_share`` of the budget is kept for it
    # (0 top-k: off).
    final_top_k: int = 3
    final_share: float = 0.1

    def validate(self) -> None:
        if self.objective not in OBJECTIVES:
            raise SearchError(f"objective {self.objective!r} is not one of {', '.join(OBJECTIVES)}")
        if self.budget_s is None and self.max_trials is None:
            raise SearchError("give a wall-time budget or a trial count (or both)")
        if self.budget_s is not None and self.budget_s <= 0:
            raise SearchError(f"the budget must be positive, got {self.budget_s} s")
        if self.max_trials is not None and self.max_trials < 1:
            raise SearchError(f"the trial count must be at least 1, got {self.max_trials}")
        if self.trial_timeout_s is not None and not self.trial_timeout_s > 0:
            raise SearchError(f"the trial timeout must be above 0 s, got {self.trial_timeout_s}")
        if not 0 <= self.max_cosine_drop <= 2:
            raise SearchError(
                f"max cosine drop must be between 0 and 2, got {self.max_cosine_drop}"
            )
        unknown = sorted(set(self.allow) - allow_words())
        if unknown:
            raise SearchError(
                f"--allow {', '.join(unknown)}: not something to allow; one of "
                f"{', '.join(sorted(allow_words()))}"
            )
        if not (isinstance(self.final_top_k, int) and 0 <= self.final_top_k <= MAX_FINAL_TOP_K):
            raise SearchError(
                f"the final re-timing's top-k must be an integer from 0 to {MAX_FINAL_TOP_K}, "
                f"got {self.final_top_k!r}"
            )
        if not (isinstance(self.final_share, int | float) and 0 <= self.final_share <= 0.5):
            raise SearchError(
                "the budget share kept for the final re-timing must be from 0 to 0.5, got "
                f"{self.final_share!r}"
            )
        if self.max_accuracy_drop is not None and not self.data.get("eval"):
            raise SearchError(
                "--max-accuracy-drop needs labelled evaluation data: give --data FILE"
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["allow"] = list(self.allow)
        d["passes"] = None if self.passes is None else list(self.passes)
        d["exclude"] = list(self.exclude)
        return d


def allow_words() -> set[str]:
    """What --allow takes: the passes' opt-in words (prune, distill, qat) and sensitivity."""
    from accel.passes import list_passes

    words = {p.search.opt_in for p in list_passes(include_test=True) if p.search is not None}
    return {w for w in words if w} | {SENSITIVITY}


@dataclass
class TrialRecord:
    number: int
    chain: tuple[str, ...]
    steps: list[dict[str, Any]]
    origin: str  # "seed" | "optuna"
    status: str = "queued"  # ok | gate_failed | failed | crashed | timed_out | cancelled
    metrics: dict[str, float | None] = field(default_factory=dict)
    timing: StepTiming | None = None  # the trial's model against the original
    error: str = ""
    gate: str | None = None
    run_id: str | None = None
    run_dir: str | None = None
    reused_steps: int = 0
    duration_s: float = 0.0

    @property
    def label(self) -> str:
        return SearchSpace.chain_key(self.chain)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["chain"] = list(self.chain)
        d["label"] = self.label
        d["timing"] = self.timing.to_json() if self.timing is not None else None
        return d


@dataclass
class FinalTiming:
    """The final side-by-side re-timing (accel.search.retime): the trials timed together
    with the original in one measurement, each one's StepTiming from it, and the winner
    chosen on it. ``done`` False: it did not run or was cut short (``reason``), and no figure
    of it is kept; the best is then the best trial by its own measurement."""

    trials: list[int]  # the trials re-timed, best first by their own measurements
    done: bool = False
    timings: dict[int, StepTiming] = field(default_factory=dict)
    winner: int | None = None
    reason: str = ""
    run_id: str | None = None
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "trials": list(self.trials),
            "done": self.done,
            "timings": {str(n): t.to_json() for n, t in self.timings.items()},
            "winner": self.winner,
            "reason": self.reason,
            "run_id": self.run_id,
            "duration_s": self.duration_s,
            "what": "the winner's speedup comes from this one side-by-side measurement of "
            "these trials and the original; each trial's own figure stays in its row",
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FinalTiming:
        return cls(
            trials=[int(n) for n in d.get("trials") or []],
            done=bool(d.get("done")),
            timings={int(n): StepTiming.from_json(t) for n, t in (d.get("timings") or {}).items()},
            winner=d.get("winner"),
            reason=str(d.get("reason") or ""),
            run_id=d.get("run_id"),
            duration_s=float(d.get("duration_s") or 0.0),
        )


@dataclass
class SearchResult:
    status: str  # finished | cancelled | no_feasible | failed
    config: SearchConfig
    trials: list[TrialRecord]
    front: list[int]  # trial numbers on the Pareto front
    best: int | None
    reason: str = ""
    wall_s: float = 0.0
    space: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, int] = field(default_factory=dict)
    model_kind: str = "torch"
    final: FinalTiming | None = None  # the final side-by-side re-timing (None: not tried)

    def trial(self, number: int) -> TrialRecord:
        return next(t for t in self.trials if t.number == number)

    def best_timing(self) -> StepTiming | None:
        """The best trial's timing: from the final side-by-side measurement when it chose
        the best, else the trial's own."""
        if self.best is None:
            return None
        if self.final is not None and self.final.done and self.best in self.final.timings:
            return self.final.timings[self.best]
        return self.trial(self.best).timing

    def recipe_for(self, number: int) -> dict[str, Any]:
        return trial_recipe(self.config, self.trial(number))

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "config": self.config.to_dict(),
            "trials": [t.to_dict() for t in self.trials],
            "front": list(self.front),
            "best": self.best,
            "wall_s": self.wall_s,
            "space": self.space,
            "cache": dict(self.cache),
            "model_kind": self.model_kind,
            "final": self.final.to_dict() if self.final is not None else None,
        }


def trial_recipe(
    config: SearchConfig, trial: TrialRecord, name: str | None = None
) -> dict[str, Any]:
    """A recipe (dict) that reproduces a trial with ``studio run``."""
    model: dict[str, Any] = {"source": config.model}
    if config.input_spec:
        model["input_spec"] = config.input_spec
    # trust_pickle is never written into a recipe: a recipe cannot opt in to unpickling
    # (`studio run` ignores it); the user passes --trust-pickle again, as the CLI says.
    gates: dict[str, Any] = {"min_cosine": round(1.0 - config.max_cosine_drop, 12)}
    if config.max_accuracy_drop is not None:
        gates["max_accuracy_drop"] = config.max_accuracy_drop
    recipe: dict[str, Any] = {
        "name": (name or f"search best: {trial.label}")[:80],
        "description": f"found by studio optimize (trial {trial.number}, objective "
        f"{config.objective}, max cosine drop {config.max_cosine_drop})",
        "model": model,
        "device": config.device,
        "seed": config.seed,
        "steps": [dict(s) for s in trial.steps],
        "gates": gates,
        "benchmark": {
            "warmup": config.bench_warmup,
            "iters": config.bench_iters,
            **generation_bench(config),
        },
    }
    if config.bench_threads:
        recipe["benchmark"]["threads"] = config.bench_threads
    if config.bench_dims:
        recipe["benchmark"]["dims"] = dict(config.bench_dims)
    if config.data:
        recipe["data"] = dict(config.data)
    return recipe


class TrialHandle(Protocol):
    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """{"status": succeeded|failed|crashed|timed_out|cancelled, "result": run_trial's
        dict, "error": str, "run_id": str | None, "events": [...] | None}"""

    def cancel(self) -> None: ...


class Executor(Protocol):
    slots: int

    def submit(self, number: int, spec: dict[str, Any]) -> TrialHandle: ...

    def close(self) -> None: ...


class _DoneHandle:
    def __init__(self, outcome: dict[str, Any]) -> None:
        self._outcome = outcome

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        return self._outcome

    def cancel(self) -> None:
        pass


class InProcessExecutor:
    """Runs each trial in this process, one at a time (notebooks, tests). ``on_event(number,
    event_dict)`` sees the trial's runner events."""

    slots = 1

    def __init__(
        self,
        on_event: Callable[[int, dict[str, Any]], None] | None = None,
        cancel: Callable[[], bool] | None = None,
    ) -> None:
        self.on_event = on_event
        self.cancel_fn = cancel or (lambda: False)

    def submit(self, number: int, spec: dict[str, Any]) -> TrialHandle:
        from accel.search.job import run_search_job

        events: list[dict[str, Any]] = []

        def emit(e: dict[str, Any]) -> None:
            events.append(e)
            if self.on_event is not None:
                self.on_event(number, e)

        try:
            res = run_search_job(spec, emit, self.cancel_fn)
            status = res.get("status", "failed")
            out = {"status": status, "result": res, "error": res.get("error", ""), "events": events}
        except Exception as exc:  # noqa: BLE001 - recorded as the trial's failure
            out = {"status": "failed", "result": {}, "error": f"{type(exc).__name__}: {exc}"}
        out.setdefault("run_id", None)
        return _DoneHandle(out)

    def close(self) -> None:
        pass


# -- seeds ------------------------------------------------------------------------------------


def seed_chains(space: SearchSpace, family: str) -> list[tuple[str, ...]]:
    """The original model, then the family's known-good stacks present in the space, in the
    order this machine's CPU predicts (accel.search.seeds)."""
    return [s.chain for s in plan_seeds(space, family)]


# -- Pareto -----------------------------------------------------------------------------------


def objective_vector(config: SearchConfig, metrics: dict[str, Any]) -> list[float] | None:
    """Values to minimize: the objective (speedup, throughput negated), parity error, size."""
    key, direction = _PRIMARY[config.objective]
    primary = metrics.get(key)
    if primary is None or not math.isfinite(float(primary)):
        return None
    primary = float(primary) if direction == "minimize" else -float(primary)
    drop = float(metrics.get("cosine_drop") or 0.0)
    size = float(metrics.get("size_bytes") or 0.0)
    return [primary, drop] if config.objective == "size" else [primary, drop, size]


def pareto_front(vectors: dict[int, list[float]]) -> list[int]:
    """Numbers whose vectors no other vector dominates (ties: the earlier trial stays)."""
    front = []
    items = sorted(vectors.items())
    for n, v in items:
        dominated = False
        for m, w in items:
            if m == n:
                continue
            if all(a <= b for a, b in zip(w, v, strict=True)) and (
                any(a < b for a, b in zip(w, v, strict=True)) or (w == v and m < n)
            ):
                dominated = True
                break
        if not dominated:
            front.append(n)
    return front


# -- the search loop --------------------------------------------------------------------------


def _suggest(trial: Any, space: SearchSpace, chain_keys: list[str]) -> tuple[tuple[str, ...], dict]:
    from accel.passes.base import Choice, FloatRange, IntRange

    chain = space.chain_from_key(trial.suggest_categorical("chain", chain_keys))
    values: dict[str, Any] = {}
    for name in chain:
        for param, dom in space.passes[name].params.items():
            key = f"{name}.{param}"
            if isinstance(dom, Choice):
                values[key] = trial.suggest_categorical(key, list(dom.values))
            elif isinstance(dom, IntRange):
                values[key] = trial.suggest_int(key, dom.low, dom.high, log=dom.log)
            elif isinstance(dom, FloatRange):
                values[key] = round(trial.suggest_float(key, dom.low, dom.high, log=dom.log), 4)
    return chain, values


def _seed_params(
    space: SearchSpace, chain: Sequence[str], values: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Enqueued parameters of a seed: each searched parameter at ``values`` (an earlier
    search's, keyed ``pass.param``), else at the pass's default (when the default is in the
    domain), else the domain's first value."""
    from accel.passes.base import Choice

    params: dict[str, Any] = {"chain": SearchSpace.chain_key(chain)}
    values = values or {}
    for name in chain:
        p = space.passes[name]
        for param, dom in p.params.items():
            if f"{name}.{param}" in values:
                params[f"{name}.{param}"] = values[f"{name}.{param}"]
                continue
            default = p.defaults.get(param)
            if isinstance(dom, Choice):
                value = default if default in dom.values else dom.values[0]
            else:
                value = default if default is not None else dom.low
                value = min(max(value, dom.low), dom.high)
            params[f"{name}.{param}"] = value
    return params


def trial_spec(config: SearchConfig, number: int, steps: list[dict[str, Any]]) -> dict[str, Any]:
    out = Path(config.artifacts_dir or config.out_dir).resolve()
    cache_dir = Path(config.cache_dir).resolve() if config.cache_dir else out / "cache"
    return {
        "trial": number,
        "model": {
            "source": config.model,
            "input_spec": config.input_spec,
            "trust_pickle": config.trust_pickle,
        },
        "device": config.device,
        "seed": config.seed,
        "steps": steps,
        "gates": {
            "max_cosine_drop": config.max_cosine_drop,
            "max_accuracy_drop": config.max_accuracy_drop,
        },
        "benchmark": {
            "warmup": config.bench_warmup,
            "iters": config.bench_iters,
            "rounds": config.bench_rounds,
            "min_time_s": config.bench_min_time_s,
            "threads": config.bench_threads,
            "dims": dict(config.bench_dims),
            "concurrent": config.objective == "throughput",
            **generation_bench(config),
            # The original against itself tells a ratio objective nothing (1 by
            # definition) and costs the most: the slowest model, twice a round.
            **({"skip": True} if not steps and config.objective in UNTIMED_ORIGINAL else {}),
        },
        "data": dict(config.data),
        "cache": {
            "dir": str(cache_dir),
            "max_entries": config.cache_max_entries,
            "max_bytes": config.cache_max_bytes,
        },
        "out": str(out / "trials" / f"trial_{number:03d}"),
    }


def inspect_model(config: SearchConfig) -> tuple[str, frozenset[str], dict[str, str], int]:
    """The model's kind, layer types, the passes with nothing to do on it (their own
    ``preflight``, e.g. no BatchNorm to fold) and its parameter count: what the space and
    the seeds depend on."""
    from accel.errors import NotApplicable
    from accel.models import load_model
    from accel.passes import list_passes

    model = load_model(config.model, config.input_spec, trust_pickle=config.trust_pickle)
    not_applicable: dict[str, str] = {}
    for cls in list_passes():
        if cls.search is None or model.kind not in cls.requires.model_kinds:
            continue
        try:
            cls().preflight(model, cls.parse_config(dict(cls.search.fixed)))
        except NotApplicable as exc:
            not_applicable[cls.name] = str(exc)
        except Exception:  # noqa: BLE001 - a failing check is the trial's business
            log.debug("preflight of %s failed", cls.name, exc_info=True)
    return model.kind, model_layer_types(model.module), not_applicable, int(model.num_params or 0)


def run_search(
    config: SearchConfig,
    executor: Executor,
    *,
    on_trial: Callable[[TrialRecord], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    model_info: tuple[Any, ...] | None = None,
    priors: Sequence[Mapping[str, Any]] = (),
    started: float | None = None,
) -> SearchResult:
    """Search (see module docstring). ``on_trial`` is called when a trial is submitted
    (status ``running``) and when it ends; ``cancel()`` True stops after cancelling the
    running trials (finished ones are kept). ``priors``: the best recipes of earlier
    searches (accel.search.seeds.Prior as dicts), tried first for a similar model; the
    budget counts from ``started`` (monotonic; default: now), e.g. before an inspection."""
    config.validate()
    is_cancelled = cancel or (lambda: False)
    t0 = CLOCK() if started is None else started
    model_info = model_info or inspect_model(config)
    kind, layers, space = _search_space(config, model_info)
    space, settings = add_runtime_settings(space, config.objective, config.bench_threads)
    info = list(model_info)
    size = size_class(info[3] if len(info) > 3 else None)
    family = model_family(layers)
    seeds = _seeds(config, space, family, size, priors)
    study = _study(config, space, seeds)
    loop = _TrialLoop(config, space, study, executor, len(seeds), on_trial or (lambda t: None))
    status, reason = loop.run(is_cancelled, t0)
    space, sensitivity = loop.space, _sensitivity_summary(config, loop)
    trials = loop.trials
    owed = len(seeds) - loop.skipped_seeds  # seeds of a ruled-out pass are not owed
    status, reason, best, final, ok = _finish(
        config, executor, trials, (status, reason), owed, is_cancelled, t0
    )
    return SearchResult(
        status=status,
        config=config,
        trials=trials,
        front=pareto_front(ok),
        best=best,
        reason=reason,
        wall_s=CLOCK() - t0,
        space={
            **_space_facts(space, seeds),
            "family": family,
            "size_class": size,
            **({"sensitivity": sensitivity} if sensitivity is not None else {}),
            **({"runtime_settings": settings} if settings else {}),
            **({"ruled_out": dict(loop.ruled_out)} if loop.ruled_out else {}),
        },
        cache=loop.cache_total,
        model_kind=kind,
        final=final,
    )


def _seeds(
    config: SearchConfig,
    space: SearchSpace,
    family: str,
    size: str,
    priors: Sequence[Mapping[str, Any]],
) -> list[Seed]:
    """The chains tried first: the plan's seeds (hardware, family, earlier searches), the
    generation seeds for a decoder's objectives; the original alone without seeds."""
    if not config.use_seeds:
        return [Seed(())]
    return _objective_first(
        space,
        plan_seeds(space, family, priors=priors, size=size, objective=config.objective),
        generation_seeds(config),
    )


def _finish(
    config: SearchConfig,
    executor: Executor,
    trials: list[TrialRecord],
    outcome: tuple[str, str],
    num_seeds: int,
    is_cancelled: Callable[[], bool],
    t0: float,
) -> tuple[str, str, int | None, FinalTiming | None, dict[int, Any]]:
    """After the trials: the final side-by-side re-timing (unless cancelled) chooses the
    best, the executor closes, the verdict is given. (status, reason, best, final, the
    scores of the trials within the constraints)."""
    status, reason = outcome
    ok, best = _scores_and_best(config, trials)
    final = None
    if status != "cancelled":
        final = _final_retime(config, executor, trials, ok, is_cancelled, t0)
        if is_cancelled():
            status, reason = "cancelled", "cancelled by the user"
    executor.close()
    if final is not None and final.done:
        best = final.winner
    if status != "cancelled":
        status, reason = _verdict(config, trials, best, num_seeds, status, reason)
    return status, reason, best, final, ok


def final_candidates(
    config: SearchConfig, trials: Sequence[TrialRecord], ok: Mapping[int, Any]
) -> list[int]:
    """The trials the final re-timing times together: the top ``final_top_k`` by their own
    measurements among those within the constraints (status ok) with steps; none unless the
    objective is latency (a speedup) and at least two qualify."""
    if config.objective != "latency" or config.final_top_k < 2:
        return []
    ranked = sorted((n for n in ok if trials[n].chain), key=lambda n: (ok[n][0], n))
    top = ranked[: config.final_top_k]
    return top if len(top) >= 2 else []


def final_reserve_s(config: SearchConfig) -> float:
    """Seconds of the budget kept for the final re-timing (0 without a budget or top-k)."""
    if config.budget_s is None or config.objective != "latency" or config.final_top_k < 2:
        return 0.0
    return config.final_share * config.budget_s


def _final_limit_s(config: SearchConfig, t0: float) -> float | None:
    """Seconds the final re-timing may take (None: no budget): what is left of the budget,
    or the share kept for it if a trial that started before ran into it; never past the
    budget plus one trial timeout."""
    if config.budget_s is None:
        return None
    elapsed = CLOCK() - t0
    limit = max(config.budget_s - elapsed, final_reserve_s(config)) - WIND_DOWN_S
    if config.trial_timeout_s is not None:
        promise = config.budget_s + config.trial_timeout_s - elapsed - WIND_DOWN_S
        limit = min(limit, promise)
    return limit


def _final_retime(
    config: SearchConfig,
    executor: Executor,
    trials: list[TrialRecord],
    ok: Mapping[int, Any],
    is_cancelled: Callable[[], bool],
    t0: float,
) -> FinalTiming | None:
    """Time the top trials together with the original in one measurement (a job on the
    executor, accel.search.retime) within what is left of the budget; the winner is the
    fastest in it. Cut short, cancelled or failed: not done, no figure kept."""
    numbers = final_candidates(config, trials, ok)
    if not numbers:
        return None
    final = FinalTiming(trials=numbers)
    limit = _final_limit_s(config, t0)
    if limit is not None and limit < MIN_FINAL_S:
        final.reason = (
            f"not run: {max(limit, 0):.0f} s of the budget were left, it needs at least "
            f"{MIN_FINAL_S:.0f} s (give a larger --budget)"
        )
        return final
    if is_cancelled():
        final.reason = "not run: the search was cancelled"
        return final
    spec = trial_spec(config, len(trials), [])
    spec["out"] = str(Path(spec["out"]).with_name("final_retime"))
    spec["retime"] = [{"trial": n, "steps": trials[n].steps} for n in numbers]
    spec["time_limit_s"] = limit
    if limit is not None:
        spec["timeout_s"] = limit
    started = CLOCK()
    outcome = _wait(executor.submit(len(trials), spec), is_cancelled, limit)
    final.duration_s = CLOCK() - started
    final.run_id = outcome.get("run_id")
    res = outcome.get("result") or {}
    found = res.get("retime") if outcome.get("status") == "succeeded" else None
    if found is None or is_cancelled():
        why = outcome.get("error") or res.get("error") or outcome.get("status", "failed")
        final.reason = "cancelled by the user" if is_cancelled() else str(why)
        return final
    final.timings = {int(n): StepTiming.from_json(t) for n, t in found["timings"].items()}
    if len(final.timings) < 2:
        final.timings = {}
        final.reason = "fewer than two trials were timed; nothing to choose between"
        return final
    skipped = found.get("skipped") or {}
    final.reason = "; ".join(f"trial {n} left out: {why}" for n, why in skipped.items())
    final.winner = max(
        final.timings, key=lambda n: (final.timings[n].speedup or 0.0, -numbers.index(n))
    )
    final.done = True
    return final


def _objective_first(space: SearchSpace, seeds: list[Seed], first: tuple[Seed, ...]) -> list[Seed]:
    """The objective's own seeds (generation's) right after the original, then the rest."""
    valid = set(space.chains)
    known = {s.chain for s in seeds}
    extra = [s for s in first if s.chain in valid and (s.values or s.chain not in known)]
    return [*seeds[:1], *extra, *seeds[1:]]


def _scores_and_best(
    config: SearchConfig, trials: Sequence[TrialRecord]
) -> tuple[dict[int, Any], int | None]:
    """The objective vector of every finished trial, and the best trial with steps (the
    original model is the reference, not an answer)."""
    ok = {
        t.number: v
        for t in trials
        if t.status == "ok" and (v := objective_vector(config, t.metrics))
    }
    candidates = [n for n in ok if trials[n].chain]
    best = min(candidates, key=lambda n: (ok[n][0], n)) if candidates else None
    return ok, best


def _sensitivity_summary(config: SearchConfig, loop: _TrialLoop) -> dict[str, Any] | None:
    """The analysis behind the exclude sets (--allow sensitivity), or why it did not run."""
    if SENSITIVITY not in config.allow or loop.refined is not None:
        return loop.refined
    return {"reason": f"not run: the search ended after {len(loop.trials)} trial(s)"}


def _space_facts(space: Any, seeds: Sequence[Seed]) -> dict[str, Any]:
    """What the search space held, for the result's ``space`` summary."""
    return {
        "chains": len(space.chains),
        "passes": sorted(space.passes),
        "excluded": space.excluded,
        "seeds": [space.chain_key(sd.chain) for sd in seeds],
        "seed_origins": [sd.why for sd in seeds],
    }


def search_exclusions(config: SearchConfig) -> dict[str, str]:
    """Pass name -> why the search leaves it out. ``--passes`` is read here only: a pass named
    there is searched despite an advisory exclusion (generation-only on a forward objective,
    emulated bf16 on this CPU), never despite one its chains cannot be measured under (no KV
    cache for a generation objective)."""
    named = set(config.passes or ())
    advisory = {**generation_only_exclusions(config), **hardware_exclusions(config.device)}
    return {
        **objective_exclusions(config),
        **{k: v for k, v in advisory.items() if k not in named},
    }


def _search_space(
    config: SearchConfig, model_info: tuple[Any, ...]
) -> tuple[str, frozenset[str], SearchSpace]:
    """The model's kind and layer types and the space of chains for it (the exclude sets of
    --allow sensitivity come later, from ``_TrialLoop.refine``)."""
    kind, layers, *rest = model_info
    not_applicable: dict[str, str] = rest[0] if rest else {}
    excluded = search_exclusions(config)
    space = build_space(
        kind,
        config.device,
        layer_types=layers,
        allow=config.allow,
        include=config.passes,
        exclude=(*config.exclude, *not_applicable, *excluded),
        # the weight-changing steps the user allowed (prune, distill) come on top of
        # max_steps, so they stack onto the best full-length chains
        max_steps=config.max_steps + len({"prune", "distill"} & set(config.allow)),
    )
    if "bf16" not in set(config.passes or ()):
        excluded = {**excluded, **narrow_to_hardware(space, config.device)}
    for name, why in excluded.items():
        space.excluded[name] = why
    for name, why in not_applicable.items():
        space.excluded[name] = f"nothing to do on this model: {why}"
    return kind, layers, space


def _study(config: SearchConfig, space: SearchSpace, seeds: Sequence[Seed]) -> Any:
    """An Optuna study (TPE) over the objectives, with the seeds enqueued first."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = ["minimize", "minimize"] if config.objective == "size" else ["minimize"] * 3
    directions[0] = _PRIMARY[config.objective][1]
    sampler = optuna.samplers.TPESampler(seed=config.seed, n_startup_trials=4)
    study = optuna.create_study(directions=directions, sampler=sampler)
    for seed in seeds:
        study.enqueue_trial(_seed_params(space, seed.chain, seed.values), skip_if_exists=True)
    return study


class _TrialLoop:
    """Ask the study for a batch of trials (one per executor slot), run them, tell the
    outcomes; until cancelled, out of trials or budget, or out of new chains."""

    def __init__(
        self,
        config: SearchConfig,
        space: SearchSpace,
        study: Any,
        executor: Executor,
        n_seeds: int,
        notify: Callable[[TrialRecord], None],
    ) -> None:
        from optuna.trial import TrialState

        self.config, self.space, self.study, self.executor = config, space, study, executor
        self.n_seeds, self.notify, self.TrialState = n_seeds, notify, TrialState
        self.chain_keys = [space.chain_key(c) for c in space.chains]
        self.trials: list[TrialRecord] = []
        self.tried: dict[str, TrialRecord] = {}
        self.duplicates = 0
        # passes left out after their chains kept missing the parity budget (rule_out), and
        # the seeds never run because of it (they are not owed by the budget then)
        self.ruled_out: dict[str, str] = {}
        self.skipped_seeds = 0
        self.t0 = CLOCK()  # when the search's budget began (set by ``run``)
        self.cache_total = {"hits": 0, "misses": 0, "stored": 0, "evicted": 0, "reused_steps": 0}
        # --allow sensitivity: once refine_after trials (the first seeds) have run, the space
        # gets the analysis's exclude sets (same chains, more parameters); its summary.
        self.refine_after = min(n_seeds, SENSITIVITY_AFTER)
        self.refined: dict[str, Any] | None = None

    def run(self, is_cancelled: Callable[[], bool], t0: float) -> tuple[str, str]:
        """Status and reason of how the loop ended."""
        config = self.config
        self.t0 = t0
        while True:
            if is_cancelled():
                return "cancelled", "cancelled by the user"
            if config.max_trials is not None and len(self.trials) >= config.max_trials:
                return "finished", ""
            if config.budget_s is not None and config.budget_s - (CLOCK() - t0) <= self._kept():
                return "finished", ""
            if self._refine_now():
                self.space, self.refined = _exclude_sets(self.space, config, is_cancelled, t0)
                continue  # the budget is checked again
            batch = self._submit_batch()
            if not batch:
                left = f" but those with {', '.join(self.ruled_out)}" if self.ruled_out else ""
                return "finished", f"every chain in the space was tried{left}"
            for ot, rec, handle in batch:
                self._finish(ot, rec, _wait(handle, is_cancelled, config.trial_timeout_s))
            if is_cancelled():
                return "cancelled", "cancelled by the user"

    def _kept(self) -> float:
        """Seconds of the budget kept for the final re-timing: once there are two trials
        to re-time (before that, the trials may use all of it)."""
        ok = sum(1 for t in self.trials if t.status == "ok" and t.chain)
        return final_reserve_s(self.config) if ok >= 2 else 0.0

    def _refine_now(self) -> bool:
        return (
            SENSITIVITY in self.config.allow
            and self.refined is None
            and len(self.trials) >= self.refine_after
        )

    def _submit_batch(self) -> list[tuple[Any, TrialRecord, TrialHandle]]:
        """New chains for the free slots; a chain measured before is told again, not run."""
        config, space = self.config, self.space
        batch: list[tuple[Any, TrialRecord, TrialHandle]] = []
        want = self.executor.slots
        if config.max_trials is not None:
            want = min(want, config.max_trials - len(self.trials))
        while len(batch) < want and self.duplicates < MAX_DUPLICATES:
            ot = self.study.ask()
            chain, values = _suggest(ot, space, self.chain_keys)
            if holds_ruled_out(chain, self.ruled_out):  # told as pruned, nothing runs
                self.duplicates += 1
                self.skipped_seeds += ot.number < self.n_seeds
                self.study.tell(ot, state=self.TrialState.PRUNED)
                continue
            steps = steps_for(space, chain, values)
            key = repr((chain, steps))
            if key in self.tried:  # already measured: tell the same outcome, run nothing
                self.duplicates += 1
                _tell(self.study, ot, self.tried[key], config, self.TrialState)
                continue
            self.duplicates = 0
            origin = "seed" if ot.number < self.n_seeds else "optuna"
            rec = TrialRecord(len(self.trials), chain, steps, origin, status="running")
            self.tried[key] = rec
            self.trials.append(rec)
            spec = trial_spec(config, rec.number, steps)
            timeout_s = self._trial_timeout()
            if timeout_s is not None:
                spec["timeout_s"] = timeout_s
            batch.append((ot, rec, self.executor.submit(rec.number, spec)))
            self.notify(rec)
        return batch

    def _trial_timeout(self) -> float | None:
        """The trial timeout, cut so that a trial started late in the budget still ends
        with time to wind down inside budget + one trial timeout (the search's promise)."""
        config = self.config
        timeout_s = config.trial_timeout_s
        if timeout_s is None or config.budget_s is None:
            return timeout_s
        left = config.budget_s + timeout_s - (CLOCK() - self.t0) - WIND_DOWN_S
        return max(min(timeout_s, left), timeout_s / 2)

    def _finish(self, ot: Any, rec: TrialRecord, outcome: dict[str, Any]) -> None:
        _record(rec, outcome)
        trial_cache = (outcome.get("result") or {}).get("cache") or {}
        for k in self.cache_total:
            self.cache_total[k] += int(trial_cache.get(k) or 0)
        _tell(self.study, ot, rec, self.config, self.TrialState)
        self.notify(rec)
        new = rule_out(self.trials, self.config.max_cosine_drop, self.ruled_out)
        self.ruled_out.update(new)
        self.space.excluded.update(new)
        for name, why in new.items():
            log.info("search: %s %s", name, why)


def _verdict(
    config: SearchConfig,
    trials: list[TrialRecord],
    best: int | None,
    n_seeds: int,
    status: str,
    reason: str,
) -> tuple[str, str]:
    """A search that was not cancelled: no feasible trial, or too small a budget for the
    seeds, is said in the status and reason."""
    if best is None:
        status = "no_feasible"
        reason = _no_feasible_reason(config, trials)
    done_seeds = sum(1 for t in trials if t.origin == "seed" and t.status != "cancelled")
    if done_seeds < n_seeds and (config.max_trials is None or config.max_trials >= n_seeds):
        short = (
            f"the budget was too small for the seeds: {done_seeds} of {n_seeds} known-good "
            f"stacks ran; give a larger --budget"
        )
        reason = f"{reason}\n{short}" if reason else short
    return status, reason


def _exclude_sets(
    space: SearchSpace, config: SearchConfig, is_cancelled: Callable[[], bool], t0: float
) -> tuple[SearchSpace, dict[str, Any]]:
    """--allow sensitivity: exclude sets as a search dimension (accel.search.sensitivity_space);
    the analysis stops at cancel or at its deadline (``analysis_deadline``)."""
    from accel.search.sensitivity_space import add_exclude_sets, analysis_deadline

    deadline = analysis_deadline(config.budget_s, t0, CLOCK())

    def stop() -> bool:
        return is_cancelled() or (deadline is not None and CLOCK() > deadline)

    return add_exclude_sets(space, config, stop)


# Time kept, out of budget + one trial timeout, for the search to stop its last trial's
# worker, write its files and return.
WIND_DOWN_S = 5.0

# The final re-timing is not started with less of the budget left than this.
MIN_FINAL_S = 10.0

# A trial that outlives its timeout by this much is given up here, whatever its executor
# does (the pool and Ray stop it at its timeout; this holds the search's own promise).
OVERDUE_S = 30.0


def _wait(
    handle: TrialHandle, is_cancelled: Callable[[], bool], timeout_s: float | None = None
) -> dict[str, Any]:
    cancelled = False
    deadline = None if timeout_s is None else CLOCK() + timeout_s + OVERDUE_S
    while True:
        try:
            return handle.result(timeout=0.2)
        except TimeoutError:
            if is_cancelled() and not cancelled:
                cancelled = True
                handle.cancel()
            if deadline is not None and CLOCK() > deadline:
                handle.cancel()
                return {
                    "status": "timed_out",
                    "result": {},
                    "error": f"the trial ran past its timeout of {timeout_s:g} s",
                }


def _record(rec: TrialRecord, outcome: dict[str, Any]) -> None:
    res = outcome.get("result") or {}
    rec.run_id = outcome.get("run_id") or rec.run_id
    rec.run_dir = res.get("run_dir")
    rec.metrics = dict(res.get("metrics") or {})
    rec.timing = StepTiming.from_json(res["timing"]) if res.get("timing") else None
    rec.reused_steps = int(res.get("reused_steps") or 0)
    rec.duration_s = float(res.get("duration_s") or outcome.get("duration_s") or 0.0)
    status = outcome.get("status", "failed")
    if status == "succeeded":
        rec.status = res.get("trial_status", "ok")
        rec.gate = res.get("gate")
    else:
        rec.status = status if status in ("crashed", "timed_out", "cancelled") else "failed"
        rec.error = outcome.get("error") or res.get("error") or status


def _tell(study: Any, ot: Any, rec: TrialRecord, config: SearchConfig, TrialState: Any) -> None:
    values = objective_vector(config, rec.metrics) if rec.status == "ok" else None
    if values is not None:
        if _PRIMARY[config.objective][1] == "maximize":
            values = [-values[0], *values[1:]]
        study.tell(ot, values)
    elif rec.status == "gate_failed":
        study.tell(ot, state=TrialState.PRUNED)
    else:
        study.tell(ot, state=TrialState.FAIL)


def _no_feasible_reason(config: SearchConfig, trials: list[TrialRecord]) -> str:
    if not trials:
        return "no trial ran: the budget was too small for even the first trial"
    gated = sorted(
        (t for t in trials if t.status == "gate_failed"),
        key=lambda t: (t.metrics.get("cosine_drop") is None, t.metrics.get("cosine_drop") or 0),
    )
    lines = [
        f"no trial met the constraints (max cosine drop {config.max_cosine_drop}"
        + (f", max accuracy drop {config.max_accuracy_drop}" if config.max_accuracy_drop else "")
        + "); closest:"
    ]
    for t in gated[:3]:
        lines.append(f"  trial {t.number} {t.label}: {t.gate}")
    failed = [t for t in trials if t.status not in ("gate_failed", "ok")]
    for t in failed[:3]:
        lines.append(f"  trial {t.number} {t.label}: {t.status}: {t.error[:160]}")
    return "\n".join(lines)
