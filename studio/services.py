"""Services: the worker pool, the store and the controllers the panels call.

Every panel gets ``(state: AppState, services: Services, parent=None)``. Panels read
``state`` and call the controller methods here; results land in ``state`` (which
emits its change signals) and in the signals below. Everything heavy runs in
worker processes (``studio.workers``) or Python threads: no controller method
blocks the GUI thread.

Controllers:
- ``open_model(source, input_spec=None)``: job ``inspect`` -> ``state.set_model`` and
  ``state.set_graph``; failures -> ``state.modelFailed`` and ``jobFailed``.
- ``profile_current()``: job ``profile`` -> ``state.set_profile`` (also stored in the db).
- ``run_recipe(recipe=None)``: job ``run_recipe`` on ``state.recipe`` by default; the pool
  records it in the store; ``runQueued(job_id, run_id)`` then ``runFinished(job_id, outcome)``.
- ``export_onnx()``: job ``export_onnx`` of the current torch model (for Netron).
- ``cancel(job_id)``.

Signals of the pool itself (every job, every event) are on ``services.bridge``
(``studio.workers.qt_bridge.PoolBridge``).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from accel.events import Progress
from accel.job_specs import ExportOnnxJob, GraphDiffJob, InspectJob, JobParamsError, ProfileJob
from studio.state import AppState
from studio.usecases import Session, UnconfirmedCode, store_profile, typed_event
from studio.workers import JobOutcome, WorkerPool
from studio.workers.qt_bridge import PoolBridge

if TYPE_CHECKING:
    from studio.store.api import Store

log = logging.getLogger(__name__)


def _outcome_message(outcome: JobOutcome | None) -> str:
    if outcome is None:
        return "the job was cancelled before it started"
    msg = outcome.error or outcome.status
    if outcome.status == "crashed" and outcome.log_tail:
        msg += "\n\n" + "\n".join(outcome.log_tail.splitlines()[-8:])
    return msg


class Services(QObject):
    """Worker pool + store + controllers. Create one per window (tests create their own)."""

    modelOpened = Signal(str)  # source: state.model_info and state.graph are set
    profileReady = Signal()  # state.profile is set
    onnxExported = Signal(str)  # path of the ONNX export of the current model
    diffReady = Signal(object)  # {"graph", "diff", "step", "artifact"} of diff_run()
    runQueued = Signal(str, str)  # job_id, run_id ("" without a store)
    runFinished = Signal(str, object)  # job_id, JobOutcome
    jobFailed = Signal(str, str)  # job kind, message for the user
    jobProgress = Signal(str, str, float, str)  # job_id, kind, fraction, message
    busyChanged = Signal(int)  # jobs queued or running
    deployFinished = Signal(str, object, str)  # run_id, DeployResult.to_dict() or None, error
    # job_id, run_id, {"serve_test_id", "saved_to"?, "report"} or None, error ("" when stored)
    serveTestFinished = Signal(str, str, object, str)
    _cachedOpen = Signal(str, object)  # job_id, cached open result (from a reader thread)

    def __init__(
        self,
        state: AppState,
        *,
        db: str | None = None,
        pool: WorkerPool | None = None,
        repo: Store | None = None,
        open_store: bool = True,
        cpu_workers: int = 2,
        warm_worker: bool | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.state = state
        self.db = db
        self.repo: Store | None = repo
        if self.repo is None and open_store:
            try:
                from studio.store import Repository

                self.repo = Repository.open(db)
            except Exception as exc:  # the studio still opens models without a database
                log.exception("could not open the database %s", db)
                state.status.emit(f"database unavailable: {exc}")
        self._owns_pool = pool is None
        # No GPU detection in the GUI process: the pool's detect_gpus uses nvidia-smi only.
        # A job that hangs ends as timed_out after 4 hours at the latest (Cancel kills it sooner).
        # A warm worker (torch imported) serves model opens, graphs and profiles, so they do
        # not wait for a new process each; ACCEL_STUDIO_WARM_WORKER=0 turns it off.
        if warm_worker is None:
            warm_worker = os.environ.get("ACCEL_STUDIO_WARM_WORKER", "1") != "0"
        self.pool = pool or WorkerPool(
            self.repo, cpu_workers=cpu_workers, default_timeout_s=4 * 3600, warm=warm_worker
        )
        self.bridge = PoolBridge(self.pool, self)
        self.bridge.busyChanged.connect(self.busyChanged)
        self.bridge.jobEvent.connect(self._on_event)
        self.bridge.jobFinished.connect(self._on_finished)
        self._kinds: dict[str, str] = {}  # job_id -> controller ("open", "profile", ...)
        self._context: dict[str, dict[str, Any]] = {}
        self._latest: dict[str, str] = {}  # controller -> newest job id (older results dropped)
        # What the user allowed (unpickling, code to run) and the job specs that follow.
        self.session = Session()
        # Asked before a recipe's code runs: shows the references, returns the user's yes/no
        # (the main window sets a dialog; without one, unconfirmed code is refused).
        self.confirm_code: Any = None
        self._cachedOpen.connect(self._apply_cached_open)
        # Where run folders go; None: next to the database (see ``runs_root``). The main
        # window sets it from its settings ("Runs folder…").
        self.runs_dir: Path | None = None

    # -- facts for the status bar ---------------------------------------------------------
    @property
    def db_path(self) -> str:
        """The database file (or URL) in use; "" when there is none."""
        if self.repo is None:
            return ""
        try:
            from studio.store.db import sqlite_path

            p = sqlite_path(self.repo.url)
            return str(p) if p is not None else self.repo.url
        except Exception:
            return str(getattr(self.repo, "url", ""))

    @property
    def device(self) -> str:
        lanes = [lane.name for lane in self.pool.lanes]
        return ", ".join(lanes)

    @property
    def busy(self) -> int:
        return self.bridge.busy

    def data_dir(self) -> Path:
        try:
            from studio.store.db import data_dir

            d = Path(data_dir())
        except Exception:
            d = Path.home() / ".accel-studio"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def runs_root(self) -> Path:
        """The folder run artifacts go to: the chosen one, else ``runs/`` next to the
        database (``--db``) or in the user data folder; never the working directory."""
        if self.runs_dir is not None:
            return Path(self.runs_dir)
        db = self.db_path
        if db and "://" not in db and db != ":memory:":
            return Path(db).resolve().parent / "runs"
        return self.data_dir() / "runs"

    def new_run_dir(self, name: str) -> Path:
        import datetime as dt

        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-%f")
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]
        return self.runs_root() / f"{stamp}-{safe}"

    # -- controllers ----------------------------------------------------------------------
    def _submit(self, controller: str, kind: str, params: dict[str, Any], **kw: Any) -> str:
        handle = self.pool.submit(kind, params, **kw)
        self._kinds[handle.job_id] = controller
        self._latest[controller] = handle.job_id
        return handle.job_id

    def _spec(
        self, controller: str, cls: type[Any], source: str, input_spec: str | None, **fields: Any
    ) -> Any:
        """The job spec (``studio.usecases.model_job``), or None after telling the user why
        its parameters are bad (a malformed input spec, ...)."""
        try:
            return self.session.model_spec(cls, source, input_spec, **fields)
        except JobParamsError as exc:
            if controller == "open":
                self.state.modelFailed.emit(f"could not open {source}: {exc}")
            self.jobFailed.emit(controller, str(exc))
            self.state.status.emit(f"{controller} failed: {str(exc).splitlines()[0]}")
            return None

    def open_model(
        self, source: str, input_spec: str | None = None, *, trust_pickle: bool = False
    ) -> str | None:
        """Load ``source`` in a worker: model info + graph land in ``state``. Returns the job
        id (None when the parameters are bad: ``modelFailed`` and ``jobFailed`` say why).

        ``trust_pickle``: the user opted in to full unpickling of this file (kept for the
        later jobs on the same source)."""
        source = source.strip()
        self.session.opened(source, trust_pickle=trust_pickle)
        spec = self._spec("open", InspectJob, source, input_spec)
        if spec is None:
            return None
        job_id = self._submit("open", "inspect", spec.to_params(), device="cpu", priority=10)
        self._context[job_id] = {"source": source, "input_spec": input_spec}
        self.state.modelLoading.emit(source)
        self.state.status.emit(f"opening {source}…")
        self._read_graph_cache(job_id, source, input_spec)
        return job_id

    # -- the graph cache: a model opened before shows at once while the live load runs ----
    def _read_graph_cache(self, job_id: str, source: str, input_spec: str | None) -> None:
        cache = GraphCache(self.data_dir() / "graph-cache")

        def work() -> None:
            hit = cache.get(source, input_spec)
            if hit is not None:
                self._cachedOpen.emit(job_id, hit)

        threading.Thread(target=work, name="graph-cache-read", daemon=True).start()

    def _apply_cached_open(self, job_id: str, hit: dict[str, Any]) -> None:
        ctx = self._context.get(job_id)
        if ctx is None or self._latest.get("open") != job_id:
            return  # the live result came first, or another model was asked for since
        info = dict(hit["info"], cached=True)
        source = ctx["source"]
        self.state.set_model(source, info, info.get("input_spec") or ctx.get("input_spec"))
        self.state.set_graph(hit["graph"])
        ctx["cached"] = hit
        self.modelOpened.emit(source)
        self.state.status.emit(f"opened {source} (from the graph cache; checking it…)")

    def profile_current(self, **profile_kwargs: Any) -> str | None:
        """Profile the current model in a worker; the result lands in ``state.profile``."""
        st = self.state
        if not st.model_source:
            self.jobFailed.emit("profile", "open a model first")
            return None
        trace = self.data_dir() / "traces" / "last_profile_trace.json"
        trace.parent.mkdir(parents=True, exist_ok=True)
        settings = {"trace_path": str(trace), **profile_kwargs}
        spec = self._spec("profile", ProfileJob, st.model_source, st.input_spec, **settings)
        if spec is None:
            return None
        job_id = self._submit("profile", "profile", spec.to_params(), device="cpu", priority=5)
        self._context[job_id] = {"source": st.model_source, "input_spec": st.input_spec}
        st.status.emit(f"profiling {st.model_source}…")
        return job_id

    def run_recipe(self, recipe: Any = None, **submit_kwargs: Any) -> str | None:
        """Run ``recipe`` (default: ``state.recipe``) in a worker; the pool records it.

        Code the recipe names (a factory, data or metric function) runs only if the user
        opened it as the model or confirms it (``confirm_code``); else None, nothing runs."""
        recipe = recipe if recipe is not None else self.state.recipe
        data = recipe.to_dict() if hasattr(recipe, "to_dict") else dict(recipe)
        source = (data.get("model") or {}).get("source") or self.state.model_source
        out = str(self.new_run_dir(str(data.get("name") or "recipe")))
        unconfirmed = self.session.unconfirmed_code(data)
        if unconfirmed and self.confirm_code is not None and self.confirm_code(unconfirmed):
            self.session.confirm(unconfirmed)
        try:
            spec = self.session.run_spec(data, out=out, source=source)
        except UnconfirmedCode as exc:
            self.jobFailed.emit("run", str(exc))
            return None
        handle = self.pool.submit(
            "run_recipe",
            spec.to_params(),
            model_source=source,
            recipe=data,
            name=str(data.get("name") or ""),
            **submit_kwargs,
        )
        self._kinds[handle.job_id] = "run"
        self.runQueued.emit(handle.job_id, handle.run_id or "")
        if handle.run_id:
            self.state.current_run_id = handle.run_id
            self.state.currentRunChanged.emit(handle.run_id)
        self.state.runsChanged.emit()
        self.state.status.emit(f"running recipe {data.get('name') or ''}…")
        return handle.job_id

    def export_onnx(self) -> str | None:
        """Export the current torch model to ONNX in a worker (for Netron)."""
        st = self.state
        if not st.model_source:
            return None
        out = self.export_path()
        out.parent.mkdir(parents=True, exist_ok=True)
        spec = self._spec("export", ExportOnnxJob, st.model_source, st.input_spec, out=str(out))
        if spec is None:
            return None
        job_id = self._submit("export", "export_onnx", spec.to_params(), device="cpu")
        self._context[job_id] = {"source": st.model_source}
        st.status.emit("exporting to ONNX…")
        return job_id

    def diff_steps(self, run_id: str | None = None) -> list[tuple[int, str]]:
        """``(step index, "2. bf16")`` for the steps of run ``run_id`` (default: the current
        run) that saved a model, i.e. the steps the graph diff can compare with."""
        from accel.graph.layer_parity import saved_step_models

        run_id = run_id or self.state.current_run_id
        if not run_id or self.repo is None:
            return []
        try:
            run_dir = self.repo.get_run(run_id).run_dir
        except Exception:  # noqa: BLE001 - a deleted run: nothing to pick
            return []
        if not run_dir or not Path(run_dir).is_dir():
            return []
        return [(i, f"{i + 1}. {name}") for i, name, _ in saved_step_models(run_dir)]

    def diff_run(self, run_id: str | None = None, step_index: int | None = None) -> str | None:
        """Diff the original graph against the model saved by step ``step_index`` (default:
        the last step that saved one) of run ``run_id`` (default: ``state.current_run_id``)
        in a worker; the result comes with ``diffReady``."""
        st = self.state
        run_id = run_id or st.current_run_id
        if not run_id or self.repo is None or not st.model_source:
            self.jobFailed.emit(
                "diff", "run a recipe first: the diff compares a run's step with the original"
            )
            return None
        try:
            run_dir = self.repo.get_run(run_id).run_dir
        except Exception as exc:
            self.jobFailed.emit("diff", f"run {run_id} not found: {exc}")
            return None
        if not run_dir:
            self.jobFailed.emit("diff", "this run has no run folder (it did not start)")
            return None
        spec = self._spec(
            "diff",
            GraphDiffJob,
            st.model_source,
            st.input_spec,
            run_dir=str(run_dir),
            step_index=None if step_index is None else int(step_index),
        )
        if spec is None:
            return None
        job_id = self._submit("diff", "graph_diff", spec.to_params(), device="cpu", priority=5)
        self._context[job_id] = {"source": st.model_source, "run_id": run_id}
        st.status.emit("comparing graphs…")
        return job_id

    def deploy_triton(self, run_id: str, out: str, *, force: bool = False) -> None:
        """Write a Triton model repository for run ``run_id`` into ``out`` on a thread (it
        loads the model and measures a batch sweep); ``deployFinished`` brings the result."""
        repo = self.repo
        if repo is None:
            self.deployFinished.emit(run_id, None, "no database: the run cannot be looked up")
            return

        def work() -> None:
            from accel.deploy.triton import write_repository
            from studio.commands.deploy import run_artifact

            try:
                detail, art, spec = run_artifact(repo, run_id)
                device = detail.run.device if detail.run.device.startswith("cuda") else "cpu"
                res = write_repository(art, spec, out, device=device, force=force)
            except Exception as exc:  # noqa: BLE001 - shown to the user as is
                self.deployFinished.emit(run_id, None, str(exc))
                return
            self.deployFinished.emit(run_id, {**res.to_dict(), "artifact": art}, "")

        threading.Thread(target=work, name="deploy-triton", daemon=True).start()
        self.state.status.emit("writing the Triton model repository (measuring a batch sweep)…")

    def serve_test(self, run_id: str, **options: Any) -> str:
        """Serve-test run ``run_id`` in a worker (PyTriton on loopback; ``options``: clients,
        batches, duration_s, max_requests of ``studio.serve_test.job_params``). Progress
        comes as ``jobProgress``; the result is stored like the CLI's and announced by
        ``serveTestFinished``. Raises CliError when the run cannot be served."""
        from studio.serve_test import job_params

        params, art = job_params(self.repo, run_id, **options)
        job_id = self._submit("serve", "serve_test", params, device="cpu")
        self._context[job_id] = {"run_id": params["run_id"], "artifact": art}
        self.state.status.emit("serve test: batch sweep, then Triton on 127.0.0.1…")
        return job_id

    def _store_serve_test(self, job_id: str, ctx: dict[str, Any], result: dict) -> None:
        def work() -> None:
            from studio.serve_test import store_result

            try:
                info = store_result(self.repo, ctx["run_id"], result, ctx["artifact"])
            except Exception as exc:  # noqa: BLE001 - shown to the user as is
                self.serveTestFinished.emit(job_id, ctx["run_id"], None, f"not stored: {exc}")
                return
            self.serveTestFinished.emit(job_id, ctx["run_id"], {**info, "report": result}, "")

        threading.Thread(target=work, name="serve-test-store", daemon=True).start()

    def export_path(self) -> Path:
        """Where the ONNX export of the current model goes (named by its content hash, so
        an export made in an earlier session is found again and never shown stale)."""
        st = self.state
        digest = str((st.model_info or {}).get("content_hash") or "")[:12]
        name = _safe_name(st.model_source or "model") + (f"-{digest}" if digest else "")
        # One folder per export: the pass may write external data next to the file.
        return self.data_dir() / "exports" / name / "model.onnx"

    def cancel(self, job_id: str) -> None:
        self.pool.cancel(job_id)

    # -- results --------------------------------------------------------------------------
    def _on_event(self, job_id: str, event: dict) -> None:
        kind = self._kinds.get(job_id)
        if kind is None:
            return
        typed = typed_event(event)
        if isinstance(typed, Progress):
            self.jobProgress.emit(job_id, kind, float(typed.fraction or 0.0), typed.message or "")
        if kind == "run":
            self.state.runsChanged.emit()

    def _on_finished(self, job_id: str, outcome: JobOutcome | None) -> None:
        kind = self._kinds.pop(job_id, None)
        ctx = self._context.pop(job_id, {})
        if kind is None:
            return
        if kind == "run":
            self.runFinished.emit(job_id, outcome)
            self.state.runsChanged.emit()
            status = outcome.status if outcome else "cancelled"
            self.state.status.emit(f"run {status}")
            return
        if kind == "serve":  # every serve test is kept, also when another one started since
            if outcome is not None and outcome.ok:
                self._store_serve_test(job_id, ctx, outcome.result)
            else:
                msg = _outcome_message(outcome)
                self.serveTestFinished.emit(job_id, ctx.get("run_id", ""), None, msg)
            return
        if self._latest.get(kind) != job_id:
            return  # a newer request of the same kind superseded this one
        if outcome is None or not outcome.ok:
            msg = _outcome_message(outcome)
            if kind == "open" and ctx.get("cached"):
                # The model no longer loads: the cached graph must not stay on screen.
                GraphCache(self.data_dir() / "graph-cache").drop(
                    ctx["source"], ctx.get("input_spec")
                )
                self.state.set_graph(None)
            if kind == "open":
                self.state.modelFailed.emit(f"could not open {ctx.get('source')}: {msg}")
            self.jobFailed.emit(kind, msg)
            self.state.status.emit(f"{kind} failed: {msg.splitlines()[0] if msg else ''}")
            return
        result = outcome.result
        if kind == "open":
            self._apply_open(ctx, result)
        elif kind == "profile":
            if ctx.get("source") != self.state.model_source:
                return  # the model changed while profiling
            from accel.jobs import ProfileResult

            profiled = ProfileResult.from_dict(result)
            prof = profiled.profile
            self.state.set_profile(prof)
            self.profileReady.emit()
            self.state.status.emit(
                f"profiled {ctx.get('source')}: {prof.total_ms:.2f} ms per forward"
            )
            self._record_profile(profiled)
        elif kind == "diff":
            if ctx.get("source") == self.state.model_source:
                self.diffReady.emit(dict(result, run_id=ctx.get("run_id")))
        elif kind == "export":
            path = str(result.get("path") or "")
            self.state.model_info = {**self.state.model_info, "onnx_export": path}
            self.onnxExported.emit(path)
            self.state.status.emit(f"exported {path}")

    def _apply_open(self, ctx: dict[str, Any], result: dict[str, Any]) -> None:
        from accel.graph import Graph

        info = dict(result.get("info") or {})
        if result.get("graph_error"):
            info["graph_error"] = result["graph_error"]
        source = ctx["source"]
        cached = ctx.get("cached")
        if result.get("graph"):
            cache = GraphCache(self.data_dir() / "graph-cache")
            spec = ctx.get("input_spec")
            threading.Thread(
                target=cache.put, args=(source, spec, result), name="graph-cache-write", daemon=True
            ).start()
        if (
            cached is not None
            and info.get("content_hash")
            and cached["info"].get("content_hash") == info.get("content_hash")
            and cached["raw_graph"] == result.get("graph")
        ):
            # The cached graph on screen is the live one: keep it (and any profile since).
            self.state.model_info = {**info, "cached": False}
            self.state.status.emit(f"opened {source}")
            return
        self.state.set_model(source, info, info.get("input_spec") or ctx.get("input_spec"))
        graph = result.get("graph")
        self.state.set_graph(Graph.from_dict(graph) if graph else None)
        self.modelOpened.emit(source)
        self.state.status.emit(f"opened {source}")

    def _record_profile(self, profiled: Any) -> None:
        repo = self.repo
        if repo is None:
            return

        def work() -> None:
            try:
                store_profile(repo, profiled)
            except Exception:
                log.exception("could not store the profile")

        # SQLite writes can wait on a busy lock: never on the GUI thread.
        threading.Thread(target=work, name="record-profile", daemon=True).start()

    # -- lifetime -------------------------------------------------------------------------
    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel running jobs, stop the pool (when it is ours) and close the store."""
        self.bridge.close()
        if self._owns_pool:
            self.pool.shutdown(cancel=True, timeout=timeout)
        if self.repo is not None:
            self.repo.close()


