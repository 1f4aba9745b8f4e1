"""Per-layer quantization sensitivity and automatic mixed-precision fallback.

``analyze_sensitivity`` quantizes one layer at a time (the pass's ``exclude`` holds all
the others) and measures how far the model's outputs move from the float model's on
the data (max/mean abs error, cosine; accuracy with labelled data). The ranking says
which layers to keep in float. ``auto_exclude`` walks that ranking and returns the
smallest prefix of it that, excluded, lets the whole quantized model meet the gate —
verified by applying the pass with that exclude list.

At real sizes (a RoBERTa-base encoder has 73 Linear layers) one pass application per layer
is slow, so two things make it usable:

- ``method="local"`` (the default, ``auto``, for passes whose quantization of a layer does
  not depend on the rest of the model: ``layer_local = True`` on the pass, e.g. dynamic int8
  and weight-only): the pass quantizes a copy of the one layer alone, which is swapped into
  a single working copy of the model for the forward passes and swapped back. The numbers
  are the ones the full method gives (the same quantized layer in the same model), without
  a model copy and a whole-model pass per layer. Calibrated passes (static int8, QAT) use
  the full method.
- ``max_layers``: analyse only N layers (``pick_layers``: every kind of layer, spread
  through the depth); the report lists the layers it skipped.
"""

from __future__ import annotations

import copy
import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from accel.errors import AccelError, Cancelled, PassError

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, str], None]


@dataclass
class LayerSensitivity:
    """Output error when only this layer is quantized."""

    name: str
    type: str
    num_params: int = 0
    max_abs: float | None = None
    mean_abs: float | None = None
    cosine: float | None = None
    accuracy: float | None = None
    accuracy_drop: float | None = None
    error: str | None = None  # why the pass could not quantize this layer alone

    def score(self) -> tuple[float, float, float]:
        """Sort key, most sensitive first: accuracy drop, then 1 - cosine, then max abs."""
        if self.error is not None:
            return (-1.0, -1.0, -1.0)
        return (
            self.accuracy_drop or 0.0,
            1.0 - (self.cosine if self.cosine is not None else 1.0),
            self.max_abs or 0.0,
        )


@dataclass
class SensitivityReport:
    model_source: str
    input_spec: str
    pass_name: str
    params: dict[str, Any]
    data: str
    num_samples: int
    baseline_accuracy: float | None
    full: dict[str, Any]  # every layer quantized
    layers: list[LayerSensitivity] = field(default_factory=list)  # most sensitive first
    duration_s: float = 0.0
    method: str = "full"  # "full": the pass on the whole model per layer; "local": see above
    skipped: list[str] = field(default_factory=list)  # not analysed (max_layers)

    def ranking(self) -> list[str]:
        return [layer.name for layer in self.layers if layer.error is None]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ranking"] = self.ranking()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SensitivityReport:
        d = dict(d)
        d.pop("ranking", None)
        d["layers"] = [LayerSensitivity(**x) for x in d.get("layers", [])]
        return cls(**d)


@dataclass
class AutoExcludeResult:
    exclude: list[str]
    met: bool
    metrics: dict[str, Any]
    gate: dict[str, float | None]
    tried: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- helpers ----------------------------------------------------------------------------------


def _cancel_fn(cancel: Any) -> Callable[[], bool]:
    if cancel is None:
        return lambda: False
    if hasattr(cancel, "is_set"):
        return cancel.is_set
    return cancel


def _pass_and_types(pass_name: str) -> tuple[Any, tuple[str, ...]]:
    from accel.passes import get_pass

    cls = get_pass(pass_name)
    types = getattr(cls, "layer_types", None)
    if not types or "exclude" not in cls.Config.model_fields:
        raise PassError(
            f"sensitivity analysis needs a torch quantization pass with an exclude list; {pass_name} is not one "
            "(try quantize_static_int8, quantize_dynamic_int8, quantize_weight_only or qat)"
        )
    return cls, types


def _data_source(data: Any, model: Any) -> Any:
    from accel.data import DataSource, make_data_source

    if isinstance(data, DataSource):
        return data
    return make_data_source(data or "synthetic(batches=4)", model.input_spec, teacher=model)


