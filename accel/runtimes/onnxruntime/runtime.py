"""The ONNX handler: .onnx files run by ONNX Runtime (IOBinding on GPU providers)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.backends.base import Backend, BenchTarget, ScriptRuntime

if TYPE_CHECKING:
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)


class OnnxBackend(Backend):
    kind = "onnx"
    label = "ONNX Runtime"
    file_suffixes = (".onnx",)
    libraries = ("onnx", "onnxruntime")
    reached_by = "export_onnx"
    capabilities = frozenset({"graph", "profile", "layer_parity", "netron"})
    exclude_names = "nodes"

    def load(self, path: Path, spec: InputSpec | None, source: str) -> LoadedModel:
        from accel.models.sources import _load_onnx

        return _load_onnx(path, spec, source)

    def save(self, model: LoadedModel, path: Path) -> Path:
        """Copy the .onnx file (and its external data files, same folder) to ``path``."""
        from accel.models.onnx_io import check_external_data

        src = Path(model.onnx_path)
        path = Path(path).with_suffix(".onnx")
        path.parent.mkdir(parents=True, exist_ok=True)
        if src.resolve() != path.resolve():
            for f in check_external_data(src):
                shutil.copy2(f, path.parent / f.name)
            shutil.copy2(src, path)
        return path

    def model_file(self, model: LoadedModel) -> Path | None:
        return Path(model.onnx_path) if model.onnx_path else None

    def with_threads(self, model: LoadedModel, threads: int) -> LoadedModel:
        # Idle threads sleep rather than spin: spinning would take the CPU from the model
        # timed next (a new session only when that changes anything).
        opts = dict(model.session_options or {})
        want = {"intra_op_threads": threads, "allow_spinning": False}
        if all(opts.get(k) == v for k, v in want.items()):
            return model
        return model.replace(session_options={**opts, **want})

    # -- running -------------------------------------------------------------------------
    def session(self, model: LoadedModel) -> Any:
        if model._session is None:
            from accel.models.onnx_io import create_session

            model._session = create_session(
                model.onnx_path, model.providers, model.session_options, model.device
            )
        return model._session

    def forward(self, model: LoadedModel, inputs: Mapping[str, Any]) -> Any:
        from accel.models.onnx_io import run_session

        fed = self.prepare_inputs(model, inputs)
        io_binding = bool(model.session_options.get("io_binding", True))
        return run_session(self.session(model), fed, model.device, io_binding)

    def bench_target(
        self, model: LoadedModel, inputs: Any, device: str, threads: int | None
    ) -> BenchTarget:
        from accel.bench import _move_inputs, _prepare_ort, _prepare_ort_bound

        # Duck-typed models (kind, onnx_path, session(), input_casts) are timed too.
        size = getattr(model, "size_bytes", None) or None
        onnx_path = getattr(model, "onnx_path", None)
        if size is None and onnx_path is not None and Path(onnx_path).is_file():
            size = Path(onnx_path).stat().st_size
        casts = getattr(model, "input_casts", None)
        prepare = getattr(model, "prepare_inputs", None)
        if callable(prepare) and isinstance(inputs, Mapping):
            inputs, casts = prepare(inputs), None
        fed = _move_inputs(inputs, "cpu", casts)
        # The model's own session() (created by the first call, cached by the model)
        get = model.session if callable(getattr(model, "session", None)) else None
        if get is None:
            get = lambda: self.session(model)  # noqa: E731
        options = getattr(model, "session_options", None) or {}
        if str(device).startswith("cuda") and options.get("io_binding", True):
            p = _prepare_ort_bound(get, fed, device, size)
        else:
            p = _prepare_ort(get, fed, size)
        return BenchTarget(p.first, p.call, p.runner, p.size_bytes, p.uses_torch, p.threads)

    # -- insight -------------------------------------------------------------------------
    def profile(
        self,
        model: LoadedModel,
        inputs: Mapping[str, Any],
        *,
        iters: int,
        warmup: int,
        ops: bool,
        trace_path: str | Path | None,
        device: str,
        threads: int | None,
        progress: Callable[[float, str], None] | None,
        cancel: Callable[[], bool] | None,
    ) -> Any:
        from accel.profile.ort_profile import profile_onnx

        options = dict(model.session_options or {})
        if threads:
            options["intra_op_threads"] = int(threads)
        prof = profile_onnx(
            model.onnx_path,
            self.prepare_inputs(model, inputs),
            device=device,
            providers=model.providers,
            session_options=options,
            iters=iters,
            warmup=warmup,
            ops=ops,
            trace_path=trace_path,
            progress=progress,
            cancel=cancel,
        )
        prof.threads = threads
        return prof

    def graph(self, model: LoadedModel, inputs: Mapping[str, Any] | None, **kwargs: Any) -> Any:
        from accel.graph.from_onnx import graph_from_onnx

        return graph_from_onnx(model, **kwargs)

    def layer_outputs(
        self, model: LoadedModel, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], set[str]]:
        from accel.graph.layer_parity import onnx_layer_outputs

        return onnx_layer_outputs(model, inputs), set()

    def script_runtime(self) -> ScriptRuntime:
        return ScriptRuntime(
            run_branch=(
                "np_feed = {}\n"
                "for meta in session.get_inputs():\n"
                "    x = feed[meta.name].detach().cpu().numpy()\n"
                '    if meta.type == "tensor(float16)":\n'
                "        x = x.astype(np.float16)\n"
                "    np_feed[meta.name] = x\n"
                "return tuple(torch.from_numpy(np.asarray(o)) for o in session.run(None, np_feed))"
            ),
            load=(
                "onnx_path = Path(model_file)\n"
                'kind = "onnx"\n'
                "model = None\n"
                "session = make_session(onnx_path)"
            ),
        )

    def info(self, model: LoadedModel) -> dict[str, Any]:
        return {"file": str(model.onnx_path) if model.onnx_path else None}
