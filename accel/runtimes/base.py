"""What the runtimes share: ``RuntimeBase``, the defaults of the ``Runtime`` contract
(``accel.models.runtime``), and the input helpers every runtime's feed uses.

A runtime package subclasses ``RuntimeBase``, sets its class variables and overrides what
its kind does differently. Runtimes import their library (torch, onnxruntime, openvino,
tensorrt) inside methods, so registering them is cheap and a missing library only makes
that runtime unavailable.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from accel.errors import AccelError
from accel.models.runtime import (
    GenerationWork,
    LMEngine,
    ProfileRequest,
    RuntimeUnavailable,
    ScriptRuntime,
    ServedModel,
    TimingTarget,
    library_problem,
)

if TYPE_CHECKING:
    from accel.graph.model import Graph
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel
    from accel.profile.generation import GenerationLayers
    from accel.profile.results import ModelProfile

log = logging.getLogger(__name__)


class RuntimeBase:
    """Defaults of the runtime contract; subclasses set the class variables."""

    kind: ClassVar[str] = ""
    label: ClassVar[str] = ""
    file_suffixes: ClassVar[tuple[str, ...]] = ()
    libraries: ClassVar[tuple[str, ...]] = ()
    needs_cuda: ClassVar[bool] = False
    reached_by: ClassVar[str | None] = None
    capabilities: ClassVar[frozenset[str]] = frozenset()
    profile_rows: ClassVar[str] = "nodes"
    exclude_names: ClassVar[str] = "modules"
    saves_step_models: ClassVar[bool] = False
    artifact_kinds: ClassVar[frozenset[str]] = frozenset()
    # Its int8 matrix-multiply kernels beat its float ones only with int8 dot products
    # (VNNI / AMX): on an AVX2-only CPU a MatMul-bound model gains nothing from its int8.
    int8_matmul_needs_dot_products: ClassVar[bool] = False

    # Forms of its models beyond the kind itself (accel.models.forms): form -> (what it is,
    # for people; the pass that makes it). Passes accept or refuse them like torch's forms.
    form_info: ClassVar[dict[str, tuple[str, str | None]]] = {}

    @property
    def forms(self) -> tuple[str, ...]:
        """Its kind (a freshly loaded file's form unless ``file_form`` says otherwise), then
        the forms of ``form_info``."""
        return (self.kind, *self.form_info)

    def model_form(self, model: LoadedModel) -> str:
        """The form of a loaded model of this runtime (cheap: its metadata)."""
        return self.kind

    # -- availability --------------------------------------------------------------------
    def unavailable_reason(self, device: str = "cpu") -> str | None:
        """Why this runtime cannot run here on ``device`` (None when it can)."""
        for lib in self.libraries:
            problem = library_problem(lib)
            if problem:
                return problem
        if self.needs_cuda:
            if not str(device).startswith("cuda"):
                return f"{self.label} runs on NVIDIA GPUs only; set the device to cuda:0"
            if library_problem("torch"):
                return "torch is not installed"
            import torch

            if not torch.cuda.is_available():
                return "CUDA is not available on this machine"
        return None

    def check_available(self, device: str = "cpu") -> None:
        reason = self.unavailable_reason(device)
        if reason:
            raise RuntimeUnavailable(f"{self.label} cannot run here: {reason}")

    # -- loading and saving --------------------------------------------------------------
    def load(
        self, path: Path, spec: InputSpec | None, source: str, *, trust_pickle: bool = False
    ) -> LoadedModel:
        raise AccelError(f"{self.label} models cannot be loaded from a file")

    def file_form(self, path: Path) -> str | None:
        """The form a file of this runtime loads as, without loading it (None: unknown)."""
        return self.kind

    def file_input_spec(self, path: Path) -> InputSpec | None:
        """A file's input spec read from its own metadata, without loading, unpickling or
        running anything (None: this runtime cannot tell without loading it)."""
        return None

    def finish_load(self, model: LoadedModel, device: str, validate: bool) -> None:
        """Called by load_model after any source was loaded (stats, device, a test run)."""
        model.device = device

    def save(self, model: LoadedModel, path: Path) -> Path:
        """Write the model to ``path`` (suffix chosen by the runtime); returns the file."""
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
                if x.dim() == 4 and model.channels_last_inputs:
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

    def concurrent_throughput(
        self, model: LoadedModel, inputs: Mapping[str, Any], seconds: float = 1.0
    ) -> float | None:
        """Calls per second with requests in flight together (the throughput objective):
        here two Python threads calling ``forward`` (ONNX Runtime and torch release the GIL
        while they compute); a runtime with its own request queue overrides it."""
        import threading
        import time

        fed = self.prepare_inputs(model, inputs)
        self.forward(model, fed)  # warm (and create the session once, before the threads)
        counts = [0, 0]
        deadline = time.perf_counter() + seconds

        def caller(i: int) -> None:
            while time.perf_counter() < deadline:
                self.forward(model, fed)
                counts[i] += 1

        t0 = time.perf_counter()
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(counts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(counts) / (time.perf_counter() - t0)

    def timing_target(
        self, model: LoadedModel, inputs: Any, device: str, threads: int | None
    ) -> TimingTarget:
        """What the timing harness calls for this model (inputs prepared once, outside
        the timing)."""
        fed = self.prepare_inputs(model, inputs) if isinstance(inputs, Mapping) else inputs
        return TimingTarget(
            lambda: self.forward(model, fed),
            lambda: self.forward(model, fed),
            self.kind,
            model.size_bytes or None,
            uses_torch=True,
        )

    def native_timing_target(
        self, obj: Any, inputs: Any, device: str, threads: int | None
    ) -> TimingTarget | None:
        """The timing target of this runtime's own objects (a file, a session), or None
        when ``obj`` is not one."""
        return None

    # -- insight -------------------------------------------------------------------------
    def profile(
        self, model: LoadedModel, inputs: Mapping[str, Any], request: ProfileRequest
    ) -> ModelProfile:
        raise AccelError(f"cannot profile a {self.label} model layer by layer")

    def profile_generation(
        self, model: LoadedModel, work: GenerationWork, request: ProfileRequest
    ) -> GenerationLayers:
        raise AccelError(
            f"cannot split a {self.label} model's generation time by layer (its layers are "
            "not hooked while it generates); profile the torch model it came from"
        )

    def graph(self, model: LoadedModel, inputs: Mapping[str, Any] | None, **kwargs: Any) -> Graph:
        raise AccelError(f"cannot draw the graph of a {self.label} model")

    def layer_outputs(
        self, model: LoadedModel, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], set[str]]:
        """Per-module outputs for per-layer parity: ({module path: tensor}, paths whose
        output is not comparable). Empty when the runtime exposes no intermediate values."""
        return {}, set()

    def lm_decoder(self, model: LoadedModel, max_len: int) -> Any:
        """A decoder (accel.generate's Decoder protocol) that keeps the KV cache inside the
        runtime, for a model exported with one (a stateful OpenVINO LM); None otherwise."""
        return None

    def layer_notes(self, model: Any) -> list[str]:
        """Why per-layer parity sees less of ``model`` than its layers (phrases that follow
        "the original model" / "the optimized model"); empty when it sees them all."""
        return []

    def adopt(self, obj: Any, inputs: Mapping[str, Any]) -> LoadedModel | None:
        """A LoadedModel around an in-memory object of this runtime (a torch module), its
        input spec read from the sample ``inputs``; None when ``obj`` is not one."""
        return None

    def netron_file(self, model: LoadedModel) -> Path | None:
        """A file Netron can open as it is (None: export first, or nothing to show)."""
        return self.model_file(model)

    def info(self, model: LoadedModel) -> dict[str, Any]:
        """Extra JSON facts for the Model panel."""
        f = self.model_file(model)
        return {"file": str(f) if f else None}

    # -- scripts and serving ---------------------------------------------------------------
    def script(self) -> ScriptRuntime:
        raise NotImplementedError(f"{self.label} models cannot be written in scripts yet")

    def serve(self, path: Path, device: str, threads: int | None) -> ServedModel:
        raise AccelError(f"{self.label} models cannot be served by Triton")

    def serve_lm(self, path: Path, options: dict[str, Any], mode: str) -> LMEngine:
        """An engine answering generation requests token by token (``LMEngine``) over the
        LM file ``path`` in ``mode`` (with or without continuous batching)."""
        raise AccelError(
            f"{self.label} models cannot serve generation requests; serve-test a run whose "
            "final model is a stateful OpenVINO LM (an openvino_stateful step)"
        )