class _Evaluator:
    """Applies the pass with a given exclude list and scores the result against the float model."""

    def __init__(
        self,
        model: Any,
        pass_name: str,
        params: dict[str, Any] | None,
        data: Any,
        cancel: Callable[[], bool],
    ):
        from accel.parity import normalize_outputs

        self.pass_cls, self.types = _pass_and_types(pass_name)
        if model.kind not in self.pass_cls.requires.model_kinds or model.module is None:
            raise PassError(
                f"sensitivity analysis works on torch models; {model.source} is {model.kind}"
            )
        self.model = model
        self.params = dict(params or {})
        self.user_exclude = list(self.params.pop("exclude", []) or [])
        self.pass_cls.parse_config(
            {**self.params, "exclude": self.user_exclude}
        )  # bad params fail early
        self.data = data
        self.batches = list(data.batches())
        self.refs = [normalize_outputs(model.forward(b.inputs)) for b in self.batches]
        self.cancel = cancel
        self.baseline_accuracy = self._accuracy(model) if data.has_labels else None
        self._work: Any = None  # evaluate_local's working copy of the model

    def layers(self) -> list[tuple[str, Any]]:
        from accel.passes._torch_quant_helpers import select_layers

        keep, _, _ = select_layers(self.model.module, self.types, self.user_exclude)
        return [(n, self.model.module.get_submodule(n)) for n in keep]

    def _accuracy(self, m: Any) -> float:
        from accel.data import evaluate_accuracy

        return evaluate_accuracy(m, self.data, "top1")

    def _ctx(self) -> Any:
        from accel.passes import PassContext

        return PassContext(
            inputs=self.batches[0].inputs,
            device=self.model.device,
            calibration=self.data,
            original=self.model,
            cancel_cb=self.cancel,
        )

    def evaluate(self, exclude: list[str]) -> dict[str, Any]:
        """The pass on a copy of the whole model with ``exclude`` (plus the user's) in float."""
        import torch

        config = self.pass_cls.parse_config(
            {**self.params, "exclude": self.user_exclude + list(exclude)}
        )
        candidate = self.model.replace(module=copy.deepcopy(self.model.module))
        torch.manual_seed(0)
        quantized = self.pass_cls().apply(candidate, config, self._ctx())
        return self._score(quantized)

    def evaluate_local(self, name: str) -> dict[str, Any]:
        """Only layer ``name`` quantized, for a ``layer_local`` pass: the pass quantizes a copy
        of that layer alone, which replaces it in one working copy of the model while the
        outputs are measured (then the float layer goes back)."""
        import torch

        if self._work is None:
            self._work = self.model.replace(module=copy.deepcopy(self.model.module))
        root = self._work.module
        parent_name, _, attr = name.rpartition(".")
        parent = root.get_submodule(parent_name) if parent_name else root
        original = getattr(parent, attr)
        holder = torch.nn.Module()
        holder.add_module("layer", copy.deepcopy(original))
        config = self.pass_cls.parse_config({**self.params, "exclude": []})
        torch.manual_seed(0)
        quantized = self.pass_cls().apply(self.model.replace(module=holder), config, self._ctx())
        setattr(parent, attr, quantized.module.get_submodule("layer"))
        try:
            return self._score(self._work)
        finally:
            setattr(parent, attr, original)

    def _score(self, quantized: Any) -> dict[str, Any]:
        from accel.parity import compare, normalize_outputs

        max_abs, mean_abs, cos = 0.0, 0.0, 1.0
        n = 0
        for b, ref in zip(self.batches, self.refs):
            report = compare(ref, normalize_outputs(quantized.forward(b.inputs)))
            for o in report.outputs:
                if o.max_abs is None:
                    continue
                max_abs = max(max_abs, float(o.max_abs))
                mean_abs += float(o.mean_abs or 0.0)
                cos = min(cos, float(o.cosine if o.cosine is not None else 1.0))
                n += 1
        out: dict[str, Any] = {"max_abs": max_abs, "mean_abs": mean_abs / max(n, 1), "cosine": cos}
        if self.baseline_accuracy is not None:
            acc = self._accuracy(quantized)
            out["accuracy"] = acc
            out["accuracy_drop"] = self.baseline_accuracy - acc
        return out


# -- public -----------------------------------------------------------------------------------


def pick_layers(layers: list[tuple[str, int]], max_layers: int) -> list[str]:
    """The ``max_layers`` layers to analyse out of ``layers`` ((name, parameter count), in
    model order), in model order.

    Layers are grouped by kind: the name with its numbers blanked (``encoder.layer.#.output.
    dense``), so each repeated block contributes one layer of each kind. Kinds take turns,
    the largest (parameters per layer) first; within a kind the picks spread through the
    depth (first, last, middle, quarters, ...). Sensitivity depends mostly on what a layer
    is (a feed-forward down-projection with outliers, the classifier head) and on its depth
    (first and last blocks), so this covers both; a pick by size alone would take every
    feed-forward layer before any attention projection, and an even stride over a model of
    repeated blocks can hit the same kind of layer in every block."""
    if max_layers >= len(layers):
        return [n for n, _ in layers]
    kinds: dict[str, list[int]] = {}
    for i, (name, _) in enumerate(layers):
        kinds.setdefault(re.sub(r"\d+", "#", name), []).append(i)
    queues = []
    for members in kinds.values():
        queues.append(_spread_order(members))
    queues.sort(key=lambda q: (-layers[q[0]][1], q[0]))
    picked: list[int] = []
    while len(picked) < max_layers:
        for q in queues:
            if q and len(picked) < max_layers:
                picked.append(q.pop(0))
    return [layers[i][0] for i in sorted(picked)]


