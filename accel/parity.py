"""Output parity: compare a candidate model's outputs with the reference model's.

``compare(reference, candidate, tolerances)`` walks both output structures (tensors, numpy
arrays, Python scalars, tuples, lists, dicts, dataclasses, namedtuples, ModelOutput-like
objects), names every leaf (``out``, ``out[0]``, ``out.logits``, ``out[1].hidden``) and
compares leaf by leaf in float64 on the CPU (fp16 / bf16 candidates are cast up).

Per leaf (see ``OutputParity``): max abs error, mean abs error, max relative error
``|cand - ref| / (|ref| + REL_EPS)`` (the *reference* is the denominator), cosine similarity
of the flattened values, ``allclose`` with ``|cand - ref| <= atol + rtol * |ref|``, NaN/Inf
counts on both sides, and top-1 / top-k agreement when the leaf looks like logits (floating,
ndim >= 2, last dim in [2, 100000]). Error metrics cover the positions where both sides are
finite; positions where both are NaN, or both the same infinity, count as equal.

The pass rule for one leaf (``Tolerances``):

1. Always fails: structure mismatch (missing / extra key or index, container vs leaf), shape
   mismatch, dtype *kind* mismatch (bool / integer / floating / complex; precision may differ,
   so an fp16 candidate against an fp32 reference is fine), a non-finite value on one side where
   the other side is finite (e.g. NaN in the candidate where the reference has none), and
   ``max_abs`` exceeded when ``Tolerances.max_abs`` is set.
2. Otherwise it passes when ``allclose`` holds, or when the relaxed gates allow it: at least
   one of ``min_cosine`` / ``min_top1`` is set *and applies* to the leaf (top-1 only applies to
   logits-like leaves), and every applicable one is met (``cosine >= min_cosine``,
   ``top1 >= min_top1``).

Structures: when the two sides have different container kinds (a dict against a tuple, a
tensor against a 1-tuple -- what an exported ONNX model returns for a torch model's
dict / tensor output), both are flattened to their leaves (``None`` dropped, as ONNX export
does) and matched by position when the leaf counts agree, named after the reference; a note
says so. ``Tolerances(strict_structure=True)`` turns that into a failure.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

REL_EPS = 1e-12  # keeps max_rel finite where the reference is exactly 0
TOPK = 5
MAX_LOGIT_CLASSES = 100_000

_KIND_NAMES = {"b": "bool", "i": "integer", "u": "integer", "f": "floating", "c": "complex"}


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Tolerances:
    """Parity gates. See the module docstring for the exact pass rule."""

    rtol: float = 1e-3
    atol: float = 1e-4
    min_cosine: float | None = None  # e.g. 0.999
    min_top1: float | None = None  # e.g. 0.99 (fraction of rows whose argmax agrees)
    max_abs: float | None = None  # hard ceiling on the max abs error
    strict_structure: bool = False  # container kinds must match exactly (no positional match)

    def __post_init__(self) -> None:
        if not (self.rtol >= 0 and self.atol >= 0):
            raise ValueError(f"rtol and atol must be >= 0, got {self.rtol}, {self.atol}")
        if self.min_cosine is not None and not -1.0 <= self.min_cosine <= 1.0:
            raise ValueError(f"min_cosine must be in [-1, 1], got {self.min_cosine}")
        if self.min_top1 is not None and not 0.0 <= self.min_top1 <= 1.0:
            raise ValueError(f"min_top1 must be in [0, 1], got {self.min_top1}")
        if self.max_abs is not None and not self.max_abs >= 0:
            raise ValueError(f"max_abs must be >= 0, got {self.max_abs}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Tolerances:
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(
                f"unknown tolerance fields {sorted(unknown)}; expected rtol, atol, min_cosine, "
                "min_top1, max_abs, strict_structure"
            )
        return cls(**d)


@dataclass(frozen=True)
class OutputParity:
    """Comparison of one output leaf. Metrics are None where they do not apply."""

    name: str
    passed: bool
    reason: str | None = None  # why it failed (None when passed)
    kind: str = "tensor"  # "tensor" | "value" (non-numeric leaf) | "structure"
    ref_shape: tuple[int, ...] | None = None
    cand_shape: tuple[int, ...] | None = None
    ref_dtype: str | None = None
    cand_dtype: str | None = None
    numel: int = 0
    max_abs: float | None = None
    mean_abs: float | None = None
    max_rel: float | None = None  # |cand - ref| / (|ref| + REL_EPS)
    cosine: float | None = None
    allclose: bool | None = None
    nan_ref: int = 0
    inf_ref: int = 0
    nan_cand: int = 0
    inf_cand: int = 0
    top1: float | None = None
    topk: float | None = None  # fraction of rows whose reference top-1 is in the candidate top-k
    k: int | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for key in ("ref_shape", "cand_shape"):
            if d[key] is not None:
                d[key] = list(d[key])
        # JSON has no NaN/Inf: store null (metrics are finite by construction; belt and braces).
        for key, value in d.items():
            if isinstance(value, float) and not math.isfinite(value):
                d[key] = None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OutputParity:
        kwargs = dict(d)
        for key in ("ref_shape", "cand_shape"):
            if kwargs.get(key) is not None:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)

    def summary(self) -> str:
        if self.kind != "tensor":
            return f"{self.name}: {'ok' if self.passed else self.reason}"
        parts = [f"{self.name}: {'ok' if self.passed else 'FAIL'}"]
        if self.max_abs is not None:
            parts.append(f"max_abs {self.max_abs:.3g}")
        if self.cosine is not None:
            parts.append(f"cosine {self.cosine:.6f}")
        if self.top1 is not None:
            parts.append(f"top1 {self.top1:.3f}")
        if self.reason:
            parts.append(f"({self.reason})")
        return ", ".join(parts)


@dataclass(frozen=True)
class ParityReport:
    """All leaves of one comparison and the overall verdict."""

    passed: bool
    first_failure: str | None  # "out.logits: cosine 0.91 < 0.999"
    outputs: tuple[OutputParity, ...] = ()
    tolerances: Tolerances = field(default_factory=Tolerances)

    @property
    def failures(self) -> tuple[OutputParity, ...]:
        return tuple(o for o in self.outputs if not o.passed)

    def __getitem__(self, name: str) -> OutputParity:
        for o in self.outputs:
            if o.name == name:
                return o
        raise KeyError(name)

    def names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def worst(self) -> dict[str, Any]:
        """Worst values over all leaves: largest max_abs / max_rel, smallest cosine / top1."""
        result: dict[str, Any] = {}
        for key, metric, pick in (
            ("max_abs", "max_abs", max),
            ("max_mean_abs", "mean_abs", max),
            ("max_rel", "max_rel", max),
            ("min_cosine", "cosine", min),
            ("min_top1", "top1", min),
        ):
            values = [(getattr(o, metric), o.name) for o in self.outputs]
            values = [(v, n) for v, n in values if v is not None]
            # ties go to the first output in order, so the answer is stable
            best = pick(values, key=lambda vn: vn[0]) if values else (None, None)
            result[key], result[f"{key}_output"] = best
        return result

    def summary(self) -> str:
        """One line for logs and status bars."""
        n = len(self.outputs)
        w = self.worst()
        detail = []
        if w["max_abs"] is not None:
            detail.append(f"max_abs {w['max_abs']:.3g} ({w['max_abs_output']})")
        if w["min_cosine"] is not None:
            detail.append(f"min cosine {w['min_cosine']:.6f}")
        if w["min_top1"] is not None:
            detail.append(f"min top1 {w['min_top1']:.3f}")
        tail = (", " + ", ".join(detail)) if detail else ""
        if self.passed:
            return f"PASS {n} output{'s' if n != 1 else ''}{tail}"
        return f"FAIL {self.first_failure} ({len(self.failures)} of {n} outputs failed){tail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "first_failure": self.first_failure,
            "outputs": [o.to_dict() for o in self.outputs],
            "tolerances": self.tolerances.to_dict(),
            "worst": self.worst(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ParityReport:
        return cls(
            passed=bool(d["passed"]),
            first_failure=d.get("first_failure"),
            outputs=tuple(OutputParity.from_dict(o) for o in d.get("outputs", ())),
            tolerances=Tolerances.from_dict(d.get("tolerances", {})),
        )


# --------------------------------------------------------------------------- structure


def _is_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")  # never import torch just to compare numpy outputs
    return torch is not None and isinstance(obj, torch.Tensor)


def _is_leaf(obj: Any) -> bool:
    if obj is None or isinstance(obj, str | bytes | bool | int | float | complex | np.generic):
        return True
    return isinstance(obj, np.ndarray) or _is_tensor(obj)


def _children(obj: Any) -> tuple[str, list[tuple[Any, str, Any]]] | None:
    """(container kind, [(key, name suffix, child)]) or None for a leaf."""
    if _is_leaf(obj):
        return None
    if isinstance(obj, Mapping):  # dict, OrderedDict, HF ModelOutput
        return "map", [(k, _key_suffix(k), v) for k, v in obj.items()]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return "map", [
            (f.name, f".{f.name}", getattr(obj, f.name)) for f in dataclasses.fields(obj)
        ]
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple: index, named by field
        return "seq", [(i, f".{f}", v) for i, (f, v) in enumerate(zip(obj._fields, obj))]
    if isinstance(obj, list | tuple):
        return "seq", [(i, f"[{i}]", v) for i, v in enumerate(obj)]
    to_tuple = getattr(obj, "to_tuple", None)
    if callable(to_tuple):
        return "seq", [(i, f"[{i}]", v) for i, v in enumerate(to_tuple())]
    return None


def _key_suffix(key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f".{key}"
    return f"[{key!r}]"


def _flatten(obj: Any, name: str) -> Iterator[tuple[str, Any]]:
    """Leaves in order, None dropped (ONNX export drops None outputs too)."""
    node = _children(obj)
    if node is None:
        if obj is not None:
            yield name, obj
        return
    for _key, suffix, child in node[1]:
        yield from _flatten(child, name + suffix)


def _kind_name(obj: Any) -> str:
    node = _children(obj)
    if node is None:
        return "None" if obj is None else "tensor" if _is_leaf(obj) else type(obj).__name__
    return type(obj).__name__


def _walk(ref: Any, cand: Any, name: str, tol: Tolerances, out: list[OutputParity]) -> None:
    if ref is None and cand is None:
        return
    ref_node, cand_node = _children(ref), _children(cand)
    if ref_node is None and cand_node is None:
        out.append(_compare_leaf(name, ref, cand, tol))
        return
    if ref_node is not None and cand_node is not None and ref_node[0] == cand_node[0]:
        kind = ref_node[0]
        if kind == "map":
            cand_items = {k: v for k, _s, v in cand_node[1]}
            ref_keys = set()
            for key, suffix, child in ref_node[1]:
                ref_keys.add(key)
                if key in cand_items:
                    _walk(child, cand_items[key], name + suffix, tol, out)
                elif child is not None:
                    out.append(_structure_failure(name + suffix, "missing in candidate"))
            for key, suffix, child in cand_node[1]:
                if key not in ref_keys and child is not None:
                    out.append(_structure_failure(name + suffix, "extra in candidate"))
            return
        ref_items, cand_items_seq = ref_node[1], cand_node[1]
        for (_k, suffix, r), (_k2, _s2, c) in zip(ref_items, cand_items_seq):
            _walk(r, c, name + suffix, tol, out)
        if len(ref_items) != len(cand_items_seq):
            why = f"length {len(ref_items)} in reference != {len(cand_items_seq)} in candidate"
            for _k, suffix, _r in ref_items[len(cand_items_seq) :]:
                out.append(_structure_failure(name + suffix, f"missing in candidate ({why})"))
            for i in range(len(ref_items), len(cand_items_seq)):
                out.append(_structure_failure(f"{name}[{i}]", f"extra in candidate ({why})"))
        return
    # Different container kinds: match the leaves by position when their counts agree.
    ref_leaves, cand_leaves = list(_flatten(ref, name)), list(_flatten(cand, name))
    what = f"reference is {_kind_name(ref)}, candidate is {_kind_name(cand)}"
    if tol.strict_structure or len(ref_leaves) != len(cand_leaves):
        detail = (
            "" if tol.strict_structure else (f" ({len(ref_leaves)} vs {len(cand_leaves)} leaves)")
        )
        out.append(_structure_failure(name, f"structure mismatch: {what}{detail}"))
        return
    for (leaf_name, r), (_n, c) in zip(ref_leaves, cand_leaves):
        result = _compare_leaf(leaf_name, r, c, tol)
        out.append(dataclasses.replace(result, note=f"matched by position ({what})"))


def _structure_failure(name: str, reason: str) -> OutputParity:
    return OutputParity(name=name, passed=False, reason=reason, kind="structure")


# --------------------------------------------------------------------------- leaves


def _to_array(obj: Any) -> tuple[np.ndarray, str] | None:
    """(array, dtype name) or None for a non-numeric leaf."""
    if _is_tensor(obj):
        t = obj.detach()
        if getattr(t, "is_quantized", False):
            t = t.dequantize()
        if getattr(t, "layout", None) is not None and str(t.layout) != "torch.strided":
            t = t.to_dense()
        dtype = str(t.dtype).removeprefix("torch.")
        t = t.cpu()
        if t.dtype.is_floating_point and t.dtype.itemsize < 4:  # fp16/bf16/fp8: no numpy bf16
            t = t.float()
        return t.numpy(), dtype
    if isinstance(obj, np.ndarray | np.generic):
        arr = np.asarray(obj)
        if arr.dtype.kind not in "biufc":
            return None
        return arr, str(arr.dtype)
    if isinstance(obj, bool):
        return np.asarray(obj), "bool"
    if isinstance(obj, int):
        return np.asarray(obj, dtype=np.float64 if abs(obj) >= 2**63 else np.int64), "int"
    if isinstance(obj, float):
        return np.asarray(obj, dtype=np.float64), "float"
    if isinstance(obj, complex):
        return np.asarray(obj, dtype=np.complex128), "complex"
    return None


def _value_leaf(name: str, ref: Any, cand: Any) -> OutputParity:
    try:
        equal = bool(ref == cand)
    except Exception:  # odd objects whose == is not a bool
        equal = False
    return OutputParity(
        name=name,
        passed=equal,
        reason=None if equal else f"value differs: reference {ref!r:.60}, candidate {cand!r:.60}",
        kind="value",
        ref_dtype=type(ref).__name__,
        cand_dtype=type(cand).__name__,
    )


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e-3 or abs(x) >= 1e4 else f"{x:.4g}"


def _finite_errors(
    rf: np.ndarray, cf: np.ndarray, size: int
) -> tuple[float, float, float, float | None]:
    """Max / mean absolute error, max relative error and cosine similarity over the
    positions where both outputs are finite (``size``: all positions of the output)."""
    diff = np.abs(cf - rf)
    if not diff.size:
        return 0.0, 0.0, 0.0, None if size == 0 else 1.0  # all non-finite and equal
    max_abs = float(diff.max())
    mean_abs = float(diff.mean())
    max_rel = float((diff / (np.abs(rf) + REL_EPS)).max())
    ref_norm, cand_norm = float(np.linalg.norm(rf)), float(np.linalg.norm(cf))
    if ref_norm == 0.0 and cand_norm == 0.0:
        cosine = 1.0
    elif ref_norm == 0.0 or cand_norm == 0.0:
        cosine = 0.0
    else:
        # Normalise first so the dot product cannot overflow for huge values.
        cosine = float(np.clip(np.dot(rf / ref_norm, cf / cand_norm), -1.0, 1.0))
    return max_abs, mean_abs, max_rel, cosine


def _compare_leaf(name: str, ref: Any, cand: Any, tol: Tolerances) -> OutputParity:
    try:
        ra, ca = _to_array(ref), _to_array(cand)
    except Exception as exc:  # e.g. a tensor on the meta device: report, never crash
        return _structure_failure(name, f"cannot read values: {exc}")
    if ra is None or ca is None:
        if ra is None and ca is None:
            return _value_leaf(name, ref, cand)
        what = f"reference is {type(ref).__name__}, candidate is {type(cand).__name__}"
        return _structure_failure(name, f"type mismatch: {what}")
    (r, rdt), (c, cdt) = ra, ca
    base = OutputParity(
        name=name,
        passed=False,
        ref_shape=tuple(int(s) for s in r.shape),
        cand_shape=tuple(int(s) for s in c.shape),
        ref_dtype=rdt,
        cand_dtype=cdt,
        numel=int(r.size),
    )
    if r.shape != c.shape:
        return dataclasses.replace(
            base, reason=f"shape mismatch: reference {base.ref_shape}, candidate {base.cand_shape}"
        )
    rk, ck = _KIND_NAMES[r.dtype.kind], _KIND_NAMES[c.dtype.kind]
    if rk != ck:
        return dataclasses.replace(
            base, reason=f"dtype mismatch: reference {rdt} ({rk}), candidate {cdt} ({ck})"
        )
    return _compare_values(base, r, c, rk, tol)


def _compare_values(
    base: OutputParity, r: np.ndarray, c: np.ndarray, rk: str, tol: Tolerances
) -> OutputParity:
    """The error metrics of two arrays of one shape and kind, and whether they pass."""
    if rk == "complex":  # compare real and imaginary parts as extra elements
        r = np.stack([r.real, r.imag], axis=-1)
        c = np.stack([c.real, c.imag], axis=-1)
    r64 = r.astype(np.float64, copy=False)
    c64 = c.astype(np.float64, copy=False)

    r_nan, c_nan = np.isnan(r64), np.isnan(c64)
    r_inf, c_inf = np.isinf(r64), np.isinf(c64)
    both_finite = ~(r_nan | r_inf) & ~(c_nan | c_inf)
    same_nonfinite = (r_nan & c_nan) | (r_inf & c_inf & (r64 == c64))
    mismatched_nonfinite = int(np.count_nonzero(~both_finite & ~same_nonfinite))

    max_abs, mean_abs, max_rel, cosine = _finite_errors(
        r64[both_finite], c64[both_finite], r64.size
    )
    close = bool(np.allclose(c64, r64, rtol=tol.rtol, atol=tol.atol, equal_nan=True))

    top1 = topk = k = None
    if rk == "floating" and r.ndim >= 2 and 2 <= r.shape[-1] <= MAX_LOGIT_CLASSES and r.size > 0:
        top1, topk, k = _topk_agreement(r64, c64)

    result = dataclasses.replace(
        base,
        max_abs=max_abs,
        mean_abs=mean_abs,
        max_rel=max_rel,
        cosine=cosine,
        allclose=close,
        nan_ref=int(r_nan.sum()),
        inf_ref=int(r_inf.sum()),
        nan_cand=int(c_nan.sum()),
        inf_cand=int(c_inf.sum()),
        top1=top1,
        topk=topk,
        k=k,
    )
    reason = _failure_reason(result, mismatched_nonfinite, tol)
    return dataclasses.replace(result, passed=reason is None, reason=reason)


def _topk_agreement(r: np.ndarray, c: np.ndarray) -> tuple[float, float, int]:
    classes = r.shape[-1]
    r2, c2 = r.reshape(-1, classes), c.reshape(-1, classes)
    k = min(TOPK, classes)
    ref_top1 = np.argmax(r2, axis=-1)
    cand_top1 = np.argmax(c2, axis=-1)
    top1 = float(np.mean(ref_top1 == cand_top1))
    # argpartition: the k largest candidate scores per row, in no particular order.
    cand_topk = np.argpartition(-c2, k - 1, axis=-1)[:, :k]
    topk = float(np.mean(np.any(cand_topk == ref_top1[:, None], axis=-1)))
    return top1, topk, k


def _failure_reason(o: OutputParity, mismatched_nonfinite: int, tol: Tolerances) -> str | None:
    if mismatched_nonfinite:
        return (
            f"{mismatched_nonfinite} non-finite value(s) on one side only "
            f"(candidate NaN {o.nan_cand}, Inf {o.inf_cand}; "
            f"reference NaN {o.nan_ref}, Inf {o.inf_ref})"
        )
    assert o.max_abs is not None
    if tol.max_abs is not None and o.max_abs > tol.max_abs:
        return f"max_abs {_fmt(o.max_abs)} > {_fmt(tol.max_abs)}"
    if o.allclose:
        return None
    gates: list[tuple[str, float | None, float]] = []
    if tol.min_cosine is not None:
        gates.append(("cosine", o.cosine, tol.min_cosine))
    if tol.min_top1 is not None and o.top1 is not None:
        gates.append(("top1", o.top1, tol.min_top1))
    for metric, value, threshold in gates:
        if value is None or value < threshold:
            shown = "n/a" if value is None else f"{value:.6g}"
            return f"{metric} {shown} < {threshold:g}"
    if gates:
        return None
    return (
        f"not allclose: max_abs {_fmt(o.max_abs)}, max_rel {_fmt(o.max_rel or 0.0)} "
        f"(rtol {tol.rtol:g}, atol {tol.atol:g})"
    )


# --------------------------------------------------------------------------- entry point


def compare(
    reference: Any, candidate: Any, tolerances: Tolerances | None = None, name: str = "out"
) -> ParityReport:
    """Compare ``candidate`` outputs against ``reference`` outputs; never raises on mismatch."""
    tol = tolerances if tolerances is not None else Tolerances()
    outputs: list[OutputParity] = []
    _walk(reference, candidate, name, tol, outputs)
    failures = [o for o in outputs if not o.passed]
    first = f"{failures[0].name}: {failures[0].reason}" if failures else None
    if failures:
        log.debug("parity failed: %s", first)
    return ParityReport(
        passed=not failures, first_failure=first, outputs=tuple(outputs), tolerances=tol
    )


# --------------------------------------------------------------------------- outputs


def to_float_outputs(outputs: Any) -> Any:
    """Outputs moved to CPU; low-precision floats cast to float32 for comparison."""
    import torch

    if isinstance(outputs, torch.Tensor):
        t = outputs.detach()
        if t.is_quantized:
            t = t.dequantize()
        t = t.cpu()
        if t.is_floating_point() and t.dtype != torch.float64:
            t = t.float()
        return t
    if isinstance(outputs, (list, tuple)) and not hasattr(outputs, "_fields"):
        return type(outputs)(to_float_outputs(o) for o in outputs)
    if isinstance(outputs, dict):
        return {k: to_float_outputs(v) for k, v in outputs.items()}
    return outputs


def normalize_outputs(outputs: Any) -> Any:
    """ONNX returns a tuple even for one output; unwrap single-element tuples on both sides."""
    outputs = to_float_outputs(outputs)
    if isinstance(outputs, (list, tuple)) and len(outputs) == 1:
        return outputs[0]
    return outputs
