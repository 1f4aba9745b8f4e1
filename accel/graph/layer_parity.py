"""Per-layer parity: find the first layer where an optimized model drifts from the original.

Both models run on the same inputs and every module's output is captured under its
module path: torch models through forward hooks, ONNX models by adding the outputs of
the last node of every module namespace (``/layer1/conv/Conv`` -> ``layer1.conv``)
as extra graph outputs of a copy of the model. Layers with the same path are
compared with ``accel.parity.compare`` in the original's execution order (a module's
output is ready when its forward returns, so inner layers come before their parents)
and the first one outside the tolerances is reported — Polygraphy's layer-wise
comparison, for PyTorch too.

Fused layers: when the optimized model lost a layer (BatchNorm folded into the conv,
a Dropout/Identity removed, a layer that passes its input through), the surviving
layer's output is the output of the whole fused run, so it is compared with the
original output of the run's last layer (reported as ``conv+bn``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class LayerResult:
    """One compared layer. ``name`` is the module path (``a+b`` for a fused run)."""

    name: str
    index: int  # position in the original's execution order
    passed: bool
    reason: str | None = None
    shape_a: list[int] | None = None
    shape_b: list[int] | None = None
    max_abs: float | None = None
    mean_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None
    module_paths: list[str] = field(default_factory=list)  # original layers this row covers


@dataclass
class LayerParityReport:
    layers: list[LayerResult] = field(default_factory=list)
    first_failure: str | None = None  # module path of the first failing layer
    only_a: list[str] = field(default_factory=list)  # layers the optimized model lacks
    only_b: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    atol: float = 0.0
    rtol: float = 0.0

    @property
    def passed(self) -> bool:
        return self.first_failure is None

    def first_failing(self) -> LayerResult | None:
        return next((r for r in self.layers if not r.passed), None)

    def module_errors(self, metric: str = "max_abs") -> dict[str, float]:
        """Per-module error (module path -> value) to paint on the graph."""
        out: dict[str, float] = {}
        for r in self.layers:
            v = getattr(r, metric)
            if v is not None:
                for p in r.module_paths or [r.name]:
                    out[p] = float(v)
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LayerParityReport:
        d = dict(d)
        d["layers"] = [LayerResult(**r) for r in d.get("layers", [])]
        return cls(**d)

    def format_table(self, only_failures: bool = False) -> str:
        lines = [f"{'#':>4}  {'layer':<40} {'shape':<18} {'max_abs':>10} {'cosine':>10}  status"]
        for r in self.layers:
            if only_failures and r.passed:
                continue
            shape = "x".join(str(d) for d in (r.shape_a or []))
            mx = f"{r.max_abs:.3g}" if r.max_abs is not None else "-"
            cos = f"{r.cosine:.6f}" if r.cosine is not None else "-"
            status = "ok" if r.passed else f"FAIL {r.reason or ''}".strip()
            lines.append(
                f"{r.index:>4}  {r.name[:40]:<40} {shape[:18]:<18} {mx:>10} {cos:>10}  {status}"
            )
        return "\n".join(lines)


# ---- capturing layer outputs ----------------------------------------------------------------


def _first_tensor(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, list | tuple):
        for v in x:
            t = _first_tensor(v)
            if t is not None:
                return t
    if isinstance(x, Mapping):
        for v in x.values():
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def torch_layer_outputs(
    module: Any, inputs: Mapping[str, Any], prepare: Any = None
) -> tuple[dict[str, Any], set[str]]:
    """Outputs of every submodule (first call), in completion order, and the names of
    modules that returned their input unchanged (Identity-like)."""
    import torch

    outs: dict[str, Any] = {}
    passthrough: set[str] = set()

    def hook(path: str):
        def fn(_m: Any, inp: Any, out: Any) -> None:
            if path in outs:
                return
            t = _first_tensor(out)
            if t is None:
                return
            if any(t is i for i in (inp if isinstance(inp, tuple) else (inp,))):
                passthrough.add(path)
            outs[path] = t.detach().cpu().clone()

        return fn

    handles = [m.register_forward_hook(hook(p)) for p, m in module.named_modules() if p]
    try:
        feed = prepare(inputs) if prepare else dict(inputs)
        with torch.inference_mode():
            module(*feed.values())
    finally:
        for h in handles:
            h.remove()
    return outs, passthrough


def fx_layer_outputs(gm: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Per-module outputs of a flat GraphModule (``ExportedProgram.module()``) whose nodes
    carry ``nn_module_stack``: the value of the last node of each module, in completion order."""
    import torch

    from accel.graph.model import ancestors

    last: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        stack = node.meta.get("nn_module_stack") or {}
        if not stack:
            continue
        entry = list(stack.values())[-1]
        path = entry[0] if isinstance(entry, tuple) else str(entry)
        for p in ancestors(path)[1:]:
            last.pop(p, None)  # re-insert: dict order becomes completion order
            last[p] = node.name
    wanted = set(last.values())
    captured: dict[str, Any] = {}

    class Capture(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            if n.name in wanted:
                t = _first_tensor(out)
                if t is not None:
                    captured[n.name] = t.detach().cpu().clone()
            return out

    with torch.inference_mode():
        Capture(gm).run(*inputs.values())
    return {p: captured[n] for p, n in last.items() if n in captured}


def _is_script(model: Any) -> bool:
    import torch

    return isinstance(getattr(model, "module", model), torch.jit.ScriptModule)


def _is_flat_exported(module: Any) -> bool:
    import torch

    if not isinstance(module, torch.fx.GraphModule):
        return False
    return any(n.meta.get("nn_module_stack") for n in module.graph.nodes)


def onnx_layer_outputs(model: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Outputs of every module namespace of an ONNX model (last node of each), in node order."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    from accel.graph.from_onnx import module_path_of
    from accel.graph.model import ancestors

    path = Path(getattr(model, "onnx_path", None) or model)
    proto = onnx.load(str(path))
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # shapes only help declare the extra outputs
        inferred = proto
    vinfo = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    # Floating types: a quantized model's (Dynamic)QuantizeLinear outputs integers, the
    # layer's value is the last floating tensor of its namespace.
    floating = {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.BFLOAT16,
        onnx.TensorProto.DOUBLE,
    }
    last: dict[str, str] = {}  # module path -> tensor name of its last node's first output
    for node in proto.graph.node:
        if not node.output or not node.output[0] or node.op_type == "Constant":
            continue
        vi = vinfo.get(node.output[0])
        if vi is not None and vi.type.tensor_type.elem_type not in (0, *floating):
            continue
        mp = module_path_of(node)
        for p in ancestors(mp)[1:]:
            last.pop(p, None)  # re-insert: dict order becomes completion order
            last[p] = node.output[0]
    existing = {o.name for o in proto.graph.output}
    for tname in dict.fromkeys(last.values()):
        if tname in existing:
            continue
        vi = vinfo.get(tname)
        proto.graph.output.append(vi if vi is not None else onnx.ValueInfoProto(name=tname))
        existing.add(tname)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # Graph optimizations could fuse away the very tensors we asked for.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed = {}
    values = list(inputs.items())
    for i, meta in enumerate(sess.get_inputs()):
        x = inputs[meta.name] if meta.name in inputs else values[i][1]
        x = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        if meta.type == "tensor(float16)":
            x = x.astype(np.float16)
        elif meta.type == "tensor(float)" and x.dtype != np.float32 and x.dtype.kind == "f":
            x = x.astype(np.float32)
        feed[meta.name] = x
    names = [o.name for o in sess.get_outputs()]
    results = dict(zip(names, sess.run(None, feed)))
    return {p: torch.from_numpy(np.asarray(results[t])) for p, t in last.items() if t in results}


def layer_outputs(model: Any, inputs: Mapping[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Per-module outputs of a torch module, a LoadedModel of any kind or an .onnx path."""
    if isinstance(model, str | Path):
        return onnx_layer_outputs(model, inputs), set()
    if isinstance(getattr(model, "kind", None), str):
        from accel.backends import backend_of

        return backend_of(model).layer_outputs(model, inputs)
    return torch_model_layer_outputs(model, inputs)


def torch_model_layer_outputs(
    model: Any, inputs: Mapping[str, Any]
) -> tuple[dict[str, Any], set[str]]:
    """Per-module outputs of a torch module or a torch-kind LoadedModel."""
    prepare = getattr(model, "prepare_inputs", None)
    module = getattr(model, "module", model)
    # torch.compile wraps the eager module: compare its layers eagerly (compiled code has no
    # per-module boundaries to hook).
    module = getattr(module, "_orig_mod", module)
    if _is_script(module):
        return {}, set()  # ScriptModules take no forward hooks; compare_layers says so
    if _is_flat_exported(module):
        feed = prepare(inputs) if prepare else dict(inputs)
        return fx_layer_outputs(module, feed), set()
    return torch_layer_outputs(module, inputs, prepare)


# ---- comparing ------------------------------------------------------------------------------


def compare_layers(
    a: Any,
    b: Any,
    inputs: Mapping[str, Any] | None = None,
    *,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    min_cosine: float | None = None,
) -> LayerParityReport:
    """Compare every layer of ``b`` (optimized) with the same layer of ``a`` (original)."""
    from accel.graph.model import is_within
    from accel.parity import Tolerances, compare

    if inputs is None:
        if not hasattr(a, "example_inputs"):
            raise ValueError("pass sample inputs (dict name -> tensor) for bare modules")
        inputs = a.example_inputs()
    outs_a, _ = layer_outputs(a, inputs)
    outs_b, pass_b = layer_outputs(b, inputs)
    report = LayerParityReport(atol=atol, rtol=rtol)
    for side, m in (("original", a), ("optimized", b)):
        if _is_script(m):
            report.notes.append(
                f"the {side} model is TorchScript: its layers cannot be hooked; compare the "
                "eager model or its ONNX export instead"
            )
        if hasattr(getattr(m, "module", m), "_orig_mod"):
            report.notes.append(f"the {side} model is torch.compile'd: its layers run eagerly here")
    tol = Tolerances(rtol=rtol, atol=atol, min_cosine=min_cosine)
    order = list(outs_a)
    report.only_b = [p for p in outs_b if p not in outs_a]

    # Group the original's layers into runs ending at a layer the optimized model still has.
    runs: list[tuple[str, list[str]]] = []  # (b name, original layers covered)
    for p in order:
        present = p in outs_b and p not in pass_b
        if present:
            runs.append((p, [p]))
            continue
        if p not in outs_b:
            report.only_a.append(p)
        # A missing/passthrough layer right after a surviving one was fused into it.
        if runs:
            name, covered = runs[-1]
            same_shape = tuple(outs_a[p].shape) == tuple(outs_b[name].shape)
            if same_shape and not is_within(name, p):
                covered.append(p)
    if report.only_a:
        report.notes.append(
            f"{len(report.only_a)} layer(s) of the original have no counterpart in the optimized "
            "model (fused, removed or renamed)"
        )
    for name, covered in runs:
        ref = outs_a[covered[-1]]
        cand = outs_b[name]
        res = compare(ref, cand, tol, name=name).outputs[0]
        label = "+".join([name, *covered[1:]])
        r = LayerResult(
            name=label,
            index=order.index(covered[-1]),
            passed=res.passed,
            reason=res.reason,
            shape_a=list(ref.shape),
            shape_b=list(cand.shape),
            max_abs=res.max_abs,
            mean_abs=res.mean_abs,
            max_rel=res.max_rel,
            cosine=res.cosine,
            module_paths=list(covered),
        )
        report.layers.append(r)
    report.layers.sort(key=lambda r: r.index)
    failing = report.first_failing()
    report.first_failure = failing.name if failing else None
    if not report.layers:
        report.notes.append("no layer names in common: nothing to compare")
    return report


# ---- bisecting a run ------------------------------------------------------------------------

MODEL_SUFFIXES = (".onnx", ".pt2", ".ts", ".pt", ".pth")
NOT_MODELS = {"outputs.pt", "reference_outputs.pt", "inputs.pt"}


def step_model_artifacts(run_dir: str | Path) -> list[tuple[str, Path | None]]:
    """``(step folder name, saved model file or None)`` for every step of a run folder."""
    run_dir = Path(run_dir)
    out: list[tuple[str, Path | None]] = []
    for step in sorted(p for p in run_dir.glob("step_*") if p.is_dir()):
        files = sorted(
            f
            for f in step.rglob("*")
            if f.is_file() and f.suffix in MODEL_SUFFIXES and f.name not in NOT_MODELS
        )
        # Prefer self-contained formats: ONNX, ExportedProgram, TorchScript.
        files.sort(key=lambda f: MODEL_SUFFIXES.index(f.suffix))
        out.append((step.name, files[0] if files else None))
    return out


def saved_step_models(run_dir: str | Path) -> list[tuple[int, str, Path]]:
    """``(step index, pass name, saved model file)`` for the steps of a run folder that saved
    a model (``step_02_bf16`` -> ``(2, "bf16", .../model.pt2)``), in step order."""
    out: list[tuple[int, str, Path]] = []
    for name, path in step_model_artifacts(run_dir):
        parts = name.split("_", 2)  # step, NN, pass name
        if path is None or len(parts) < 3 or not parts[1].isdigit():
            continue
        out.append((int(parts[1]), parts[2], path))
    return out


@dataclass
class BisectStep:
    step: str
    artifact: str | None
    report: LayerParityReport | None = None
    error: str | None = None


def bisect_run(
    run_dir: str | Path,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    trust_pickle: bool = False,
    trust_code: bool = False,
) -> list[BisectStep]:
    """Compare the original model of a run folder with every step's saved model (the runner
    saves each torch step's model as ``model.pt2``; export steps save ONNX / .ts / .pt2).
    ``trust_pickle`` and ``trust_code`` (import a ``file.py:factory`` / ``pkg.mod:factory``
    source) are the caller's opt-ins; the run's recipe.json, a file anyone could have
    written, never grants them."""
    import json

    from accel.errors import AccelError
    from accel.models import load_model

    run_dir = Path(run_dir)
    recipe_file = run_dir / "recipe.json"
    if not recipe_file.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no recipe.json)")
    recipe = json.loads(recipe_file.read_text())
    model = recipe.get("model", {})
    gates = recipe.get("gates", {})
    atol = gates.get("atol", 1e-4) if atol is None else atol
    rtol = gates.get("rtol", 1e-3) if rtol is None else rtol
    original = load_model(
        model["source"], model.get("input_spec"), trust_pickle=trust_pickle, trust_code=trust_code
    )
    inputs = original.example_inputs(seed=int(recipe.get("seed", 0)))
    out: list[BisectStep] = []
    for step, artifact in step_model_artifacts(run_dir):
        if artifact is None:
            out.append(BisectStep(step, None, error="no saved model in this step"))
            continue
        try:
            try:
                cand = load_model(str(artifact), original.input_spec)
            except AccelError:  # e.g. an export that renamed the inputs: use its own spec
                cand = load_model(str(artifact))
            rep = compare_layers(original, cand, inputs, atol=atol, rtol=rtol)
            out.append(BisectStep(step, str(artifact), rep))
        except (AccelError, RuntimeError, ValueError, OSError) as exc:
            out.append(BisectStep(step, str(artifact), error=f"{type(exc).__name__}: {exc}"))
    return out