def _spread_order(items: list[int]) -> list[int]:
    """``items`` reordered so each prefix spreads over the list: first, last, then the
    midpoints of the widest gaps."""
    if len(items) <= 2:
        return list(items)
    order = [0, len(items) - 1]
    gaps = [(0, len(items) - 1)]
    while gaps:
        gaps.sort(key=lambda g: (-(g[1] - g[0]), g[0]))
        lo, hi = gaps.pop(0)
        if hi - lo < 2:
            continue
        mid = (lo + hi) // 2
        order.append(mid)
        gaps += [(lo, mid), (mid, hi)]
    return [items[i] for i in order]


def _fmt_eta(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _layer_by_layer(
    ev: Any,
    layers: list[tuple[str, Any]],
    names: list[str],
    sizes: dict[str, int],
    use_local: bool,
    report_progress: ProgressFn,
) -> list[LayerSensitivity]:
    """Quantize each layer alone (``use_local``: the layer on its own; else the pass with
    every other layer excluded) and measure the output error; a layer the pass cannot
    handle gets its error, the others go on."""
    results = []
    t_layers = time.perf_counter()
    n = len(layers)
    for i, (name, module) in enumerate(layers):
        if ev.cancel():
            raise Cancelled("sensitivity analysis cancelled")
        eta = ""
        if i:
            eta = f", about {_fmt_eta((time.perf_counter() - t_layers) / i * (n - i))} left"
        report_progress((i + 1) / (n + 1), f"layer {i + 1} of {n}: {name}{eta}")
        entry = LayerSensitivity(name, type(module).__name__, sizes[name])
        try:
            m = (
                ev.evaluate_local(name)
                if use_local
                else ev.evaluate([x for x in names if x != name])
            )
        except Cancelled:
            raise
        except AccelError as exc:
            entry.error = str(exc)
        else:
            for k, v in m.items():
                setattr(entry, k, v)
        results.append(entry)
    return results


def analyze_sensitivity(
    model: Any,
    pass_name: str = "quantize_static_int8",
    data: Any = None,
    params: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
    cancel: Any = None,
    max_layers: int | None = None,
    method: str = "auto",
) -> SensitivityReport:
    """Quantize one layer at a time with ``pass_name`` and rank the layers by output error.

    ``data``: a DataSource or data spec (default ``synthetic(batches=4)``); labelled data
    adds accuracy. ``params``: the pass's other parameters (its ``exclude`` layers are
    left out of the analysis and stay float). ``max_layers``: analyse only this many layers
    (``pick_layers``); the others are listed in the report's ``skipped``. ``method``:
    ``full`` (the pass on a copy of the model per layer), ``local`` (the layer alone, for
    passes with ``layer_local``) or ``auto`` (local when the pass allows it)."""
    t0 = time.perf_counter()
    report_progress = progress or (lambda f, m: None)
    is_cancelled = _cancel_fn(cancel)
    if max_layers is not None and max_layers < 1:
        raise ValueError(f"max_layers must be at least 1, got {max_layers}")
    if method not in ("auto", "full", "local"):
        raise ValueError(f"method must be auto, full or local, got {method!r}")
    data = _data_source(data, model)
    ev = _Evaluator(model, pass_name, params, data, is_cancelled)
    local_ok = bool(getattr(ev.pass_cls, "layer_local", False))
    if method == "local" and not local_ok:
        raise PassError(
            f"{pass_name} calibrates or trains on the whole model, so a layer cannot be "
            "quantized alone; use method full"
        )
    use_local = method == "local" or (method == "auto" and local_ok)
    layers, names, sizes, skipped = _layers_to_analyse(ev, pass_name, max_layers)
    sampled = f" (sample of {len(layers)} of {len(names)})" if skipped else ""
    report_progress(0.0, f"{len(layers)} layers{sampled}; quantizing all of them first")
    full = ev.evaluate([])
    results = _layer_by_layer(ev, layers, names, sizes, use_local, report_progress)
    results.sort(key=lambda e: e.score(), reverse=True)
    report_progress(1.0, "done")
    return SensitivityReport(
        model_source=model.source,
        input_spec=str(model.input_spec),
        pass_name=pass_name,
        params={**(params or {})},
        data=data.spec,
        num_samples=data.num_samples,
        baseline_accuracy=ev.baseline_accuracy,
        full=full,
        layers=results,
        duration_s=time.perf_counter() - t0,
        method="local" if use_local else "full",
        skipped=skipped,
    )


def _layers_to_analyse(
    ev: _Evaluator, pass_name: str, max_layers: int | None
) -> tuple[list[tuple[str, Any]], list[str], dict[str, int], list[str]]:
    """(layers to analyse, every quantizable layer's name, parameter counts, skipped)."""
    all_layers = ev.layers()
    if not all_layers:
        raise PassError(f"the model has no {'/'.join(ev.types)} layer for {pass_name} to quantize")
    names = [n for n, _ in all_layers]
    sizes = [(n, sum(p.numel() for p in m.parameters())) for n, m in all_layers]
    chosen = set(pick_layers(sizes, max_layers) if max_layers else names)
    layers = [(n, m) for n, m in all_layers if n in chosen]
    return layers, names, dict(sizes), [n for n in names if n not in chosen]


def auto_exclude(
    report_or_model: Any,
    max_error: float | None = None,
    *,
    min_cosine: float | None = None,
    max_accuracy_drop: float | None = None,
    model: Any = None,
    pass_name: str | None = None,
    data: Any = None,
    params: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
    cancel: Any = None,
) -> AutoExcludeResult:
    """The fewest most-sensitive layers to keep in float so the quantized model meets the gate
    (max abs error, min cosine, max accuracy drop), verified by applying the pass.

    ``report_or_model``: a SensitivityReport (the model is reloaded from its source unless
    ``model`` is given) or a LoadedModel (analysed first with ``pass_name``).
    """
    if max_error is None and min_cosine is None and max_accuracy_drop is None:
        raise ValueError("give a gate: max_error, min_cosine or max_accuracy_drop")
    report_progress = progress or (lambda f, m: None)
    if isinstance(report_or_model, SensitivityReport):
        report = report_or_model
        if model is None:
            from accel.models import load_model

            model = load_model(report.model_source, report.input_spec)
        pass_name = pass_name or report.pass_name
        params = report.params if params is None else params
        data = data if data is not None else report.data
    else:
        model = report_or_model
        report = analyze_sensitivity(
            model,
            pass_name or "quantize_static_int8",
            data,
            params,
            progress=lambda f, m: report_progress(0.5 * f, m),
            cancel=cancel,
        )
        pass_name = report.pass_name
    data_src = _data_source(data, model)
    ev = _Evaluator(model, pass_name, params, data_src, _cancel_fn(cancel))
    if max_accuracy_drop is not None and ev.baseline_accuracy is None:
        raise ValueError("max_accuracy_drop needs labelled data (e.g. 'synthetic-labelled')")
    gate = {
        "max_error": max_error,
        "min_cosine": min_cosine,
        "max_accuracy_drop": max_accuracy_drop,
    }
    return _shortest_exclude(report.ranking(), ev, gate, report_progress, cancel)


def _meets(m: dict[str, Any], gate: dict[str, float | None]) -> bool:
    max_error, min_cosine, max_drop = (
        gate["max_error"],
        gate["min_cosine"],
        gate["max_accuracy_drop"],
    )
    return (
        (max_error is None or m["max_abs"] <= max_error)
        and (min_cosine is None or m["cosine"] >= min_cosine)
        and (max_drop is None or m.get("accuracy_drop", 0.0) <= max_drop)
    )


def _shortest_exclude(
    ranking: list[str],
    ev: _Evaluator,
    gate: dict[str, float | None],
    report_progress: ProgressFn,
    cancel: Any,
) -> AutoExcludeResult:
    """The shortest prefix of ``ranking`` kept in float that meets ``gate`` (each tried by
    applying the pass), or the whole ranking when none does."""
    tried = []
    best: dict[str, Any] = {}
    for k in range(len(ranking) + 1):
        if _cancel_fn(cancel)():
            raise Cancelled("auto_exclude cancelled")
        exclude = ranking[:k]
        report_progress(0.5 + 0.5 * k / (len(ranking) + 1), f"trying {k} layer(s) in float")
        if k == len(ranking):
            break  # nothing left to quantize
        m = ev.evaluate(exclude)
        tried.append({"exclude": exclude, **m})
        best = m
        if _meets(m, gate):
            return AutoExcludeResult(exclude, True, m, gate, tried)
    log.info("no prefix of the ranking meets the gate %s", gate)
    return AutoExcludeResult(ranking, False, best, gate, tried)
