"""`studio optimize` and the Optimize dialog share this: run a recipe search with trials in
the local worker pool or on a Ray cluster, record every trial as a run (the studio is the
only writer of the store), and write the results (best.yaml, search.json, best.py).

Locally, trials run in worker processes: on a GPU machine one per GPU lane; on the CPU one
at a time, because trials time themselves and must not disturb each other's measurements.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.jobs import SEARCH_TRIAL
from accel.search import SearchConfig, SearchResult, TrialRecord, run_search, trial_recipe

if TYPE_CHECKING:
    from studio.store.api import Store
    from studio.workers.pool import WorkerPool

log = logging.getLogger(__name__)

SEARCH_TAG = "search"


def search_tag(search_id: str) -> str:
    return f"search:{search_id[:12]}"


def _trial_name(search_id: str, number: int, label: str) -> str:
    return f"search {search_id[:8]} #{number} {label}"[:200]


def _spec_label(spec: dict[str, Any]) -> str:
    """A job's label: its chain, or the final re-timing with the trials it times."""
    if spec.get("retime") is not None:
        trials = ", ".join(str(c["trial"]) for c in spec["retime"])
        return f"final side-by-side re-timing of trials {trials}"
    return "+".join(s["pass"] for s in spec["steps"]) or "original"


def _spec_recipe(config: SearchConfig, spec: dict[str, Any]) -> dict[str, Any]:
    rec = TrialRecord(spec["trial"], tuple(s["pass"] for s in spec["steps"]), spec["steps"], "")
    if spec.get("retime") is not None:
        return trial_recipe(config, rec, name=f"search {_spec_label(spec)}")
    return trial_recipe(config, rec, name=f"search trial {rec.number}: {rec.label}")


class _PoolHandle:
    def __init__(self, handle: Any) -> None:
        self._h = handle

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        o = self._h.wait(timeout)  # TimeoutError while running
        return {"status": o.status, "result": o.result, "error": o.error, "run_id": o.run_id}

    def cancel(self) -> None:
        self._h.cancel("the search was cancelled")


class PoolExecutor:
    """Trials as ``search_trial`` jobs in the worker pool, each recorded as a run."""

    def __init__(self, pool: WorkerPool, config: SearchConfig, search_id: str) -> None:
        self.pool = pool
        self.config = config
        self.search_id = search_id
        cuda = config.device.startswith("cuda")
        self.slots = (
            max(1, sum(1 for ln in pool.lanes if ln.name.startswith("cuda"))) if cuda else 1
        )

    def submit(self, number: int, spec: dict[str, Any]) -> _PoolHandle:
        label = _spec_label(spec)
        h = self.pool.submit(
            SEARCH_TRIAL.kind,
            spec,
            device=self.config.device,
            timeout_s=spec.get("timeout_s"),
            record=True,
            model_source=self.config.model,
            recipe=_spec_recipe(self.config, spec),
            name=_trial_name(self.search_id, number, label),
            tags=[SEARCH_TAG, search_tag(self.search_id)],
        )
        return _PoolHandle(h)

    def close(self) -> None:
        pass


class RecordingExecutor:
    """Wraps an executor whose results carry their events (Ray): records each finished trial
    as a run in the store, from this process."""

    def __init__(
        self, inner: Any, repo: Store | None, config: SearchConfig, search_id: str
    ) -> None:
        self.inner = inner
        self.repo = repo
        self.config = config
        self.search_id = search_id
        self.slots = inner.slots

    def submit(self, number: int, spec: dict[str, Any]) -> Any:
        handle = self.inner.submit(number, spec)
        outer = self

        class _H:
            def result(self, timeout: float | None = None) -> dict[str, Any]:
                out = handle.result(timeout)
                out["run_id"] = outer._record(number, spec, out)
                return out

            def cancel(self) -> None:
                handle.cancel()

        return _H()

    def _record(self, number: int, spec: dict[str, Any], out: dict[str, Any]) -> str | None:
        if self.repo is None:
            return None
        label = _spec_label(spec)
        try:
            run = self.repo.create_run(
                model_source=self.config.model,
                recipe=_spec_recipe(self.config, spec),
                kind=SEARCH_TRIAL.kind,
                device=self.config.device,
                tags=[SEARCH_TAG, search_tag(self.search_id), "ray"],
                name=_trial_name(self.search_id, number, label),
                notes=f"ran on {out.get('node', '?')}",
                status="running",
            )
            for event in out.get("events") or []:
                self.repo.record_event(run.id, event)
            status = out.get("status", "failed")
            if status not in ("succeeded", "failed", "cancelled", "crashed", "timed_out"):
                status = "failed"
            self.repo.set_status(run.id, status, error=out.get("error") or None)
            return run.id
        except Exception:  # a store problem must not stop the search
            log.exception("could not record trial %d", number)
            return None

    def close(self) -> None:
        self.inner.close()


