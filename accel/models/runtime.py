"""The runtime contract and the registry that finds a model's runtime.

A *runtime* owns the models of one kind (``LoadedModel.kind``): it loads their files,
feeds and runs them, gives the timing harness what to call, profiles them layer by layer,
draws their graph, taps per-layer outputs, saves them, writes their branch of an exported
script and serves them from Triton. Each is a package under ``accel/runtimes/`` whose
class is decorated ``@register_runtime``; ``accel/__init__.py`` imports the built-in
packages (one line each). Everything else asks ``runtime_of(model)``, ``get_runtime(kind)``
or ``runtime_for_file(path)`` and never compares kind strings
(``tests/accel/test_runtimes_guard.py`` checks that).

The protocol is generic in the model type (``ModelT``, a ``LoadedModel``), so this module
imports nothing of ``accel.models.loaded``, which asks this registry for its runtime.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from accel.errors import AccelError

if TYPE_CHECKING:
    from accel.graph.model import Graph
    from accel.models.inputs import InputSpec
    from accel.profile.generation import GenerationLayers
    from accel.profile.results import ModelProfile

__all__ = [
    "CAPABILITIES",
    "adopt",
    "GenerationWork",
    "ProfileRequest",
    "Runtime",
    "RuntimeUnavailable",
    "ScriptRuntime",
    "ServedModel",
    "TimingTarget",
    "availability",
    "get_runtime",
    "kinds",
    "library_problem",
    "model_file_suffixes",
    "native_timing_target",
    "reach_hint",
    "register_runtime",
    "runtime_for_artifact",
    "runtime_for_file",
    "runtime_of",
    "rows_are_nodes",
    "runtimes",
]

ModelT = TypeVar("ModelT")

# What the studio can show of a kind (Runtime.capabilities): its graph, a per-layer
# profile, per-layer parity, the file in Netron as it is, an ONNX export for Netron.
# serve_lm: ``serve_lm`` answers generation requests token by token (a stateful LM file).
CAPABILITIES = frozenset({"graph", "profile", "layer_parity", "netron", "export_onnx", "serve_lm"})


class RuntimeUnavailable(AccelError):
    """The runtime of a model kind cannot run here (library or device missing)."""


@dataclass
class TimingTarget:
    """What the timing harness calls for a model, plus what it reports about it.

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
class ProfileRequest:
    """How to profile a model layer by layer (``accel.profile.profile_model``'s options)."""

    iters: int = 20
    warmup: int = 5
    ops: bool = True
    trace_path: str | Path | None = None
    device: str = "cpu"
    threads: int | None = None
    progress: Callable[[float, str], None] | None = None
    cancel: Callable[[], bool] | None = None


class GenerationWork(Protocol):
    """One greedy generation, one call per token, for ``Runtime.profile_generation``
    (``accel.generate.profiling.GreedyWork``): ``prefill()`` runs the prompt and returns the
    first token, ``step(token)`` feeds it and returns the next; ``new_tokens`` in all, after
    ``prompt`` (token ids, [batch, prompt_tokens])."""

    new_tokens: int
    prompt: Any

    def prefill(self) -> Any: ...

    def step(self, token: Any) -> Any: ...


@dataclass(frozen=True)
class ScriptRuntime:
    """How an exported script runs a model of this kind.

    ``run_branch`` is the body of the script's ``run(feed)`` for this kind (``feed``: dict
    name -> torch tensor with the input casts applied; it returns the outputs). ``loads``
    maps a file suffix to statements that load a file of this kind named by the variable
    ``model_file`` and set ``model``/``kind`` (and ``session`` where the kind has one).
    ``imports`` are import lines both need.
    """

    run_branch: str
    loads: Mapping[str, str] = field(default_factory=dict)
    imports: tuple[str, ...] = ()


class ServedModel(Protocol):
    """A model file loaded once by its runtime for Triton (``Runtime.serve``): the names
    and dtypes Triton's config gives its tensors, a run, and the file as Triton reads it."""

    platform: str  # Triton's platform or backend name ("onnxruntime_onnx", "openvino")
    config_field: str  # "platform" or "backend": the config.pbtxt field naming it
    file_name: str  # the model file in the version folder ("model.onnx")
    batch_sweep: bool  # whether it runs here, so a batch sweep can time it

    def input_names(self, spec: InputSpec) -> list[str]: ...

    def outputs(
        self, spec: InputSpec, sample: Mapping[str, Any]
    ) -> list[tuple[str, str, list[Any]]]: ...

    def run(self, sample: Mapping[str, Any]) -> list[Any]: ...

    def write(self, version_dir: Path, input_names: Sequence[str]) -> None: ...


# How an LMEngine shares the model between requests: one at a time, or continuously batched.
NO_CB = "no continuous batching"
CB = "continuous batching"
LM_SERVING_MODES = (NO_CB, CB)


