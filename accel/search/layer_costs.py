"""Per-layer mixed precision by measured cost, for the OpenVINO (NNCF ``ignored_scope``) and
ONNX Runtime (``nodes_to_exclude``) quantizers.

A layer is worth keeping in float only when both measurements say so: its int8 error is
high (the sensitivity analysis: the model's output with only that layer quantized, see
accel.sensitivity) and its int8 speedup is low (the layer's time in the quantizer's own
runtime, float model against int8 model, from that runtime's per-op profile grouped by the
torch module each op came from). Keeping a sensitive layer that int8 makes much faster
costs more speed than it buys parity; keeping one int8 barely speeds up costs nothing.

``cost_exclude_set`` is the search's ``cost`` exclude set (accel.search.sensitivity_space,
``--allow sensitivity``). A layer whose time could not be attributed (op names without a
module path) is never chosen: an unmeasured speedup is not a low one.
"""

from __future__ import annotations

import copy
import logging
import math
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# The quantizer's runtime: steps that build the float model, then the quantizer itself.
FLOAT_STEPS: dict[str, list[dict[str, Any]]] = {
    "quantize_openvino": [{"pass": "openvino", "params": {"precision": "f32"}}],
    "quantize_onnx_static": [{"pass": "export_onnx", "params": {}}],
    "quantize_onnx_dynamic": [{"pass": "export_onnx", "params": {}}],
}
MAX_SPEEDUP = 1.25  # int8 speeds a layer up less than this: a "low" speedup
TOP_ERROR = 0.25  # the most sensitive quarter of the analysed layers: a "high" error
MAX_FRACTION = 0.1  # never keep more than this share of the quantized layers in float


@dataclass(frozen=True)
class LayerCost:
    """One layer's measured int8 error (1 - output cosine with only it quantized) and its
    times (ms per forward, summed over the ops it became) in float and in int8."""

    name: str
    error: float
    float_ms: float | None = None
    int8_ms: float | None = None

    @property
    def speedup(self) -> float | None:
        if not self.float_ms or not self.int8_ms:
            return None
        return self.float_ms / self.int8_ms

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup}


def onnx_path_of(paths: dict[str, str]) -> Callable[[str], str]:
    """Module path of an ONNX Runtime profile row, from the exported graph's node -> module
    paths: the row is that node ("fused node_linear") or a node the quantizer made from it
    ("node_linear_1_MatMul_quant": the longest node name it extends)."""
    names = sorted((n for n, p in paths.items() if p), key=len, reverse=True)

    def path_of(row: str) -> str:
        row = row.removeprefix("fused ")
        if paths.get(row):
            return paths[row]
        return next((paths[n] for n in names if row.startswith(n + "_")), "")

    return path_of


def module_times(
    rows: Iterable[tuple[str, float]], path_of: Callable[[str], str] | None = None
) -> dict[str, float]:
    """Profile rows (op name, self ms) summed per torch module path (ops without one dropped).
    ``path_of``: op name -> module path (default: the OpenVINO / TorchScript-exporter names)."""
    if path_of is None:
        from accel.graph.op_names import op_module_path as path_of

    out: dict[str, float] = {}
    for name, ms in rows:
        path = path_of(name)
        if path and ms is not None and math.isfinite(ms):
            out[path] = out.get(path, 0.0) + float(ms)
    return out


def _time_of(times: dict[str, float], layer: str) -> float | None:
    """A layer's time: its own ops and those of modules inside it."""
    hits = [ms for path, ms in times.items() if path == layer or path.startswith(layer + ".")]
    return sum(hits) if hits else None


def layer_costs(
    errors: dict[str, float], float_times: dict[str, float], int8_times: dict[str, float]
) -> list[LayerCost]:
    """Costs of the analysed layers, most sensitive first."""
    costs = [
        LayerCost(name, err, _time_of(float_times, name), _time_of(int8_times, name))
        for name, err in errors.items()
    ]
    return sorted(costs, key=lambda c: (-c.error, c.name))


