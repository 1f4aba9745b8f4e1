"""Typed parameters of the headless jobs: one class per job kind (its ``kind``), declared
with its use case in ``accel.jobs`` (``accel.job_registry``).

The worker protocol carries a job's parameters as plain JSON, flat as the studio has always
sent them: ``{"model": "zoo:mlp", "input_spec": "x:float32[8,1024]", "trust_pickle": true,
"iters": 20}``. ``Spec.from_params(params)`` validates that dict into a frozen spec whose
``model`` is one ``accel.recipe.ModelRef`` (source, input spec, trust_pickle: the one place
those three are unpacked) and ``spec.to_params()`` gives the flat JSON back, so the CLI (in
process) and the studio (through a worker) build the same spec and run the same use case.

A job's ``trust_pickle`` is the opt-in of the person who asked for the job (``--trust-pickle``
or the studio's confirmation); a recipe file's own ``model.trust_pickle`` stays ignored
(``RunRecipeJob`` takes the opt-in beside the recipe, never from it).
Bad parameters raise ``JobParamsError`` naming the job, the field and what to give.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from accel.errors import AccelError, InputSpecError
from accel.recipe import ModelRef

__all__ = [
    "AnalyzeJob",
    "BisectJob",
    "ExportOnnxJob",
    "GraphDiffJob",
    "InspectJob",
    "JobParamsError",
    "ModelJob",
    "ModelRef",
    "ParityJob",
    "ProfileJob",
    "RunRecipeJob",
    "ServeLMTestJob",
    "ServeTestJob",
]

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class JobParamsError(AccelError, ValueError):
    """A job's parameters do not validate; the message names the job and the field."""


def _input_spec_text(value: Any) -> str | None:
    """A spec as its compact text (a mapping is converted); a malformed one raises here."""
    from accel.models import InputSpec

    if value is None or value == "":
        return None
    spec = InputSpec.coerce(value)
    return value if isinstance(value, str) else str(spec)


class JobParams(BaseModel):
    """Base: strict (unknown keys are errors), frozen, ``device`` for the pool's lane."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: ClassVar[str] = ""

    device: str | None = Field(None, description="cpu, cuda or cuda:N (the pool sets it)")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str | None) -> str | None:
        if v is not None and not _DEVICE.match(v):
            raise ValueError(f"unknown device {v!r}: use cpu, cuda or cuda:N")
        return v

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        """Validate the worker protocol's JSON; a JobParamsError says what to change."""
        if not isinstance(params, Mapping):
            raise JobParamsError(
                f"{cls.kind} job: parameters must be a JSON object, got {type(params).__name__}"
            )
        try:
            return cls.model_validate(dict(params))
        except ValidationError as exc:
            raise JobParamsError(_explain(cls, exc)) from None

    def to_params(self) -> dict[str, Any]:
        """The flat JSON the worker protocol carries (None values left out)."""
        return self.model_dump(mode="json", exclude_none=True)


