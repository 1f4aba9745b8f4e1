"""The backend contract: one handler per model kind.

A handler knows, for the models of its kind (``LoadedModel.kind``), how to load one
from a file, feed it inputs, run it, time it, profile it layer by layer, draw its
graph, tap its intermediate outputs for per-layer parity, save it, write it in an
exported script and what Netron can show of it. The runner, the profiler, the graph
code, codegen and the GUI ask the handler; nothing else branches on the kind string
(``tests/accel/test_backends_guard.py`` checks that).

Handlers import their runtime (torch, onnxruntime, openvino, tensorrt) inside methods,
so listing them is cheap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from accel.errors import AccelError

if TYPE_CHECKING:
    from accel.graph.model import Graph
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel
    from accel.profile.results import ModelProfile

log = logging.getLogger(__name__)


class BackendUnavailable(AccelError):
    """The runtime of a model kind cannot run here (library or device missing)."""


@dataclass
class BenchTarget:
    """What the benchmark loop calls for a model, plus what it reports about it.

    ``first`` is the first call (it may create a session or compile), ``call`` every later
    call. ``runner`` names the runtime in results; ``uses_torch`` says whether torch's
    thread setting and inference mode apply; ``threads`` reports the threads really used.
    """

    first: Callable[[], Any]
    call: Callable[[], Any]
    runner: str
    size_bytes: int | None
    uses_torch: bool
    threads: Callable[[], int | None] = lambda: None


@dataclass(frozen=True)
class ScriptRuntime:
    """How an exported script runs a model of this kind.

    ``run_branch`` is the body of the script's ``run(feed)`` for this kind (``feed``: dict
    name -> torch tensor with the input casts applied; it returns the outputs);
    ``load`` are statements that load a file of this kind named by the variable
    ``model_file`` into the script's variables (for sources that are such files).
    ``imports`` are import lines both need.
    """

    run_branch: str
    load: str = ""
    imports: tuple[str, ...] = ()


class Backend:
    """Base of the handlers (see module docstring). Subclasses set the class variables."""

    kind: ClassVar[str] = ""
    label: ClassVar[str] = ""
    # Model file suffixes this handler loads (".onnx", ".xml", ...).
    file_suffixes: ClassVar[tuple[str, ...]] = ()
    # Python packages it needs (import names), checked by unavailable_reason().
    libraries: ClassVar[tuple[str, ...]] = ()
    # Only runs on a CUDA GPU.
    needs_cuda: ClassVar[bool] = False
    # The pass that turns a torch model into this kind (for hints in error messages).
    reached_by: ClassVar[str | None] = None

    # -- availability --------------------------------------------------------------------
    def unavailable_reason(self, device: str = "cpu") -> str | None:
        """Why this runtime cannot run here on ``device`` (None when it can)."""
        import importlib.util

        for lib in self.libraries:
            if importlib.util.find_spec(lib) is None:
                return f"the {lib} package is not installed"
        if self.needs_cuda:
            if not str(device).startswith("cuda"):
                return f"{self.label} runs on NVIDIA GPUs only; set the device to cuda:0"
            try:
                import torch

                if not torch.cuda.is_available():
                    return "CUDA is not available on this machine"
            except ImportError:
                return "torch is not installed"
        return None

    def check_available(self, device: str = "cpu") -> None:
        reason = self.unavailable_reason(device)
        if reason:
            raise BackendUnavailable(f"{self.label} cannot run here: {reason}")

    # -- loading and saving --------------------------------------------------------------
    def load(self, path: Path, spec: InputSpec | None, source: str) -> LoadedModel:
        raise AccelError(f"{self.label} models cannot be loaded from a file")

    def finish_load(self, model: LoadedModel, device: str, validate: bool) -> None:
        """Called by load_model after any source was loaded (stats, device, a test run)."""
        model.device = device

    def save(self, model: LoadedModel, path: Path) -> Path:
        """Write the model to ``path`` (suffix chosen by the handler); returns the file."""
        raise AccelError(f"{self.label} models cannot be saved by the studio")

    def model_file(self, model: LoadedModel) -> Path | None:
        """The file the runtime loads (None for in-memory models)."""
        return None

    def copy(self, model: LoadedModel) -> LoadedModel:
        """A copy later steps may change in place without touching ``model``."""
        return model.replace()

    def with_threads(self, model: LoadedModel, threads: int) -> LoadedModel:
        """``model`` running its runtime on ``threads`` threads (torch threads are set
        around the timing instead, so torch models come back unchanged)."""
        return model

    # -- running -------------------------------------------------------------------------
    def prepare_inputs(self, model: LoadedModel, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Inputs as the runtime wants them: device moves and the model's input casts."""
        import torch

        from accel.models.inputs import is_floating, torch_dtype

        out = {}
        for name, x in inputs.items():
            if isinstance(x, torch.Tensor):
                x = self._move(model, x)
                if x.dim() == 4 and model.metadata.get("channels_last_inputs"):
                    x = x.contiguous(memory_format=torch.channels_last)
                cast = model.input_casts.get(name)
                if cast and x.is_floating_point() and is_floating(cast):
                    x = x.to(torch_dtype(cast))
            out[name] = x
        return out

    def _move(self, model: LoadedModel, x: Any) -> Any:
        return x

    def session(self, model: LoadedModel) -> Any:
        """The runtime object that runs the model (ORT session, compiled model), created
        once and cached on the model."""
        raise TypeError(f"{self.label} models have no session")

    def forward(self, model: LoadedModel, inputs: Mapping[str, Any]) -> Any:
        """Outputs for a name -> tensor mapping (non-torch runtimes return torch tensors)."""
        raise NotImplementedError

    def bench_target(
        self, model: LoadedModel, inputs: Any, device: str, threads: int | None
    ) -> BenchTarget:
        """What accel.bench times for this model (inputs prepared once, outside timing)."""
        fed = self.prepare_inputs(model, inputs) if isinstance(inputs, Mapping) else inputs
        return BenchTarget(
            lambda: self.forward(model, fed),
            lambda: self.forward(model, fed),
            self.kind,
            model.size_bytes or None,
            uses_torch=True,
        )

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
    ) -> ModelProfile:
        raise AccelError(f"cannot profile a {self.label} model layer by layer")

    def graph(self, model: LoadedModel, inputs: Mapping[str, Any] | None, **kwargs: Any) -> Graph:
        raise AccelError(f"cannot draw the graph of a {self.label} model")

    def layer_outputs(
        self, model: LoadedModel, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], set[str]]:
        """Per-module outputs for per-layer parity: ({module path: tensor}, paths whose
        output is not comparable). Empty when the runtime exposes no intermediate values."""
        return {}, set()

    # -- what people see -----------------------------------------------------------------
    # Names of what the GUI can show for this kind: "graph", "profile", "layer_parity",
    # "netron", "export_onnx" (the Netron panel can export an ONNX view of it).
    capabilities: ClassVar[frozenset[str]] = frozenset()
    # What a profile row is: "modules" (torch module paths) or "nodes" (graph node names;
    # the graph view paints them on nodes directly).
    profile_rows: ClassVar[str] = "nodes"
    # How quantization passes of this kind name layers in ``exclude``: "modules" (torch
    # module paths) or "nodes" (graph node names).
    exclude_names: ClassVar[str] = "modules"
    # The runner saves each step's model of this kind (torch: model.pt2) when the step
    # did not save one itself.
    saves_step_models: ClassVar[bool] = False

    def netron_file(self, model: LoadedModel) -> Path | None:
        """A file Netron can open as it is (None: export first, or nothing to show)."""
        return self.model_file(model)

    def script_runtime(self) -> ScriptRuntime:
        raise NotImplementedError(f"{self.label} models cannot be written in scripts yet")

    def info(self, model: LoadedModel) -> dict[str, Any]:
        """Extra JSON facts for the Model panel."""
        f = self.model_file(model)
        return {"file": str(f) if f else None}