class LMEngine(Protocol):
    """A language model answering generation requests token by token (``Runtime.serve_lm``):
    ``generate(ids, new_tokens)`` yields the new token ids as they come, from any thread;
    ``mode`` says whether requests are batched continuously; ``close()`` ends it."""

    mode: str

    def generate(self, ids: Any, new_tokens: int) -> Iterator[int]: ...
    def close(self) -> None: ...


class Runtime(Protocol[ModelT]):
    """The contract of a model kind's runtime (see the module docstring).

    Class attributes: ``kind`` (the LoadedModel.kind it owns), ``label`` (for people),
    ``file_suffixes`` (model files it loads, the one suffix table), ``libraries`` (import
    names it needs), ``capabilities`` (a subset of CAPABILITIES), ``profile_rows``
    ("modules": torch module paths, or "nodes": graph node names), ``exclude_names`` (what
    its quantization passes name in ``exclude``), ``saves_step_models`` (the runner saves
    each step's model), ``reached_by`` (the pass that converts a torch model to it),
    ``artifact_kinds`` (run artifacts it serves from Triton),
    ``int8_matmul_needs_dot_products`` (its int8 MatMul kernels beat its float ones only
    on CPUs with int8 dot products: the search demotes its int8 chains for MatMul-bound
    models elsewhere, ``accel.search.seeds.hardware_penalty``), ``forms`` (the forms its
    models take, ``accel.models.forms``; the first is a freshly loaded model's).
    """

    kind: ClassVar[str]
    label: ClassVar[str]
    file_suffixes: ClassVar[tuple[str, ...]]
    libraries: ClassVar[tuple[str, ...]]
    capabilities: ClassVar[frozenset[str]]
    profile_rows: ClassVar[str]
    exclude_names: ClassVar[str]
    saves_step_models: ClassVar[bool]
    reached_by: ClassVar[str | None]
    artifact_kinds: ClassVar[frozenset[str]]
    int8_matmul_needs_dot_products: ClassVar[bool]
    forms: tuple[str, ...]  # the forms of its models (accel.models.forms), the first a fresh one's
    # forms beyond the kind: form -> (what it is, for people; the pass that makes it)
    form_info: ClassVar[dict[str, tuple[str, str | None]]]

    def unavailable_reason(self, device: str = "cpu") -> str | None: ...
    def check_available(self, device: str = "cpu") -> None: ...

    # loading and saving
    def load(
        self, path: Path, spec: InputSpec | None, source: str, *, trust_pickle: bool = False
    ) -> ModelT: ...
    def file_form(self, path: Path) -> str | None: ...
    def model_form(self, model: ModelT) -> str: ...
    def file_input_spec(self, path: Path) -> InputSpec | None: ...
    def finish_load(self, model: ModelT, device: str, validate: bool) -> None: ...
    def save(self, model: ModelT, path: Path) -> Path: ...
    def model_file(self, model: ModelT) -> Path | None: ...
    def copy(self, model: ModelT) -> ModelT: ...
    def with_threads(self, model: ModelT, threads: int) -> ModelT: ...

    # running and timing
    def prepare_inputs(self, model: ModelT, inputs: Mapping[str, Any]) -> dict[str, Any]: ...
    def session(self, model: ModelT) -> Any: ...
    def forward(self, model: ModelT, inputs: Mapping[str, Any]) -> Any: ...
    def concurrent_throughput(
        self, model: ModelT, inputs: Mapping[str, Any], seconds: float = 1.0
    ) -> float | None: ...
    def timing_target(
        self, model: ModelT, inputs: Any, device: str, threads: int | None
    ) -> TimingTarget: ...
    def native_timing_target(
        self, obj: Any, inputs: Any, device: str, threads: int | None
    ) -> TimingTarget | None: ...
    def lm_decoder(self, model: ModelT, max_len: int) -> Any: ...

    # insight
    def profile(
        self, model: ModelT, inputs: Mapping[str, Any], request: ProfileRequest
    ) -> ModelProfile: ...
    def profile_generation(
        self, model: ModelT, work: GenerationWork, request: ProfileRequest
    ) -> GenerationLayers: ...
    def graph(self, model: ModelT, inputs: Mapping[str, Any] | None, **kwargs: Any) -> Graph: ...
    def layer_outputs(
        self, model: ModelT, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], set[str]]: ...
    def layer_notes(self, model: Any) -> list[str]: ...
    def adopt(self, obj: Any, inputs: Mapping[str, Any]) -> ModelT | None: ...
    def netron_file(self, model: ModelT) -> Path | None: ...
    def info(self, model: ModelT) -> dict[str, Any]: ...

    # scripts and serving
    def script(self) -> ScriptRuntime: ...
    def serve(self, path: Path, device: str, threads: int | None) -> ServedModel: ...
    def serve_lm(self, path: Path, options: dict[str, Any], mode: str) -> LMEngine: ...


# -- the registry -------------------------------------------------------------------------

_RUNTIMES: dict[str, Runtime[Any]] = {}

RuntimeClass = TypeVar("RuntimeClass", bound=type)