class ModelJob(JobParams):
    """A job on one model: ``model`` is a ModelRef; the flat keys fold into it."""

    model: ModelRef

    @model_validator(mode="before")
    @classmethod
    def _fold_model(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        ref = data.get("model")
        if ref is None:
            raise ValueError("model: missing; give the model source, e.g. 'zoo:mlp'")
        if isinstance(ref, ModelRef):
            ref = ref.model_dump()
        elif isinstance(ref, str):
            ref = {"source": ref}
        elif not isinstance(ref, Mapping):
            raise ValueError(f"model: give a source string, got {type(ref).__name__}")
        ref = dict(ref)
        for key in ("input_spec", "trust_pickle"):
            if key in data:
                ref[key] = data.pop(key)
        if not str(ref.get("source") or "").strip():
            raise ValueError("model: empty source; give e.g. 'zoo:mlp' or 'model.onnx'")
        try:
            ref["input_spec"] = _input_spec_text(ref.get("input_spec"))
        except InputSpecError as exc:
            raise ValueError(f"input_spec: {exc}") from None
        ref["trust_pickle"] = bool(ref.get("trust_pickle", False))
        data["model"] = ModelRef(**ref)
        return data

    def to_params(self) -> dict[str, Any]:
        d = super().to_params()
        ref = d.pop("model")
        d["model"] = ref["source"]
        if ref.get("input_spec"):
            d["input_spec"] = ref["input_spec"]
        if ref.get("trust_pickle"):
            d["trust_pickle"] = True
        return d

    def load(self, **kwargs: Any) -> Any:
        """Load the model this job names (``accel.models.load_model``); keyword arguments
        (``device``...) pass through."""
        from accel.models import load_model

        ref = self.model
        return load_model(ref.source, ref.input_spec, trust_pickle=ref.trust_pickle, **kwargs)


class InspectJob(ModelJob):
    """Open a model: its facts for people and (``graph``) its graph."""

    kind: ClassVar[str] = "inspect"
    graph: bool = True


class ProfileJob(ModelJob):
    """Profile a model layer by layer (``layers``) and/or benchmark it (``benchmark``)."""

    kind: ClassVar[str] = "profile"
    layers: bool = Field(True, description="the per-layer profile (accel.profile.profile_model)")
    benchmark: bool = Field(
        False, description="latency p50/p90 and throughput (accel.timing.single)"
    )
    iters: int = Field(20, ge=1, le=1_000_000, description="profiled iterations")
    warmup: int = Field(5, ge=0, le=1_000_000, description="warm-up iterations")
    bench_iters: int = Field(30, ge=1, le=1_000_000, description="benchmark: timed iterations")
    ops: bool = Field(True, description="also the operator table")
    trace_path: str | None = Field(None, description="write a Chrome/Perfetto trace here")
    threads: int | None = Field(None, ge=1, le=4096, description="CPU threads (default: cores)")
    generate: bool = Field(
        False, description="with layers: also split a decoder LM's generation per layer"
    )
    prompt_tokens: int | None = Field(None, ge=1, le=1 << 20, description="generate: prompt")
    new_tokens: int | None = Field(None, ge=1, le=1 << 20, description="generate: new tokens")
    batch: int | None = Field(None, ge=1, le=4096, description="generate: prompts at once")
    gen_rounds: int = Field(3, ge=1, le=10_000, description="generate: hooked generations")

    @model_validator(mode="after")
    def _something(self) -> Self:
        if not (self.layers or self.benchmark):
            raise ValueError("layers and benchmark are both off: nothing to do")
        if self.generate and not self.layers:
            raise ValueError("generate splits the per-layer profile: it needs layers")
        return self

    def generation_settings(self) -> dict[str, int]:
        """The set generation settings (unset ones take accel.generate's defaults)."""
        names = ("prompt_tokens", "new_tokens", "batch")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


class GenerateJob(ModelJob):
    """Time a decoder language model generating (``studio profile --generate``)."""

    kind: ClassVar[str] = "generate"
    prompt_tokens: int = Field(128, ge=1, le=1 << 20, description="prompt length in tokens")
    new_tokens: int = Field(64, ge=1, le=1 << 20, description="tokens generated")
    batch: int = Field(1, ge=1, le=4096, description="prompts generated together")
    rounds: int = Field(5, ge=1, le=10_000, description="timed generations")
    threads: int | None = Field(None, ge=1, le=4096, description="CPU threads (default: cores)")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seed of the prompt's token ids")
    layers: bool = Field(True, description="also split the generation's time per layer")
    layer_rounds: int = Field(3, ge=1, le=10_000, description="layers: hooked generations")


class AnalyzeJob(ModelJob):
    """Per-layer quantization sensitivity and, with a gate, the layers to keep in float."""

    kind: ClassVar[str] = "analyze"
    pass_name: str = "quantize_static_int8"
    data: str | dict[str, Any] | None = Field(None, description="data spec (default synthetic)")
    params: dict[str, Any] = Field(default_factory=dict, description="the pass's other params")
    max_layers: int | None = Field(None, ge=1)
    method: Literal["auto", "full", "local"] = "auto"
    max_error: float | None = Field(None, ge=0, allow_inf_nan=False)
    min_cosine: float | None = Field(None, ge=-1, le=1, allow_inf_nan=False)
    max_accuracy_drop: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)

    @property
    def gated(self) -> bool:
        return any(v is not None for v in (self.max_error, self.min_cosine, self.max_accuracy_drop))


