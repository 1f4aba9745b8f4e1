"""A Triton Inference Server model repository for a run's final model artifact.

``write_repository(artifact, spec, out)`` lays out::

    OUT/NAME/config.pbtxt
    OUT/NAME/1/model.onnx | model.pt | model.plan | model.xml (+ .bin)

with the platform/backend that the runtime serving the artifact's kind names
(``Runtime.serve``: onnxruntime_onnx, pytorch_libtorch, tensorrt_plan, openvino), inputs
and outputs with their dtypes and dims from the input spec and the model itself,
``max_batch_size`` from the range of a symbolic first dim, an ``instance_group`` for the
device and ``dynamic_batching`` whose preferred batch sizes and queue delay come from a
measured batch sweep (``batch_sweep``). The config is a ``ModelConfig`` message of
Triton's own protobuf (``tritonclient``) written with protobuf's text format, never by
string formatting, and read back before anything is written; tensor names from the model
are checked, and the model file is loaded once with its runtime first.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import statistics
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.errors import AccelError
from accel.models.runtime import ServedModel, runtime_for_artifact


class DeployError(AccelError):
    """A run that cannot be deployed as asked; the message says what to change."""


TRITON_DTYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "bfloat16": "TYPE_BF16",
    "float64": "TYPE_FP64",
    "int64": "TYPE_INT64",
    "int32": "TYPE_INT32",
    "int16": "TYPE_INT16",
    "int8": "TYPE_INT8",
    "uint8": "TYPE_UINT8",
    "bool": "TYPE_BOOL",
}
# A model repository's folder name: Triton's own rule is looser, but this one keeps the
# name a single path component on every OS.
_MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class TensorConfig:
    name: str
    dtype: str  # numpy-style name: float32, int64, ...
    dims: tuple[int, ...]  # without the batch dim when max_batch_size > 0; -1 = variable


@dataclass(frozen=True)
class SweepPoint:
    batch: int
    latency_ms: float  # median of the timed calls
    throughput: float  # samples per second

    def to_dict(self) -> dict[str, float]:
        return {"batch": self.batch, "latency_ms": self.latency_ms, "throughput": self.throughput}


@dataclass
class TritonModel:
    name: str
    platform: str
    file_name: str
    inputs: list[TensorConfig]
    outputs: list[TensorConfig]
    max_batch_size: int = 0
    device: str = "cpu"
    preferred_batch_sizes: list[int] = field(default_factory=list)
    max_queue_delay_us: int = 0
    dynamic_batching: bool = True
    config_field: str = "platform"  # or "backend": the field of config.pbtxt naming it

    def config(self) -> Any:
        """The ModelConfig message (Triton's own protobuf, ``tritonclient``)."""
        pb = _model_config_pb2()
        cfg = pb.ModelConfig(name=self.name, max_batch_size=self.max_batch_size)
        setattr(cfg, self.config_field, self.platform)
        for section, tensors in ((cfg.input, self.inputs), (cfg.output, self.outputs)):
            for t in tensors:
                section.add(
                    name=t.name, data_type=pb.DataType.Value(TRITON_DTYPES[t.dtype]), dims=t.dims
                )
        if self.device.startswith("cuda"):
            gpu = int(self.device.split(":", 1)[1]) if ":" in self.device else 0
            cfg.instance_group.add(kind=pb.ModelInstanceGroup.KIND_GPU, gpus=[gpu])
        else:
            cfg.instance_group.add(kind=pb.ModelInstanceGroup.KIND_CPU, count=1)
        if self.dynamic_batching and self.max_batch_size > 0:
            cfg.dynamic_batching.SetInParent()
            cfg.dynamic_batching.preferred_batch_size.extend(self.preferred_batch_sizes)
            cfg.dynamic_batching.max_queue_delay_microseconds = self.max_queue_delay_us
        return cfg

    def config_pbtxt(self) -> str:
        """config.pbtxt: the message in protobuf's text format (every name escaped by
        protobuf, never formatted into the text by hand)."""
        from google.protobuf import text_format

        return text_format.MessageToString(self.config())


def _model_config_pb2() -> Any:
    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError as exc:
        raise DeployError(
            "writing a Triton config needs tritonclient[grpc]: pip install 'accel-studio[serve]'"
        ) from exc
    return model_config_pb2


def check_model_name(name: str) -> str:
    """``name`` when it can name a model folder of a repository (``[A-Za-z0-9_.-]``, not
    ``.`` or ``..``), else a DeployError saying what to change."""
    if not _MODEL_NAME.fullmatch(name) or name in (".", ".."):
        raise DeployError(
            f"model name {name!r} is not allowed: use letters, digits, '_', '-' and '.' only"
        )
    return name


def check_tensor_name(name: str) -> str:
    """A tensor name read from a model, refused when it holds a control character (a
    newline, a NUL): Triton matches names as given, and a name that spans lines is no
    name a client can send."""
    bad = [c for c in name if unicodedata.category(c) == "Cc"]
    if not name or bad:
        raise DeployError(
            f"the model has a tensor named {name!r}, which Triton cannot serve "
            f"({'an empty name' if not name else 'control characters ' + repr(bad)}); rename "
            "the tensor in the model (e.g. re-export it with plain output names)"
        )
    return name


def parse_config(text: str) -> Any:
    """Parse ``config.pbtxt`` text with Triton's ModelConfig protobuf (raises DeployError)."""
    from google.protobuf import text_format

    model_config_pb2 = _model_config_pb2()
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise DeployError(f"the generated config.pbtxt does not parse: {exc}") from exc


def servable_artifact(artifacts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The last artifact of ``artifacts`` (in step order) that Triton can serve."""
    for a in reversed(list(artifacts)):
        if runtime_for_artifact(str(a.get("kind"))) is not None and a.get("path"):
            return dict(a)
    return None


def batch_spec(spec: Any) -> tuple[str | None, int]:
    """(name of the batch dim, its max) when every input's first dim is the same symbolic
    dim; else (None, 0): the model is served without batching."""
    firsts = {t.shape[0] if t.shape else None for t in spec.inputs}
    if len(firsts) != 1:
        return None, 0
    first = next(iter(firsts))
    if not isinstance(first, str):
        return None, 0
    return first, int(spec.dims[first].max)


# -- the model, loaded once by its runtime -----------------------------------------------------
def load_runtime(
    kind: str, path: str | Path, device: str = "cpu", *, threads: int | None = None
) -> ServedModel:
    """Load a run artifact of ``kind`` once with the runtime that serves it (its tensors'
    names, a run, the files Triton reads); ``threads``: the runtime's threads (default:
    its own, one per core)."""
    runtime = runtime_for_artifact(kind)
    if runtime is None:
        raise DeployError(f"artifact kind {kind!r} cannot be served by Triton")
    p = Path(path)
    if not p.is_file():
        raise DeployError(f"the model file {p} is gone (was the run folder deleted?)")
    try:
        return runtime.serve(p, device, threads)
    except Exception as exc:
        raise DeployError(
            f"{path} ({kind}) does not load with its runtime: {type(exc).__name__}: {exc}"
        ) from exc


def tensor_configs(
    runtime: ServedModel, spec: Any, max_batch: int, sample: Mapping[str, Any]
) -> tuple[list[TensorConfig], list[TensorConfig]]:
    """Inputs (names as the runtime wants them, dtypes and dims from the spec) and outputs
    (from the model); without the batch dim when ``max_batch`` > 0, -1 for variable dims."""

    def dims_of(shape: Sequence[Any]) -> tuple[int, ...]:
        dims = [d if isinstance(d, int) and d > 0 else -1 for d in shape]
        return tuple(dims[1:] if max_batch else dims)

    in_names = runtime.input_names(spec)
    try:
        out_tensors = runtime.outputs(spec, sample)
    except AccelError as exc:  # e.g. a TensorRT plan on a machine without its GPU
        raise DeployError(str(exc)) from exc
    inputs = [
        TensorConfig(check_tensor_name(n), t.dtype, dims_of(t.shape))
        for n, t in zip(in_names, spec.inputs, strict=False)
    ]
    outputs = [
        TensorConfig(check_tensor_name(n), dt, dims_of(shape)) for n, dt, shape in out_tensors
    ]
    for t in [*inputs, *outputs]:
        if t.dtype not in TRITON_DTYPES:
            raise DeployError(f"tensor {t.name} has dtype {t.dtype}, which Triton cannot serve")
    return inputs, outputs


def batch_sweep(
    run: Callable[[int], Any],
    batches: Sequence[int],
    *,
    warmup: int = 2,
    iters: int = 10,
    clock: Callable[[], float] = time.perf_counter,
) -> list[SweepPoint]:
    """Median latency and throughput of ``run(batch)`` per batch size."""
    points = []
    for b in batches:
        for _ in range(warmup):
            run(b)
        times = []
        for _ in range(iters):
            t0 = clock()
            run(b)
            times.append(clock() - t0)
        med = statistics.median(times)
        points.append(SweepPoint(b, med * 1e3, b / med if med > 0 else float("inf")))
    return points


WAIT_GAIN = 1.5  # choose_batching: the sweep gain at which a request is worth holding back


def choose_batching(
    points: Sequence[SweepPoint], gain: float = 1.1, wait_gain: float = WAIT_GAIN
) -> tuple[list[int], int]:
    """``dynamic_batching`` from a direct batch sweep: (preferred batch sizes, queue delay µs).

    When batching gains at least ``wait_gain`` (best sweep throughput over batch 1; a GPU, a
    small model): preferred sizes are each size whose throughput beats the best smaller one
    by ``gain``, and the queue delay is half the batch-1 latency, between 100 µs and 10 ms (a
    lone request waits at most that long for others).

    Below it (a CPU-bound model on few cores): no preferred sizes and no delay, Triton's own
    recommended start. The batcher then runs whatever is queued as one batch, as large as the
    queue, and holds no request back. Measured on zoo:transformer (2 cores, 1 instance, 2 ORT
    threads, sweep gain 1.19x, served with 1/4/16 clients): the delay-free batcher beat a
    2.1 ms delay at every client count (1 client: 131 vs 101 req/s; 16: 213 vs 200), and
    preferred sizes [2, 4, 8] cut the batches Triton formed at 16 clients from 7.9 to 4.0
    requests (200 vs 215 req/s): larger batches spread the served path's per-batch cost,
    which the direct sweep does not see."""
    if not points:
        return [], 0
    pts = sorted(points, key=lambda p: p.batch)
    one = pts[0].throughput
    if one <= 0 or max(p.throughput for p in pts) < one * wait_gain:
        return [], 0
    preferred, best = [], one
    for p in pts[1:]:
        if p.throughput >= best * gain:
            preferred.append(p.batch)
            best = p.throughput
    delay = int(min(10_000, max(100, pts[0].latency_ms * 1e3 / 2)))
    return preferred, delay


def default_batches(max_batch: int) -> list[int]:
    out = [b for b in (1, 2, 4, 8, 16, 32) if b <= max_batch]
    return out or [1]


@dataclass
class DeployResult:
    model_dir: Path
    config: str
    model: TritonModel
    sweep: list[SweepPoint]

    def to_dict(self) -> dict[str, Any]:
        return self.report().to_dict()

    def report(self) -> DeployReport:
        m = self.model
        return DeployReport(
            model_dir=str(self.model_dir),
            name=m.name,
            platform=m.platform,
            max_batch_size=m.max_batch_size,
            preferred_batch_sizes=list(m.preferred_batch_sizes),
            max_queue_delay_us=m.max_queue_delay_us,
            sweep=list(self.sweep),
            config=self.config,
        )


@dataclass(frozen=True)
class DeployReport:
    """What a deploy wrote, as the worker job hands it back (JSON both ways)."""

    model_dir: str
    name: str
    platform: str
    max_batch_size: int
    preferred_batch_sizes: list[int]
    max_queue_delay_us: int
    sweep: list[SweepPoint]
    config: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["sweep"] = [p.to_dict() for p in self.sweep]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeployReport:
        fields = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in d.items() if k in fields}
        data["sweep"] = [SweepPoint(**p) for p in d.get("sweep") or []]
        return cls(**data)


def _batching(
    runtime: ServedModel,
    spec: Any,
    batch_dim: str | None,
    max_batch: int,
    batches: Sequence[int] | None,
    sweep_iters: int,
) -> tuple[list[SweepPoint], list[int], int]:
    """(the batch sweep, preferred batch sizes, queue delay µs) for ``dynamic_batching``:
    measured when the model batches and runs here, else none."""
    if not max_batch or not runtime.batch_sweep:
        return [], [], 0
    samples = {b: spec.sample(dims={batch_dim: b}) for b in (batches or default_batches(max_batch))}
    sweep = batch_sweep(lambda b: runtime.run(samples[b]), list(samples), iters=sweep_iters)
    preferred, delay = choose_batching(sweep)
    return sweep, preferred, delay


def _checked_config(model: TritonModel) -> str:
    """config.pbtxt of ``model``, parsed back with Triton's ModelConfig: the names it holds
    must be exactly the model's."""
    text = model.config_pbtxt()
    cfg = parse_config(text)
    names = ([i.name for i in cfg.input], [o.name for o in cfg.output])
    if names != ([t.name for t in model.inputs], [t.name for t in model.outputs]):
        raise DeployError(f"config.pbtxt does not read back the model's tensor names: {names}")
    return text


def write_repository(
    artifact: Mapping[str, Any],
    spec: Any,
    out: str | Path,
    *,
    name: str = "model",
    device: str = "cpu",
    force: bool = False,
    batches: Sequence[int] | None = None,
    sweep_iters: int = 10,
) -> DeployResult:
    """Write the Triton model repository ``out`` for ``artifact`` (``{"kind", "path"}``)
    with input spec ``spec`` (an ``accel.models.InputSpec``)."""
    kind = str(artifact.get("kind"))
    name = check_model_name(name)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise DeployError(f"{out} exists and is not empty: pick another folder or pass --force")
    runtime = load_runtime(kind, artifact["path"], device)
    batch_dim, max_batch = batch_spec(spec)
    sample = spec.sample(dims={batch_dim: 1} if batch_dim else None)
    try:
        runtime.run(sample)
    except AccelError as exc:  # the runtime says why (a TensorRT plan without its GPU)
        raise DeployError(str(exc)) from exc
    except Exception as exc:
        raise DeployError(
            f"{artifact['path']} does not run on inputs of the spec {spec}: {exc}"
        ) from exc
    inputs, outputs = tensor_configs(runtime, spec, max_batch, sample)
    sweep, preferred, delay = _batching(runtime, spec, batch_dim, max_batch, batches, sweep_iters)
    model = TritonModel(
        name=name,
        platform=runtime.platform,
        file_name=runtime.file_name,
        inputs=inputs,
        outputs=outputs,
        max_batch_size=max_batch,
        device=device,
        preferred_batch_sizes=preferred,
        max_queue_delay_us=delay,
        config_field=runtime.config_field,
    )
    text = _checked_config(model)
    if out.exists() and force:
        shutil.rmtree(out)
    version = out / name / "1"
    version.mkdir(parents=True)
    runtime.write(version, [t.name for t in inputs])
    (out / name / "config.pbtxt").write_text(text, encoding="utf-8")
    return DeployResult(out / name, text, model, sweep)
