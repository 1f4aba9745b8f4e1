"""Opening a model: the ``inspect`` job, with the graph cache shown while it runs.

``open_model(source, input_spec)`` loads the model in a worker; its info and graph land in
``state`` (``state.set_model``, ``state.set_graph``) and ``modelOpened`` says so. A model
opened before shows at once from the graph cache; the live result replaces it unless its
content hash and graph are the same, and a model that no longer loads drops the cached
graph from the screen. Failures: ``state.modelFailed`` and ``jobFailed("open", msg)``.
"""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import Signal

from accel.job_specs import InspectJob
from studio.controllers.base import JobController
from studio.graph_cache import GraphCache


class ModelController(JobController):
    """The Open action (see the module docstring)."""

    name = "open"
    modelOpened = Signal(str)  # source: state.model_info and state.graph are set
    _cachedOpen = Signal(str, object)  # job_id, cached open result (from a reader thread)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cachedOpen.connect(self._apply_cached_open)

    def cache(self) -> GraphCache:
        return GraphCache(self.ctx.data_dir() / "graph-cache")

    def open_model(
        self, source: str, input_spec: str | None = None, *, trust_pickle: bool = False
    ) -> str | None:
        """Load ``source`` in a worker. Returns the job id (None when the parameters are bad:
        ``modelFailed`` and ``jobFailed`` say why). ``trust_pickle``: the user opted in to
        full unpickling of this file (kept for the later jobs on the same source)."""
        source = source.strip()
        self.ctx.session.opened(source, trust_pickle=trust_pickle)
        spec = self.spec(InspectJob, source, input_spec)
        if spec is None:
            return None
        context = {"source": source, "input_spec": input_spec}
        job_id = self.submit(spec, context, device="cpu", priority=10).job_id
        self.state.modelLoading.emit(source)
        self.state.status.emit(f"opening {source}…")
        self._read_graph_cache(job_id, source, input_spec)
        return job_id

    def refused(self, source: str, message: str) -> None:
        self.state.modelFailed.emit(f"could not open {source}: {message}")
        super().refused(source, message)

    def _read_graph_cache(self, job_id: str, source: str, input_spec: str | None) -> None:
        cache = self.cache()

        def work() -> None:
            hit = cache.get(source, input_spec)
            if hit is not None:
                self._cachedOpen.emit(job_id, hit)

        threading.Thread(target=work, name="graph-cache-read", daemon=True).start()

    def _apply_cached_open(self, job_id: str, hit: dict[str, Any]) -> None:
        ctx = self.context.get(job_id)
        if ctx is None or self.latest != job_id:
            return  # the live result came first, or another model was asked for since
        info = dict(hit["info"], cached=True)
        source = ctx["source"]
        self.state.set_model(source, info, info.get("input_spec") or ctx.get("input_spec"))
        self.state.set_graph(hit["graph"])
        ctx["cached"] = hit
        self.modelOpened.emit(source)
        self.state.status.emit(f"opened {source} (from the graph cache; checking it…)")

    def failed(self, job_id: str, ctx: dict[str, Any], message: str) -> None:
        if ctx.get("cached"):
            # The model no longer loads: the cached graph must not stay on screen.
            self.cache().drop(ctx["source"], ctx.get("input_spec"))
            self.state.set_graph(None)
        self.state.modelFailed.emit(f"could not open {ctx.get('source')}: {message}")
        super().failed(job_id, ctx, message)

    def succeeded(self, job_id: str, ctx: dict[str, Any], result: dict[str, Any]) -> None:
        from accel.graph import Graph

        info = dict(result.get("info") or {})
        if result.get("graph_error"):
            info["graph_error"] = result["graph_error"]
        source = ctx["source"]
        cached = ctx.get("cached")
        if result.get("graph"):
            threading.Thread(
                target=self.cache().put,
                args=(source, ctx.get("input_spec"), result),
                name="graph-cache-write",
                daemon=True,
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