@dataclass
class OptimizeOutcome:
    search_id: str
    result: SearchResult
    files: dict[str, str] = field(default_factory=dict)
    where: str = "local"


def make_executor(
    config: SearchConfig,
    search_id: str,
    *,
    repo: Store | None,
    cluster: str | None,
    pool: WorkerPool | None,
) -> tuple[Any, Callable[[], None], str]:
    """(executor, cleanup, description of where trials run)."""
    if cluster:
        from accel.search.ray_cluster import RayExecutor

        ray_exec = RayExecutor(cluster, device=config.device, num_cpus=config.bench_threads or 1)
        where = (
            f"Ray cluster {ray_exec.address}"
            f"{' (--cluster auto)' if cluster == 'auto' else ''} ({ray_exec.nodes} node(s), "
            f"{', '.join(f'{int(v)} {k}' for k, v in ray_exec.resources.items())})"
        )
        return RecordingExecutor(ray_exec, repo, config, search_id), lambda: None, where
    own = pool is None
    if pool is None:
        from studio.workers import WorkerPool

        pool = WorkerPool(repo, cpu_workers=1, devices=[] if config.device == "cpu" else None)
    executor = PoolExecutor(pool, config, search_id)

    def cleanup() -> None:
        if own:
            pool.shutdown(cancel=True, timeout=15)

    lanes = ", ".join(ln.name for ln in pool.lanes)
    return executor, cleanup, f"local worker pool ({lanes}; {executor.slots} trial(s) at a time)"


