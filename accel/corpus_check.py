"""The pass x model matrix: every pass on a model, one cell each, independent of the others.

``check_model(source, spec, passes)`` loads the model once, then for each pass applies it to a
fresh copy of the original (ONNX passes to the model's ONNX export, OpenVINO passes to its
OpenVINO conversion, a pass that only acts after another, such as distill after pruning, to the
original after that pass; each made once), and records the outcome:

* ``ok``: applied; with the interleaved speedup over eager (accel.timing), parity against
  the original's outputs (accel.parity) and the build time;
* ``n/a``: the pass does not apply, with the reason (needs CUDA, nothing to do: found by the
  pass's pre-flight check before any work);
* ``refused``: the pass stopped with a PassError (a clear message, but after work started);
* ``crash``: any other exception (a bug: the traceback is kept).

Used by bench/corpus.py (the full corpus) and the fast CI subset in tests/accel.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from accel.errors import AccelError, NotApplicable, PassError
from accel.models.shapes import current_dims

log = logging.getLogger(__name__)

# Parameters for passes whose defaults suit a long interactive run more than a matrix of
# real-size models on CPU (recorded in each cell).
MATRIX_PARAMS: dict[str, dict[str, Any]] = {
    "qat": {"steps": 10, "batch_size": 2},
    "quantize_static_int8": {"calibration_batches": 2},
    "quantize_onnx_static": {"calibration_batches": 2},
    "distill": {"steps": 10, "seconds": 30.0, "batches": 4, "heldout": 2},
}

# Passes that only act after another (distill recovers what pruning lost; on the original it
# has nothing to recover and refuses): the matrix checks them on the original after that pass
# (with its matrix parameters), made once per model.
MATRIX_AFTER: dict[str, str] = {"distill": "prune_channels"}


@dataclass
class Cell:
    model: str
    pass_name: str
    outcome: str  # ok | n/a | refused | crash
    reason: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    build_s: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    parity_passed: bool | None = None
    parity: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    traceback: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


class PaddedRunError(RuntimeError):
    """An optimized model that ran at the example's shape failed on padded rows of another
    length (a crash cell: shapes the model is used at do not run)."""


def _padding_mask_of(source: str) -> str:
    from accel.models.corpus import CORPUS

    entry = CORPUS.get(source)
    return entry.padding_mask if entry is not None else ""


def padded_inputs(spec: Any, mask_name: str, seed: int = 1) -> dict[str, Any]:
    """A batch as a tokenizer pads it: 3 rows (within the batch range) at another sequence
    length than the spec's default, each row's mask 1 over its tokens and 0 after them
    (lengths: full, two thirds, a quarter), token ids 0 (the pad id) where masked."""
    mask_spec = next(t for t in spec.inputs if t.name == mask_name)
    batch_dim, seq_dim = mask_spec.shape[0], mask_spec.shape[1]
    dims = {}
    if isinstance(batch_dim, str):
        d = spec.dims[batch_dim]
        dims[batch_dim] = max(d.min, min(3, d.max))
    if isinstance(seq_dim, str):
        d = spec.dims[seq_dim]
        other = d.default + 7 if d.default + 7 <= d.max else max(d.min, d.default - 3)
        dims[seq_dim] = other
    inputs = spec.sample(seed=seed, dims=dims)
    mask = inputs[mask_name]
    rows, length = mask.shape[0], mask.shape[1]
    mask.fill_(1)
    for i in range(rows):
        keep = max(1, [length, (2 * length) // 3, length // 4][i % 3])
        mask[i, keep:] = 0
    for name, x in inputs.items():
        if name != mask_name and x.shape[:2] == mask.shape and not x.is_floating_point():
            x.masked_fill_(mask == 0, 0)
    return inputs


def _fresh(model: Any) -> Any:
    return model.runtime.copy(model)  # torch: a deep copy of the module and its metadata


def _producer_of(kind: str, from_kind: str) -> str | None:
    """The pass that converts a ``from_kind`` model into ``kind`` (an export), if any."""
    from accel.passes import list_passes

    for cls in list_passes():
        if cls.output_kind == kind and from_kind in cls.requires.model_kinds:
            return cls.name
    return None


def check_model(
    source: str,
    input_spec: str | None = None,
    passes: Iterable[str] | None = None,
    *,
    work_dir: str | Path,
    timing: Any = None,
    params: dict[str, dict[str, Any]] | None = None,
    on_cell: Callable[[Cell], None] | None = None,
    device: str = "cpu",
    time_it: bool = True,
) -> list[Cell]:
    """Run each pass in ``passes`` (default: all registered) on ``source``; one Cell each.

    ``time_it=False`` leaves the speedup out (tests: outcomes and parity only)."""
    from accel.passes import pass_names
    from accel.timing import TimingSettings

    timing = TimingSettings.from_any(
        timing or {"rounds": 2, "iters": 4, "warmup": 1, "min_time_s": 0}
    )
    run = _ModelCheck(source, input_spec, Path(work_dir), timing, device, time_it)
    params = {**MATRIX_PARAMS, **(params or {})}
    cells: list[Cell] = []
    for name in list(passes) if passes is not None else pass_names():
        cell = run.cell(name, params.get(name, {}))
        cells.append(cell)
        if on_cell is not None:
            on_cell(cell)
    return cells


class _ModelCheck:
    """One model of the corpus: its original, inputs and reference outputs, and (made once per
    kind, when a pass that takes it first needs it) its ONNX export or OpenVINO conversion."""

    def __init__(
        self,
        source: str,
        input_spec: str | None,
        work_dir: Path,
        timing: Any,
        device: str,
        time_it: bool,
    ) -> None:
        import torch

        from accel.models import load_model
        from accel.parity import normalize_outputs

        self.source, self.work_dir, self.timing = source, work_dir, timing
        self.device, self.time_it = device, time_it
        work_dir.mkdir(parents=True, exist_ok=True)
        self.original = load_model(source, input_spec, device=device)
        self.inputs = self.original.input_spec.sample(seed=0)
        with torch.no_grad():
            self.reference = normalize_outputs(self.original.forward(self.inputs))
        # Corpus models used with padded batches are also checked on those (another length).
        self.padded: dict[str, Any] | None = None
        mask = _padding_mask_of(source)
        if mask:
            self.padded = padded_inputs(self.original.input_spec, mask, seed=1)
            with torch.no_grad():
                self.padded_reference = normalize_outputs(self.original.forward(self.padded))
        # Converted forms of the original (kind -> model or the reason it failed), made once,
        # when a pass that takes that kind first needs it (onnx, openvino; "after prune_channels"
        # for distill).
        self.converted: dict[str, Any] = {}

    def ctx_for(self, name: str) -> Any:
        from accel.passes import PassContext

        d = self.work_dir / name
        d.mkdir(parents=True, exist_ok=True)
        return PassContext(
            inputs=self.inputs, device=self.device, work_dir=d, original=self.original
        )

    def base_for(self, cls: Any) -> Any:
        """The model ``cls`` takes: the original when it accepts its kind, else the original
        converted by the export pass that produces an accepted kind (export_onnx for ONNX
        passes, openvino for OpenVINO ones), made once per kind; for a pass of MATRIX_AFTER,
        the original after the pass it follows. NotApplicable when no pass converts to an
        accepted kind or that conversion (or the pass it follows) failed."""
        before = MATRIX_AFTER.get(cls.name)
        if before is not None:
            key = f"after {before}"
            if key not in self.converted:
                self.converted[key] = self._convert(before, MATRIX_PARAMS.get(before, {}))
            got = self.converted[key]
            if isinstance(got, str):
                raise NotApplicable(f"{cls.name} runs after {before}, which failed here: {got}")
            return got
        kinds = cls.requires.model_kinds
        if self.original.kind in kinds:
            return self.original
        for kind in kinds:
            producer = _producer_of(kind, self.original.kind)
            if producer is None:
                continue
            if kind not in self.converted:
                self.converted[kind] = self._convert(producer)
            got = self.converted[kind]
            if isinstance(got, str):
                raise NotApplicable(f"needs the {producer} conversion, which failed: {got}")
            return got
        raise NotApplicable(f"{cls.name} takes {', '.join(kinds)} models; no pass converts to them")

    def _convert(self, producer: str, params: dict[str, Any] | None = None) -> Any:
        """The original through ``producer`` (its defaults, or ``params``), or why that failed."""
        from accel.passes import get_pass

        try:
            conv = get_pass(producer)()
            return conv.apply(
                _fresh(self.original), conv.parse_config(params or {}), self.ctx_for(f"_{producer}")
            )
        except Exception as exc:  # noqa: BLE001 - recorded per pass that needs it
            return str(exc) or type(exc).__name__

    def cell(self, name: str, params: dict[str, Any]) -> Cell:
        """One pass on the model: ok (parity, speedup), n/a, refused or crash."""
        from accel.passes import get_pass

        cls = get_pass(name)
        p = cls()
        cell = Cell(self.source, name, "ok", params=params)
        try:
            self._build_and_check(name, cls, p, cell)
        except NotApplicable as exc:
            cell.outcome, cell.reason = "n/a", str(exc)
        except (PassError, AccelError) as exc:
            cell.outcome, cell.reason = "refused", str(exc)
        except Exception as exc:  # noqa: BLE001 - a crash is the finding
            cell.outcome = "crash"
            cell.reason = f"{type(exc).__name__}: {exc}"
            cell.traceback = traceback.format_exc()
        cell.reason = cell.reason.strip().splitlines()[0][:400] if cell.reason else ""
        return cell

    def _check_padded(self, new: Any, cell: Cell) -> None:
        """Parity on the padded batch of another sequence length; a model that cannot run
        there fails its cell (it only took the example's shape)."""
        import torch

        from accel.parity import Tolerances, compare, normalize_outputs

        dims = current_dims(self.original.input_spec, self.padded)
        try:
            with torch.no_grad():
                out = normalize_outputs(new.forward(self.padded))
        except Exception as exc:  # noqa: BLE001 - recorded as the cell's finding
            raise PaddedRunError(
                f"runs on the example's shape but not on padded rows at {dims}: "
                f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            ) from exc
        report = compare(self.padded_reference, out, Tolerances())
        cell.details["padded_dims"] = dims
        cell.details["padded_parity"] = report.summary()
        cell.parity_passed = bool(cell.parity_passed and report.passed)
        cell.parity += f"; padded rows at {dims}: {report.summary()}"

    def _build_and_check(self, name: str, cls: Any, p: Any, cell: Cell) -> None:
        import torch

        from accel.parity import Tolerances, compare, normalize_outputs
        from accel.timing import compare_interleaved

        config = cls.parse_config(cell.params)
        if cls.requires.cuda and not str(self.device).startswith("cuda"):
            raise NotApplicable(f"{name} needs a CUDA GPU")
        base = self.base_for(cls)
        p.check_requirements(base, self.device)
        model = _fresh(base)
        p.preflight(model, config)
        ctx = self.ctx_for(name)
        torch.manual_seed(0)
        t0 = time.perf_counter()
        new = p.apply(model, config, ctx)
        cell.build_s = time.perf_counter() - t0
        cell.details = _jsonable(
            {k: v for k, v in ctx.details.items() if k not in ("quantized_layers",)}
        )
        with torch.no_grad():
            out = normalize_outputs(new.forward(self.inputs))
        report = compare(self.reference, out, Tolerances())
        cell.parity_passed = bool(report.passed)
        cell.parity = report.summary()
        if self.padded is not None:
            self._check_padded(new, cell)
        if self.time_it:
            cmp = compare_interleaved(
                self.original, new, self.inputs, self.timing, device=self.device
            )
            cell.speedup = cmp.speedup.value
            cell.speedup_low, cell.speedup_high = cmp.speedup.low, cmp.speedup.high