class ExportOnnxJob(ModelJob):
    """Export a torch model to ONNX (a runtime file returns itself)."""

    kind: ClassVar[str] = "export_onnx"
    out: str = Field(description="the .onnx path; its folder holds any external data")
    exporter: Literal["dynamo", "torchscript"] | None = None


class GraphDiffJob(ModelJob):
    """What a run did to the original graph up to one step."""

    kind: ClassVar[str] = "graph_diff"
    run_dir: str
    step_index: int | None = Field(None, ge=0)
    step: str | None = None


class ParityJob(ModelJob):
    """Compare two models layer by layer (``studio parity A B``): ``model`` is A."""

    kind: ClassVar[str] = "parity"
    model_b: str = Field(description="the optimized model B (keeps its own input names)")
    atol: float = Field(1e-4, ge=0, allow_inf_nan=False)
    rtol: float = Field(1e-3, ge=0, allow_inf_nan=False)
    min_cosine: float | None = Field(None, ge=-1, le=1, allow_inf_nan=False)


class BisectJob(JobParams):
    """Compare a run's original model with every step's saved model (``studio bisect``).
    The opt-ins are the caller's: the run folder's recipe.json never grants them."""

    kind: ClassVar[str] = "bisect"
    run_dir: str = Field(description="the run folder")
    atol: float | None = Field(None, ge=0, allow_inf_nan=False)
    rtol: float | None = Field(None, ge=0, allow_inf_nan=False)
    trust_pickle: bool = False
    trust_code: bool = False


class RunRecipeJob(JobParams):
    """Run a recipe. The recipe holds the model's ModelRef; ``model`` overrides its source;
    the trust opt-ins are the caller's, never the recipe's."""

    kind: ClassVar[str] = "run_recipe"
    recipe: dict[str, Any] | str = Field(description="the recipe (dict) or its file path")
    model: str | None = Field(None, description="a model source overriding the recipe's")
    out: str | None = Field(None, description="the run folder")
    generate: dict[str, int] | None = Field(
        None,
        description="a generation recipe's prompt_tokens / new_tokens for this run (a "
        "prompt-length sweep); nothing else of the recipe can be set",
    )
    trust_pickle: bool = False
    trust_recipe_code: bool = False

    def to_params(self) -> dict[str, Any]:
        d = super().to_params()
        if d.get("generate") is None:
            d.pop("generate", None)
        for key in ("trust_pickle", "trust_recipe_code"):  # only an opt-in is sent
            if not d.get(key):
                d.pop(key, None)
        return d