def choose_float_layers(
    costs: list[LayerCost],
    n_layers: int,
    *,
    max_speedup: float = MAX_SPEEDUP,
    top_error: float = TOP_ERROR,
    max_fraction: float = MAX_FRACTION,
) -> list[str]:
    """The layers to keep in float: in the most sensitive ``top_error`` share of the
    analysed layers (error above zero) and sped up by int8 less than ``max_speedup``
    (measured); the most error per millisecond int8 saves first, at most ``max_fraction`` of
    the ``n_layers`` quantized layers (at least one)."""
    if not costs or n_layers < 2:
        return []
    ranked = sorted(costs, key=lambda c: -c.error)
    high = ranked[: max(1, math.ceil(top_error * len(ranked)))]
    chosen = [c for c in high if c.error > 0 and c.speedup is not None and c.speedup < max_speedup]
    chosen.sort(key=lambda c: -c.error / max(1e-6, (c.float_ms or 0) - (c.int8_ms or 0)))
    limit = max(1, math.floor(max_fraction * n_layers))
    return [c.name for c in chosen[:limit]]


def _build(model: Any, steps: list[dict[str, Any]], work: Path, data: Any) -> Any:
    """The model after ``steps`` (in this process, as a trial would build it)."""
    from accel.passes import PassContext, get_pass

    current = (
        model.replace(module=copy.deepcopy(model.module)) if model.module is not None else model
    )
    inputs = model.input_spec.sample(seed=0)
    for i, step in enumerate(steps):
        cls = get_pass(step["pass"])
        ctx = PassContext(
            inputs=inputs, work_dir=work / f"step_{i}", original=model, calibration=data
        )
        ctx.work_dir.mkdir(parents=True, exist_ok=True)
        current = cls().apply(current, cls.parse_config(step["params"]), ctx)
    return current


def quantizer_steps(quantizer: str) -> list[dict[str, Any]]:
    """The float steps and the quantizer with the parameters a search trial gives it
    (its ``SearchSpec.fixed``: e.g. 32 OpenVINO calibration samples rather than the
    pass's 64; the int8 kernels' times do not depend on how well they are calibrated)."""
    from accel.passes import get_pass

    spec = get_pass(quantizer).search
    params = dict(spec.fixed) if spec is not None else {}
    return [*FLOAT_STEPS[quantizer], {"pass": quantizer, "params": params}]


def measure_module_times(
    model: Any, quantizer: str, *, threads: int | None = 1, iters: int = 10, data: Any = None
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-module times (ms) of the float and the int8 model in ``quantizer``'s runtime."""
    from accel.profile import profile_model

    steps = FLOAT_STEPS[quantizer]
    inputs = model.example_inputs()
    with tempfile.TemporaryDirectory(prefix="layer_costs_") as tmp:
        work = Path(tmp)
        float_model = _build(model, steps, work / "float", data)
        int8_model = _build(model, quantizer_steps(quantizer), work / "int8", data)
        path_of = None
        if float_model.onnx_path is not None:  # an ONNX graph: map its nodes to modules
            import onnx

            from accel.passes._onnx_quant_helpers import onnx_module_paths

            graph = onnx.load(str(float_model.onnx_path), load_external_data=False).graph
            path_of = onnx_path_of(onnx_module_paths(graph))
        out = []
        for m in (float_model, int8_model):
            prof = profile_model(m, inputs, iters=iters, warmup=2, ops=False, threads=threads)
            out.append(module_times(((r.name, r.self_ms) for r in prof.rows), path_of))
    return out[0], out[1]


def cost_exclude_set(
    model: Any, quantizer: str, report: Any, n_layers: int, *, threads: int | None = 1
) -> tuple[list[str], list[dict[str, Any]]]:
    """The ``cost`` exclude set of ``quantizer`` and the measured costs behind it."""
    errors = {
        layer.name: 1.0 - float(layer.cosine)
        for layer in report.layers
        if layer.error is None and layer.cosine is not None
    }
    float_times, int8_times = measure_module_times(model, quantizer, threads=threads)
    costs = layer_costs(errors, float_times, int8_times)
    chosen = choose_float_layers(costs, n_layers)
    return chosen, [c.to_dict() for c in costs]