def register_runtime(cls: RuntimeClass) -> RuntimeClass:
    """Class decorator: register one instance of a runtime class under its ``kind``.

    Its suffixes must not be another runtime's: one suffix, one runtime."""
    runtime = cls()
    kind = getattr(runtime, "kind", "")
    if not kind:
        raise ValueError(f"{cls.__name__} has no kind")
    for other in _RUNTIMES.values():
        clash = set(other.file_suffixes) & set(runtime.file_suffixes)
        if clash and other.kind != kind:
            raise ValueError(f"{cls.__name__}: {sorted(clash)} already belong to {other.kind}")
    _RUNTIMES[kind] = runtime
    return cls


def runtimes() -> list[Runtime[Any]]:
    """Every registered runtime, in registration order."""
    return list(_RUNTIMES.values())


def kinds() -> tuple[str, ...]:
    """The model kinds that have a runtime."""
    return tuple(_RUNTIMES)


def get_runtime(kind: str) -> Runtime[Any]:
    """The runtime of model kind ``kind``."""
    runtime = _RUNTIMES.get(kind)
    if runtime is None:
        known = ", ".join(_RUNTIMES) or "none (import accel first)"
        raise AccelError(f"unknown model kind {kind!r}; known kinds: {known}")
    return runtime


def runtime_of(model: Any) -> Runtime[Any]:
    """The runtime of a ``LoadedModel`` (anything with a ``kind``)."""
    return get_runtime(model.kind)


def runtime_for_file(path: str | Path) -> Runtime[Any] | None:
    """The runtime that loads files with ``path``'s suffix (None: not a model file)."""
    suffix = Path(path).suffix.lower()
    return next((r for r in _RUNTIMES.values() if suffix in r.file_suffixes), None)


def model_file_suffixes() -> tuple[str, ...]:
    """Every model file suffix some runtime loads (the open dialog's filter)."""
    return tuple(s for r in _RUNTIMES.values() for s in r.file_suffixes)


def runtime_for_artifact(artifact_kind: str) -> Runtime[Any] | None:
    """The runtime that serves run artifacts of ``artifact_kind`` from Triton (or None)."""
    return next((r for r in _RUNTIMES.values() if artifact_kind in r.artifact_kinds), None)


def adopt(obj: Any, inputs: Mapping[str, Any]) -> Any | None:
    """A LoadedModel around an in-memory object a runtime owns (a torch module), its input
    spec read from the sample ``inputs``, asking each runtime; None when none takes it."""
    for runtime in _RUNTIMES.values():
        model = runtime.adopt(obj, inputs)
        if model is not None:
            return model
    return None


def native_timing_target(
    obj: Any, inputs: Any, device: str, threads: int | None
) -> TimingTarget | None:
    """The timing target of a runtime's own object (a model file path, an ONNX Runtime
    session), asking each runtime; None when no runtime takes it."""
    for runtime in _RUNTIMES.values():
        target = runtime.native_timing_target(obj, inputs, device, threads)
        if target is not None:
            return target
    return None


def reach_hint(needed: Iterable[str], current: str) -> str:
    """What to change so a step that needs one of ``needed`` kinds gets one, the model
    being ``current`` at that point (a sentence starting with a space, or "").

    A kind no pass converts to (``reached_by`` None: models start as it) is reached by
    moving the step before the conversion that made ``current``; the others by adding
    their conversion step."""
    needed = tuple(needed)
    if current in needed:
        return ""
    wanted = [_RUNTIMES[k] for k in needed if k in _RUNTIMES]
    if any(r.reached_by is None for r in wanted):
        runtime = _RUNTIMES.get(current)
        via = runtime.reached_by if runtime is not None else None
        where = f"the {via} step" if via else "the step that converted the model"
        return f" Move this step before {where}."
    steps = list(dict.fromkeys(r.reached_by for r in wanted if r.reached_by))
    if steps:
        first = " or ".join(steps)
        article = "an" if first[0] in "aeiou" else "a"
        return f" Add {article} {first} step before it."
    return ""


def rows_are_nodes(kind: str) -> bool:
    """True when a profile of ``kind`` has graph node names as rows (ONNX, OpenVINO),
    False for torch module paths or a kind without a runtime here."""
    runtime = _RUNTIMES.get(kind)
    return runtime is not None and runtime.profile_rows == "nodes"


def library_problem(lib: str) -> str | None:
    """Why Python package ``lib`` cannot be imported here (None: it can), read without
    importing it (a blocked or broken package says so)."""
    try:
        found = importlib.util.find_spec(lib) is not None
    except (ImportError, ValueError) as exc:
        return f"the {lib} package cannot be imported ({exc})"
    return None if found else f"the {lib} package is not installed"


def availability(device: str = "cpu") -> dict[str, str | None]:
    """Kind -> why its runtime cannot run here on ``device`` (None: it can)."""
    return {k: r.unavailable_reason(device) for k, r in _RUNTIMES.items()}