class ServeTestJob(JobParams):
    """Serve a run's model file with Triton (PyTriton) on loopback under concurrent clients,
    with and without dynamic batching (``accel.deploy.serve``)."""

    kind: ClassVar[str] = "serve_test"
    artifact_kind: str = Field(description="the model file's artifact kind (onnx, torchscript…)")
    artifact_path: str = Field(description="the model file Triton serves")
    input_spec: str = Field(description="the run's input spec; its first dim is the batch")
    clients: list[int] = Field([1, 4, 16], min_length=1, description="client counts")
    batches: list[int] | None = Field(None, min_length=1, description="batch sizes of the sweep")
    duration_s: float = Field(5.0, gt=0, le=600, description="seconds per load test")
    max_requests: int = Field(2000, ge=1, description="requests per client at most")
    port: int | None = Field(None, ge=1, le=65533, description="HTTP port (gRPC +1, metrics +2)")
    run_id: str | None = Field(None, description="the run it tests (the studio stores by it)")

    @field_validator("clients", "batches")
    @classmethod
    def _counts(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and min(v) < 1:
            raise ValueError("give numbers >= 1, e.g. [1, 4, 16]")
        return sorted(set(v)) if v is not None else None

    @field_validator("input_spec")
    @classmethod
    def _spec(cls, v: str) -> str:
        try:
            return str(_input_spec_text(v) or "")
        except InputSpecError as exc:
            raise ValueError(str(exc)) from None


# A generation serve test binds one Triton model instance per client of its largest count
# (each one a process of Triton's Python backend): a bound a machine can hold.
MAX_LM_CLIENTS = 64


class LMServeOptions(BaseModel):
    """How the served LM is compiled: the openvino_stateful step's settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    precision: Literal["f32", "bf16"] = Field("f32", description="inference precision hint")
    precision_auto: bool = Field(
        False, description="the precision was the studio's choice (f32 where bf16 would crash)"
    )
    kv_cache_precision: Literal["u8", "u4", "f16", "bf16", "f32"] = Field(
        "u8", description="the KV cache's precision"
    )
    threads: int | None = Field(None, ge=1, le=1024, description="CPU threads (None: all)")

    def session_options(self) -> dict[str, Any]:
        """The runtime's session options (``accel.runtimes.openvino.ir.compile_config``)."""
        opts: dict[str, Any] = {"device": "CPU", "performance_hint": "latency"}
        opts.update(self.model_dump(exclude_none=True))
        if not self.precision_auto:
            opts.pop("precision_auto")
        return opts


class ServeLMTestJob(JobParams):
    """Serve a generation run's language model with Triton (PyTriton) on loopback as a
    streaming model under concurrent clients, with and without continuous batching
    (``accel.deploy.serve_lm``)."""

    kind: ClassVar[str] = "serve_lm_test"
    model_path: str = Field(description="the stateful LM's model file (an OpenVINO IR .xml)")
    options: LMServeOptions = Field(
        default_factory=LMServeOptions, description="how the model is compiled"
    )
    prompt_tokens: int = Field(ge=1, le=32768, description="prompt length (token ids, seeded)")
    new_tokens: int = Field(ge=1, le=8192, description="new tokens per request")
    clients: list[int] = Field([1, 4], min_length=1, description="client counts")
    requests: int = Field(8, ge=1, le=10000, description="requests per client at most")
    duration_s: float = Field(60.0, gt=0, le=3600, description="seconds per load at most")
    port: int | None = Field(None, ge=1, le=65533, description="HTTP port (gRPC +1, metrics +2)")
    run_id: str | None = Field(None, description="the run it tests (the studio stores by it)")

    @field_validator("clients")
    @classmethod
    def _counts(cls, v: list[int]) -> list[int]:
        if min(v) < 1 or max(v) > MAX_LM_CLIENTS:
            raise ValueError(
                f"give client counts from 1 to {MAX_LM_CLIENTS} (one Triton model instance "
                "per client), e.g. [1, 4, 16]"
            )
        return sorted(set(v))


class DeployJob(JobParams):
    """Write a Triton model repository for a run's model file (``accel.deploy.triton``): the
    model is loaded and timed in a worker, never in the studio's own process."""

    kind: ClassVar[str] = "deploy"
    artifact_kind: str = Field(description="the model file's artifact kind (onnx, torchscript…)")
    artifact_path: str = Field(description="the model file to deploy")
    input_spec: str = Field(description="the run's input spec; its first dim is the batch")
    out: str = Field(description="the Triton model repository folder to write")
    name: str = Field("model", description="the model's name in the repository")
    force: bool = Field(False, description="replace a non-empty repository folder")
    batches: list[int] | None = Field(None, min_length=1, description="batch sizes of the sweep")
    run_id: str | None = Field(None, description="the run it deploys")

    @field_validator("batches")
    @classmethod
    def _counts(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and min(v) < 1:
            raise ValueError("give numbers >= 1, e.g. [1, 4, 16]")
        return sorted(set(v)) if v is not None else None

    @field_validator("input_spec")
    @classmethod
    def _spec(cls, v: str) -> str:
        try:
            return str(_input_spec_text(v) or "")
        except InputSpecError as exc:
            raise ValueError(str(exc)) from None


def _explain(cls: type[JobParams], exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            known = set(cls.model_fields)
            if issubclass(cls, ModelJob):
                known |= {"input_spec", "trust_pickle"}
            msg = f"unknown parameter; known: {', '.join(sorted(known))}"
        elif err.get("type") == "missing":
            msg = "missing: this job needs it"
        elif where and "input" in err and err.get("type") != "missing":
            msg += f" (got {err['input']!r})"
        parts.append(f"{where}: {msg}" if where else msg)
    return f"{cls.kind} job: " + "; ".join(parts)