class GraphCache:
    """Open results (model info + graph) of models opened before, one JSON file each, keyed
    by source, input spec and (for files) size and modification time. A hit is shown while
    the live load runs; the live result replaces it unless its content hash and graph are
    the same. Reads and writes run off the GUI thread."""

    VERSION = 1

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, source: str, input_spec: str | None) -> Path:
        import hashlib

        key = f"{self.VERSION}|{source}|{input_spec or ''}"
        path = Path(source.split("@", 1)[0].rsplit(":", 1)[0] if ":" in source else source)
        if not source.startswith("zoo:") and path.is_file():
            st = path.stat()
            key += f"|{st.st_size}|{st.st_mtime_ns}"
        return self.folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def get(self, source: str, input_spec: str | None) -> dict[str, Any] | None:
        import json

        from accel.graph import Graph

        path = self._path(source, input_spec)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("source") != source or not data.get("graph"):
                return None
            return {
                "info": dict(data["info"]),
                "raw_graph": data["graph"],
                "graph": Graph.from_dict(data["graph"]),
            }
        except FileNotFoundError:
            return None
        except Exception:  # noqa: BLE001 - a damaged cache file is dropped, never fatal
            log.warning("dropping the unreadable graph cache file %s", path)
            path.unlink(missing_ok=True)
            return None

    def put(self, source: str, input_spec: str | None, result: dict[str, Any]) -> None:
        import json
        import tempfile

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self._path(source, input_spec)
            data = {"source": source, "info": result.get("info") or {}, "graph": result["graph"]}
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, separators=(",", ":"))
            os.replace(tmp, path)
        except Exception:  # noqa: BLE001 - the cache is an optimisation
            log.warning("could not write the graph cache for %s", source, exc_info=True)

    def drop(self, source: str, input_spec: str | None) -> None:
        try:
            self._path(source, input_spec).unlink(missing_ok=True)
        except OSError:
            pass


def _safe_name(source: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "_" for c in source)
    return keep.strip("._")[-80:] or "model"
