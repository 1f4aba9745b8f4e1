"""The ONNX Runtime runtime: .onnx files run by ONNX Runtime (IOBinding on GPU providers)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.models.runtime import ProfileRequest, ScriptRuntime, TimingTarget, register_runtime
from accel.runtimes.base import RuntimeBase

if TYPE_CHECKING:
    from accel.graph.model import Graph
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel
    from accel.profile.results import ModelProfile
    from accel.runtimes.onnxruntime.serving import ServedOnnx

log = logging.getLogger(__name__)


class OnnxFileRuntime(RuntimeBase):
    """What every runtime of .onnx files does (ONNX Runtime here, TensorRT through ORT's
    TensorRT provider): files, sessions, timing, profile, graph, taps, scripts."""

    libraries = ("onnx", "onnxruntime")
    exclude_names = "nodes"

    def save(self, model: LoadedModel, path: Path) -> Path:
        """Copy the .onnx file (and its external data files, same folder) to ``path``."""
        from accel.runtimes.onnxruntime.onnx_io import check_external_data

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
            from accel.runtimes.onnxruntime.onnx_io import create_session

            model._session = create_session(
                model.onnx_path, model.providers, model.session_options, model.device
            )
        return model._session

    def forward(self, model: LoadedModel, inputs: Mapping[str, Any]) -> Any:
        from accel.runtimes.onnxruntime.onnx_io import run_session

        fed = self.prepare_inputs(model, inputs)
        io_binding = bool(model.session_options.get("io_binding", True))
        return run_session(self.session(model), fed, model.device, io_binding)

    def timing_target(
        self, model: LoadedModel, inputs: Any, device: str, threads: int | None
    ) -> TimingTarget:
        from accel.runtimes.onnxruntime.timing import model_target

        # The model's own session() (created by the first call, cached by the model)
        get = model.session if callable(getattr(model, "session", None)) else None
        if get is None:
            get = lambda: self.session(model)  # noqa: E731
        return model_target(model, inputs, device, get)

    # -- insight -------------------------------------------------------------------------
    def profile(
        self, model: LoadedModel, inputs: Mapping[str, Any], request: ProfileRequest
    ) -> ModelProfile:
        from accel.runtimes.onnxruntime.profile import profile_onnx

        options = dict(model.session_options or {})
        if request.threads:
            options["intra_op_threads"] = int(request.threads)
        prof = profile_onnx(
            model.onnx_path,
            self.prepare_inputs(model, inputs),
            device=request.device,
            providers=model.providers,
            session_options=options,
            iters=request.iters,
            warmup=request.warmup,
            ops=request.ops,
            trace_path=request.trace_path,
            progress=request.progress,
            cancel=request.cancel,
        )
        prof.threads = request.threads
        return prof

    def graph(self, model: LoadedModel, inputs: Mapping[str, Any] | None, **kwargs: Any) -> Graph:
        from accel.runtimes.onnxruntime.graph import graph_from_onnx

        return graph_from_onnx(model, **kwargs)

    def layer_outputs(
        self, model: LoadedModel, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], set[str]]:
        from accel.runtimes.onnxruntime.layers import onnx_layer_outputs

        return onnx_layer_outputs(model, inputs), set()

    def info(self, model: LoadedModel) -> dict[str, Any]:
        return {"file": str(model.onnx_path) if model.onnx_path else None}

    # -- scripts ---------------------------------------------------------------------------
    def script(self) -> ScriptRuntime:
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
            loads={
                s: (
                    "onnx_path = Path(model_file)\n"
                    'kind = "onnx"\n'
                    "model = None\n"
                    "session = make_session(onnx_path)"
                )
                for s in self.file_suffixes
            },
        )


@register_runtime
class OnnxRuntime(OnnxFileRuntime):
    kind = "onnx"
    label = "ONNX Runtime"
    file_suffixes = (".onnx",)
    reached_by = "export_onnx"
    capabilities = frozenset({"graph", "profile", "layer_parity", "netron"})
    artifact_kinds = frozenset({"onnx", "onnx_optimized"})

    def load(
        self, path: Path, spec: InputSpec | None, source: str, *, trust_pickle: bool = False
    ) -> LoadedModel:
        from accel.runtimes.onnxruntime.loading import load_onnx

        return load_onnx(path, spec, source)

    def file_input_spec(self, path: Path) -> InputSpec:
        from accel.runtimes.onnxruntime.onnx_io import check_external_data, spec_from_onnx

        check_external_data(path)  # the graph's external files stay in its folder
        return spec_from_onnx(path)

    def native_timing_target(
        self, obj: Any, inputs: Any, device: str, threads: int | None
    ) -> TimingTarget | None:
        from accel.runtimes.onnxruntime.timing import native_target

        return native_target(obj, inputs, device, threads)

    def serve(self, path: Path, device: str, threads: int | None) -> ServedOnnx:
        from accel.runtimes.onnxruntime.serving import ServedOnnx

        return ServedOnnx(path, threads)