def optimize(
    config: SearchConfig,
    *,
    repo: Store | None = None,
    cluster: str | None = None,
    pool: WorkerPool | None = None,
    on_trial: Callable[[TrialRecord], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    script: bool = False,
    search_id: str | None = None,
    on_start: Callable[[str, str], None] | None = None,
    on_inspected: Callable[[], None] | None = None,
) -> OptimizeOutcome:
    """Run a search and write its files to ``config.out_dir``. ``on_start(search_id,
    where)`` is called once trials can start, ``on_inspected()`` before any worker."""
    from accel.search.engine import inspect_model

    started = time.monotonic()  # the budget counts the model's inspection too
    config.validate()
    search_id = search_id or uuid.uuid4().hex
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_info = inspect_model(config)  # a bad model fails here, before any worker starts
    if on_inspected is not None:
        on_inspected()
    executor, cleanup, where = make_executor(
        config, search_id, repo=repo, cluster=cluster, pool=pool
    )
    if repo is not None:
        _record_start(repo, config, search_id, where, out)
    if on_start is not None:
        on_start(search_id, where)

    priors = _priors(repo)

    try:
        result = run_search(
            config,
            executor,
            on_trial=_trial_recorder(repo, search_id, on_trial),
            cancel=cancel,
            model_info=model_info,
            priors=priors,
            started=started,
        )
    except BaseException as exc:
        if repo is not None:
            repo.finish_search(search_id, "failed", {"reason": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        cleanup()
    if repo is not None:
        # the final re-timing's run (tagged with the search, not counted as a trial) is
        # named in the summary's ``final.run_id``
        repo.finish_search(search_id, result.status, _summary(result))
    files = write_outputs(result, out, search_id=search_id, where=where, script=script)
    return OptimizeOutcome(search_id, result, files, where)


def _trial_recorder(
    repo: Store | None, search_id: str, on_trial: Callable[[TrialRecord], None] | None
) -> Callable[[TrialRecord], None]:
    """What run_search calls with each trial: a finished trial's run is attached to the
    search in the store (a store problem is logged, never stops the search), then
    ``on_trial``."""

    def trial_done(t: TrialRecord) -> None:
        if repo is not None and t.status != "running" and t.run_id:
            try:
                repo.add_search_trial(search_id, t.run_id)
            except Exception:  # a store problem must not stop the search
                log.exception("could not attach run %s to search %s", t.run_id, search_id)
        if on_trial is not None:
            on_trial(t)

    return trial_done


def _record_start(repo: Store, config: SearchConfig, search_id: str, where: str, out: Path) -> None:
    """The search's row, once searches an earlier process left running are marked."""
    repo.recover_searches()
    repo.create_search(
        search_id=search_id,
        model_source=config.model,
        device=config.device,
        objective=config.objective,
        config=config.to_dict(),
        runs_on=where,
        out_dir=str(out.resolve()),
        name=f"optimize {config.model}",
    )


def _summary(result: SearchResult) -> dict[str, Any]:
    """What the store keeps of a finished search: the result without its trials and config
    (those are runs and the row's own column), the trials' run ids, the prior it leaves."""
    summary = result.to_dict()
    summary.pop("trials")
    summary.pop("config")
    summary["trial_runs"] = {str(t.number): t.run_id for t in result.trials}
    prior = prior_of(result)
    if prior is not None:
        summary["prior"] = prior
    return summary


def _priors(repo: Store | None) -> list[dict[str, Any]]:
    """Earlier searches' best recipes from the store (plain dicts for accel's seeds)."""
    if repo is None:
        return []
    try:
        return repo.search_priors()
    except Exception:  # a store problem must not stop the search
        log.exception("could not read earlier searches; seeding by rules only")
        return []


def prior_of(result: SearchResult) -> dict[str, Any] | None:
    """What the next search for a similar model learns from this one
    (accel.search.seeds.Prior as a dict): the best trial's steps, its model's family and
    size class, the device and CPU, and its primary objective value."""
    from accel.hardware import cpu_features

    if result.best is None or result.status != "finished":
        return None
    best = result.trial(result.best)
    key = {"latency": "speedup", "throughput": "throughput"}.get(result.config.objective)
    score = best.metrics.get(key) if key else None
    timing = result.best_timing()
    if key == "speedup" and timing is not None and timing.speedup is not None:
        score = timing.speedup  # the final side-by-side figure where it chose the best
    return {
        "family": result.space.get("family", ""),
        "size_class": result.space.get("size_class", ""),
        "device": result.config.device,
        "cpu": cpu_features().name if not result.config.device.startswith("cuda") else "",
        "objective": result.config.objective,
        "score": score,
        "steps": [dict(s) for s in best.steps],
    }


def write_outputs(
    result: SearchResult, out: Path, *, search_id: str, where: str, script: bool = False
) -> dict[str, str]:
    """search.json always; best.yaml (and best.py with ``script``) when a best was found."""
    from accel.recipe import load_recipe, save_recipe

    files: dict[str, str] = {}
    data = result.to_dict()
    data["search_id"] = search_id
    data["where"] = where
    p = out / "search.json"
    p.write_text(json.dumps(data, indent=2, default=str))
    files["search"] = str(p)
    if result.best is not None:
        recipe = load_recipe(result.recipe_for(result.best))
        files["best"] = str(save_recipe(recipe, out / "best.yaml"))
        if script:
            from accel.codegen import recipe_to_script

            path = out / "best.py"
            path.write_text(recipe_to_script(recipe), encoding="utf-8")
            files["script"] = str(path)
    return files


class SearchCancelled(Exception):
    """The search was cancelled before it started a worker or stored anything."""


class SearchThread:
    """Runs ``optimize`` on a background thread (the GUI and the CLI's Ctrl-C handling)."""

    def __init__(
        self,
        config: SearchConfig,
        on_done: Callable[[SearchThread], None] | None = None,
        **kwargs: Any,
    ) -> None:
        self.on_done = on_done
        self.cancel_event = threading.Event()
        self.outcome: OptimizeOutcome | None = None
        self.error: BaseException | None = None
        self._kwargs = kwargs
        self._config = config
        # Cleared once the model was inspected: until then the search has started no worker
        # and stored nothing, so a cancelled CLI need not wait for the inspection to end.
        self.inspecting = True
        self.thread = threading.Thread(target=self._run, name="search", daemon=True)
        # Set when the search ended. Waiting on this, never on Thread.join: a Ctrl-C that
        # interrupts Thread.join on Python 3.11 leaves the thread marked as stopped while it
        # still runs (CPython's bpo-45274 handling), and the search looked finished with no
        # outcome.
        self.done = threading.Event()

    def start(self) -> SearchThread:
        self.thread.start()
        return self

    def cancel(self) -> None:
        self.cancel_event.set()

    def _run(self) -> None:
        try:
            self.outcome = optimize(
                self._config,
                cancel=self.cancel_event.is_set,
                on_inspected=self._inspected,
                **self._kwargs,
            )
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
            self.error = exc
        finally:
            self.done.set()
        if self.on_done is not None:
            self.on_done(self)

    def _inspected(self) -> None:
        self.inspecting = False
        if self.cancel_event.is_set():  # cancelled during the inspection: start nothing
            raise SearchCancelled("the search was cancelled before any trial started")

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds; True once the search has ended."""
        return self.done.wait(timeout)
