"""A Triton Inference Server model repository for a run's final model artifact.

``write_repository(artifact, spec, out)`` lays out::

    OUT/NAME/config.pbtxt
    OUT/NAME/1/model.onnx | model.pt | model.plan | model.xml (+ .bin)

with the platform/backend for the artifact's kind (onnxruntime_onnx, pytorch_libtorch,
tensorrt_plan, openvino), inputs and outputs with their dtypes and dims from the input
spec and the model itself, ``max_batch_size`` from the range of a symbolic first dim, an
``instance_group`` for the device and ``dynamic_batching`` whose preferred batch sizes and
queue delay come from a measured batch sweep (``batch_sweep``). The config is checked by
parsing it with Triton's own ``ModelConfig`` protobuf (``tritonclient``), and the model
file is loaded once with its runtime before anything is written.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.errors import AccelError


class DeployError(AccelError):
    """A run that cannot be deployed as asked; the message says what to change."""


# Artifact kind -> (Triton platform or backend, file name in the version folder).
TRITON_KINDS: dict[str, tuple[str, str]] = {
    "onnx": ("onnxruntime_onnx", "model.onnx"),
    "onnx_optimized": ("onnxruntime_onnx", "model.onnx"),
    "torchscript": ("pytorch_libtorch", "model.pt"),
    "tensorrt_engine": ("tensorrt_plan", "model.plan"),
    "tensorrt_plan": ("tensorrt_plan", "model.plan"),
    "openvino": ("openvino", "model.xml"),
    "openvino_ir": ("openvino", "model.xml"),
}
# Platforms named with "backend:" in config.pbtxt rather than "platform:".
BACKENDS = {"openvino"}

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
_ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


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

    def config_pbtxt(self) -> str:
        key = "backend" if self.platform in BACKENDS else "platform"
        lines = [f'name: "{self.name}"', f'{key}: "{self.platform}"']
        lines.append(f"max_batch_size: {self.max_batch_size}")
        for section, tensors in (("input", self.inputs), ("output", self.outputs)):
            lines.append(f"{section} [")
            body = []
            for t in tensors:
                dims = ", ".join(str(d) for d in t.dims)
                body.append(
                    f'  {{\n    name: "{t.name}"\n    data_type: {TRITON_DTYPES[t.dtype]}\n'
                    f"    dims: [ {dims} ]\n  }}"
                )
            lines.append(",\n".join(body))
            lines.append("]")
        if self.device.startswith("cuda"):
            gpu = self.device.split(":", 1)[1] if ":" in self.device else "0"
            lines.append(
                f"instance_group [\n  {{\n    kind: KIND_GPU\n    gpus: [ {gpu} ]\n  }}\n]"
            )
        else:
            lines.append("instance_group [\n  {\n    kind: KIND_CPU\n    count: 1\n  }\n]")
        if self.dynamic_batching and self.max_batch_size > 0:
            sizes = ", ".join(str(b) for b in self.preferred_batch_sizes)
            block = ["dynamic_batching {"]
            if sizes:
                block.append(f"  preferred_batch_size: [ {sizes} ]")
            block.append(f"  max_queue_delay_microseconds: {self.max_queue_delay_us}")
            block.append("}")
            lines.append("\n".join(block))
        return "\n".join(lines) + "\n"


def parse_config(text: str) -> Any:
    """Parse ``config.pbtxt`` text with Triton's ModelConfig protobuf (raises DeployError)."""
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError as exc:
        raise DeployError(
            "checking a Triton config needs tritonclient[grpc]: pip install 'accel-studio[serve]'"
        ) from exc
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise DeployError(f"the generated config.pbtxt does not parse: {exc}") from exc


