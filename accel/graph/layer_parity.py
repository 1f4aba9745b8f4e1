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


def _as_model(model: Any, inputs: Mapping[str, Any]) -> Any:
    """A LoadedModel for ``model``: itself, a model file loaded by its runtime, or an
    in-memory object (a torch module) adopted by its runtime."""
    from accel.models.runtime import adopt, runtime_for_file

    if isinstance(getattr(model, "kind", None), str):
        return model
    if isinstance(model, str | Path):
        runtime = runtime_for_file(model)
        if runtime is None:
            raise ValueError(f"{model} is not a model file a runtime loads")
        return runtime.load(Path(model), None, str(model))
    adopted = adopt(model, inputs)
    if adopted is None:
        raise ValueError(f"cannot compare the layers of a {type(model).__name__}")
    return adopted


def layer_outputs(model: Any, inputs: Mapping[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Per-module outputs of a LoadedModel of any kind, a model file or a torch module
    (its runtime taps them), and the paths of modules that passed their input through."""
    lm = _as_model(model, inputs)
    return lm.runtime.layer_outputs(lm, inputs)


# ---- comparing ------------------------------------------------------------------------------


def _fused_runs(
    order: list[str],
    outs_a: Mapping[str, Any],
    outs_b: Mapping[str, Any],
    pass_b: set[str],
    report: LayerParityReport,
) -> list[tuple[str, list[str]]]:
    """The original's layers grouped into runs, each ending at a layer the optimized model
    still has: (its name, the original layers it covers). Layers the optimized model lacks
    go to ``report.only_a``."""
    from accel.graph.model import is_within

    runs: list[tuple[str, list[str]]] = []
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
    return runs


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
    from accel.parity import Tolerances, compare

    if inputs is None:
        if not hasattr(a, "example_inputs"):
            raise ValueError("pass sample inputs (dict name -> tensor) for bare modules")
        inputs = a.example_inputs()
    a, b = _as_model(a, inputs), _as_model(b, inputs)
    outs_a, _ = layer_outputs(a, inputs)
    outs_b, pass_b = layer_outputs(b, inputs)
    report = LayerParityReport(atol=atol, rtol=rtol)
    for side, m in (("original", a), ("optimized", b)):
        report.notes += [f"the {side} model {note}" for note in m.runtime.layer_notes(m)]
    tol = Tolerances(rtol=rtol, atol=atol, min_cosine=min_cosine)
    order = list(outs_a)
    report.only_b = [p for p in outs_b if p not in outs_a]

    runs = _fused_runs(order, outs_a, outs_b, pass_b, report)
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

NOT_MODELS = {"outputs.pt", "reference_outputs.pt", "inputs.pt"}


def step_model_artifacts(run_dir: str | Path) -> list[tuple[str, Path | None]]:
    """``(step folder name, saved model file or None)`` for every step of a run folder."""
    from accel.models.runtime import model_file_suffixes

    suffixes = model_file_suffixes()  # in the runtimes' order of preference
    run_dir = Path(run_dir)
    out: list[tuple[str, Path | None]] = []
    for step in sorted(p for p in run_dir.glob("step_*") if p.is_dir()):
        files = sorted(
            f
            for f in step.rglob("*")
            if f.is_file() and f.suffix in suffixes and f.name not in NOT_MODELS
        )
        files.sort(key=lambda f: suffixes.index(f.suffix))
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