def servable_artifact(artifacts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The last artifact of ``artifacts`` (in step order) that Triton can serve."""
    for a in reversed(list(artifacts)):
        if a.get("kind") in TRITON_KINDS and a.get("path"):
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


# -- runtimes: load the model once, describe its tensors, run it -------------------------------
class _Runtime:
    def __init__(self, kind: str, path: Path, device: str, threads: int | None = None) -> None:
        self.kind, self.path, self.device = kind, path, device
        platform = TRITON_KINDS[kind][0]
        try:
            if platform == "onnxruntime_onnx":
                import onnxruntime as ort

                opts = ort.SessionOptions()
                opts.log_severity_level = 3
                if threads:
                    opts.intra_op_num_threads = threads
                self.session = ort.InferenceSession(
                    str(path), opts, providers=["CPUExecutionProvider"]
                )
            elif platform == "pytorch_libtorch":
                import torch

                self.module = torch.jit.load(str(path), map_location="cpu").eval()
            elif platform == "openvino":
                import openvino as ov

                self.compiled = ov.Core().compile_model(str(path), "CPU")
            else:
                self.session = None  # TensorRT plans load only on their GPU
        except DeployError:
            raise
        except Exception as exc:
            raise DeployError(
                f"{path} ({kind}) does not load with its runtime: {type(exc).__name__}: {exc}"
            ) from exc
        self.platform = platform

    def outputs(self, spec: Any, sample: Mapping[str, Any]) -> list[tuple[str, str, list[Any]]]:
        """(name, dtype, shape) of each output; shape entries may be None or names."""
        if self.platform == "onnxruntime_onnx":
            return [
                (o.name, _ORT_DTYPES.get(o.type, "float32"), list(o.shape))
                for o in self.session.get_outputs()
            ]
        out = self.run(sample)
        names = (
            [ov_tensor_name(o, f"OUTPUT__{i}") for i, o in enumerate(self.compiled.outputs)]
            if self.platform == "openvino"
            else [f"OUTPUT__{i}" for i in range(len(out))]
        )
        return [
            (n, str(v.dtype).removeprefix("torch."), list(v.shape))
            for n, v in zip(names, out, strict=True)
        ]

    def input_names(self, spec: Any) -> list[str]:
        if self.platform == "onnxruntime_onnx":
            return [i.name for i in self.session.get_inputs()]
        if self.platform == "pytorch_libtorch":
            return [f"INPUT__{i}" for i in range(len(spec.inputs))]
        if self.platform == "openvino":
            return [ov_tensor_name(t, n) for t, n in zip(self.compiled.inputs, spec.names)]
        return list(spec.names)

    def run(self, sample: Mapping[str, Any]) -> list[Any]:
        if self.platform == "onnxruntime_onnx":
            feeds = {k: v.numpy() if hasattr(v, "numpy") else v for k, v in sample.items()}
            names = {i.name for i in self.session.get_inputs()}
            return self.session.run(None, {k: v for k, v in feeds.items() if k in names})
        if self.platform == "pytorch_libtorch":
            import torch

            with torch.inference_mode():
                out = self.module(*sample.values())
            return list(out) if isinstance(out, tuple | list) else [out]
        if self.platform == "openvino":
            res = self.compiled([v.numpy() for v in sample.values()])
            return [res[o] for o in self.compiled.outputs]
        if self.platform == "tensorrt_plan":
            raise DeployError(
                "a TensorRT plan loads only on a CUDA GPU like the one it was built on: run "
                "`studio deploy` on that machine (this one has no CUDA)"
            )
        raise DeployError(f"cannot run a {self.platform} model on this machine")


def ov_tensor_name(port: Any, fallback: str) -> str:
    """An OpenVINO port's tensor name; ``fallback`` for an unnamed one (a model converted
    from torch has unnamed outputs; ``_write_model`` gives them that name in the copy)."""
    names = port.get_names()
    return port.get_any_name() if names else fallback


def _write_model(src: Path, version: Path, file_name: str, input_names: Sequence[str]) -> None:
    """Copy the model file (and its weights / external data) into the version folder.

    Triton's OpenVINO backend finds inputs and outputs by tensor name, so an IR with unnamed
    tensors is written with the names its config uses (the spec's input names, OUTPUT__i, as
    ``tensor_configs`` reads them back with ``ov_tensor_name``)."""
    if src.suffix == ".xml":
        import openvino as ov

        model = ov.Core().read_model(str(src))
        unnamed = [p for p in [*model.inputs, *model.outputs] if not p.get_names()]
        if unnamed:
            for p, n in zip(model.inputs, input_names):
                if not p.get_names():
                    p.get_tensor().set_names({n})
            for i, p in enumerate(model.outputs):
                if not p.get_names():
                    p.get_tensor().set_names({f"OUTPUT__{i}"})
            ov.save_model(model, str(version / file_name), compress_to_fp16=False)
            return
    shutil.copy2(src, version / file_name)
    for extra in (src.with_name(src.name + ".data"), src.with_suffix(".bin")):
        if extra.is_file() and extra != src:  # ONNX external data, OpenVINO weights
            target = extra.name if extra.suffix == ".data" else Path(file_name).with_suffix(".bin")
            shutil.copy2(extra, version / target)


def load_runtime(
    kind: str, path: str | Path, device: str = "cpu", *, threads: int | None = None
) -> _Runtime:
    """Load a model file once with its runtime; ``threads``: ONNX Runtime's intra-op threads
    (default: ORT's, one per core)."""
    if kind not in TRITON_KINDS:
        raise DeployError(f"artifact kind {kind!r} cannot be served by Triton")
    p = Path(path)
    if not p.is_file():
        raise DeployError(f"the model file {p} is gone (was the run folder deleted?)")
    return _Runtime(kind, p, device, threads)


def tensor_configs(
    runtime: _Runtime, spec: Any, max_batch: int, sample: Mapping[str, Any]
) -> tuple[list[TensorConfig], list[TensorConfig]]:
    """Inputs (names as the runtime wants them, dtypes and dims from the spec) and outputs
    (from the model); without the batch dim when ``max_batch`` > 0, -1 for variable dims."""

    def dims_of(shape: Sequence[Any]) -> tuple[int, ...]:
        dims = [d if isinstance(d, int) and d > 0 else -1 for d in shape]
        return tuple(dims[1:] if max_batch else dims)

    in_names = runtime.input_names(spec)
    inputs = [
        TensorConfig(n, t.dtype, dims_of(t.shape))
        for n, t in zip(in_names, spec.inputs, strict=False)
    ]
    outputs = [
        TensorConfig(n, dt, dims_of(shape)) for n, dt, shape in runtime.outputs(spec, sample)
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
        return {
            "model_dir": str(self.model_dir),
            "name": self.model.name,
            "platform": self.model.platform,
            "max_batch_size": self.model.max_batch_size,
            "preferred_batch_sizes": self.model.preferred_batch_sizes,
            "max_queue_delay_us": self.model.max_queue_delay_us,
            "sweep": [p.to_dict() for p in self.sweep],
        }


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
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise DeployError(f"{out} exists and is not empty: pick another folder or pass --force")
    runtime = load_runtime(kind, artifact["path"], device)
    platform, file_name = TRITON_KINDS[kind]
    batch_dim, max_batch = batch_spec(spec)
    sample = spec.sample(dims={batch_dim: 1} if batch_dim else None)
    try:
        runtime.run(sample)
    except DeployError:
        raise
    except Exception as exc:
        raise DeployError(
            f"{artifact['path']} does not run on inputs of the spec {spec}: {exc}"
        ) from exc

    inputs, outputs = tensor_configs(runtime, spec, max_batch, sample)

    sweep: list[SweepPoint] = []
    preferred: list[int] = []
    delay = 0
    if max_batch and platform != "tensorrt_plan":
        samples = {
            b: spec.sample(dims={batch_dim: b}) for b in (batches or default_batches(max_batch))
        }
        sweep = batch_sweep(lambda b: runtime.run(samples[b]), list(samples), iters=sweep_iters)
        preferred, delay = choose_batching(sweep)
    model = TritonModel(
        name=name,
        platform=platform,
        file_name=file_name,
        inputs=inputs,
        outputs=outputs,
        max_batch_size=max_batch,
        device=device,
        preferred_batch_sizes=preferred,
        max_queue_delay_us=delay,
    )
    text = model.config_pbtxt()
    parse_config(text)

    if out.exists() and force:
        shutil.rmtree(out)
    version = out / name / "1"
    version.mkdir(parents=True)
    _write_model(Path(artifact["path"]), version, file_name, [t.name for t in inputs])
    (out / name / "config.pbtxt").write_text(text, encoding="utf-8")
    return DeployResult(out / name, text, model, sweep)
