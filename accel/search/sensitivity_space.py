"""Quantization exclude sets from the sensitivity analysis as a search dimension.

With ``--allow sensitivity`` (``SearchConfig.allow``) the search runs
``accel.sensitivity.analyze_sensitivity`` once on the model, after its first ``AFTER`` trials
(the original and the first seeds, the best known recipes: the analysis takes minutes on a
BERT-base, and the first minute of a search goes to what is known to work; its time counts
in the budget, and it takes at most ``SHARE`` of the budget left, see ``analysis_deadline``),
and from then on gives every quantization pass in the space that keeps an
``exclude`` list a Choice of exclude sets: none, the most sensitive layer, the 3 most
sensitive, and the most sensitive 10 % of the layers that pass quantizes (distinct sets
only), each from the ranked layers of the kinds it quantizes. The OpenVINO and ONNX Runtime
quantizers also get a ``cost`` set: the sensitive layers whose int8 speedup, measured in
that runtime, is low (accel.search.layer_costs; the measurement counts in the budget too).

The names are torch module names. The torch quantization passes run on the eager torch
model (earlier steps fold, prune or change the memory format but keep the module names).
The ONNX Runtime and OpenVINO quantizers declare ``module_layer_types``: their ``exclude``
matches the torch module each node came from (the exporter's metadata), so the names hold
after export_onnx (ORT) and after a torch->OpenVINO conversion. An OpenVINO model converted
from ONNX has no module paths (``module_names_lost_after``): in such chains the pass gets no
exclude set (the trial equals the "none" one and is not run twice). A pass with an exclude
list that declares neither gets no sets (said in the search's space summary).

The analysis uses the layer-local method (``quantize_dynamic_int8``, Linear and LSTM
layers) on at most ``MAX_LAYERS`` layers (``pick_layers``), so on a RoBERTa-base encoder it
costs 16 forward passes rather than one full pass application per layer. A conv net is
analysed with ``quantize_static_int8`` (the torch pass that quantizes Conv2d), whose full
method costs one calibrated pass per analysed layer. Each pass's sets come from the ranked
layers of the kinds it quantizes.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from accel.search.layer_costs import FLOAT_STEPS
from accel.search.space import SearchSpace

log = logging.getLogger(__name__)

ALLOW = "sensitivity"  # the --allow word
AFTER = 3  # trials run before the analysis (fewer when there are fewer seeds)
SHARE = 0.5  # of the budget left when it starts, the most the analysis may take
MAX_LAYERS = 16  # layers analysed (a sample for larger models, see accel.sensitivity.pick_layers)
SETS = (("top1", 1), ("top3", 3))  # plus top10% of the layers the pass quantizes


def analysis_deadline(budget_s: float | None, t0: float, now: float) -> float | None:
    """When (monotonic) an analysis starting at ``now`` in a search that began at ``t0``
    stops: after SHARE of the budget left, so that a stopped analysis (its sets are lost)
    leaves the search time for more trials; None without a budget."""
    if budget_s is None:
        return None
    return now + SHARE * max(0.0, budget_s - (now - t0))


def exclude_sets(ranking: list[str], n_layers: int) -> dict[str, list[str]]:
    """Labelled exclude sets from a ranking (most sensitive first) for a pass that quantizes
    ``n_layers`` layers: none, top1, top3, top10% — distinct sets only, and none that would
    keep every layer in float (the pass would have nothing to do)."""
    sizes = [*SETS, ("top10%", max(1, math.ceil(0.1 * n_layers)))]
    out: dict[str, list[str]] = {"none": []}
    seen: set[tuple[str, ...]] = {()}
    for label, k in sizes:
        chosen = tuple(ranking[:k])
        if chosen in seen or len(chosen) >= n_layers:
            continue
        seen.add(chosen)
        out[label] = list(chosen)
    return out


def _analysis_pass(space: SearchSpace) -> str:
    """Conv nets: static int8 (the torch pass that quantizes Conv2d); else the layer-local
    dynamic int8 (Linear, LSTM). Either way whether or not that pass is in the space: the
    ranking serves the ONNX Runtime and OpenVINO quantizers too."""
    if "conv2d" in space.layer_types:
        return "quantize_static_int8"
    return "quantize_dynamic_int8"


def _has_modules(kind: str) -> bool:
    """Whether models of ``kind`` are made of named torch modules (their runtime says so)."""
    from accel.models.runtime import get_runtime, kinds

    return kind in kinds() and get_runtime(kind).profile_rows == "modules"


def _exclude_targets(space: SearchSpace, skipped: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """Pass -> the torch layer types it quantizes, for the passes in the space whose
    exclude list takes torch module names (the others with an exclude list: in ``skipped``)."""
    from accel.passes import get_pass

    targets: dict[str, tuple[str, ...]] = {}
    for name in sorted(space.passes):
        cls = get_pass(name)
        if "exclude" not in cls.Config.model_fields:
            continue
        if getattr(cls, "layer_types", None) and any(
            _has_modules(k) for k in cls.requires.model_kinds
        ):
            targets[name] = tuple(cls.layer_types)
        elif getattr(cls, "module_layer_types", None):
            targets[name] = tuple(cls.module_layer_types)
        else:
            skipped[name] = "its exclude list does not say it takes torch module names"
    return targets


def _with_exclude_choices(
    space: SearchSpace,
    targets: dict[str, tuple[str, ...]],
    model: Any,
    report: Any,
    summary: dict[str, Any],
    cancel: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """The space's passes with an ``exclude`` Choice of sets from the ranking (per pass:
    the analysed layers of the types it quantizes); passes with fewer than two sets are
    noted in ``summary["skipped"]``, the sets in ``summary["sets"]``. A cost set is measured
    only while ``cancel()`` is False (the budget: each takes a conversion, a quantization
    and two profiles); one not measured is said in ``summary["cost_skipped"]``."""
    from accel.passes import get_pass
    from accel.passes._torch_quant_helpers import select_layers
    from accel.passes.base import Choice

    types = {layer.name: layer.type for layer in report.layers}
    passes = dict(space.passes)
    for name, kinds in targets.items():
        quantized, _, _ = select_layers(model.module, kinds, [])
        ranking = [n for n in report.ranking() if types[n] in kinds]
        sets = exclude_sets(ranking, len(quantized))
        if name in FLOAT_STEPS and cancel():
            summary.setdefault("cost_skipped", {})[name] = "the budget ran out (or cancel)"
        elif name in FLOAT_STEPS:  # OpenVINO / ONNX Runtime: the set chosen by measured cost
            _add_cost_set(sets, name, model, report, len(quantized), summary)
        if len(sets) < 2:
            summary["skipped"][name] = (
                f"no set of analysed layers ({'/'.join(kinds)}) to keep in float "
                f"leaves one of its {len(quantized)} layer(s) quantized"
            )
            continue
        p = passes[name]
        passes[name] = dataclasses.replace(
            p,
            params={**p.params, "exclude": Choice(tuple(sets))},
            decode={**p.decode, "exclude": sets},
            decode_lost_after=frozenset(getattr(get_pass(name), "module_names_lost_after", ())),
        )
        summary["sets"][name] = sets
    return passes


def _add_cost_set(
    sets: dict[str, list[str]],
    name: str,
    model: Any,
    report: Any,
    n_layers: int,
    summary: dict[str, Any],
) -> None:
    """The ``cost`` set of an OpenVINO / ONNX Runtime quantizer (accel.search.layer_costs:
    high int8 error and low int8 speedup, both measured), when it is new; its measurements
    go to ``summary["costs"]``, a failed measurement to ``summary["cost_failed"]``."""
    from accel.errors import AccelError
    from accel.search.layer_costs import cost_exclude_set

    try:
        chosen, costs = cost_exclude_set(model, name, report, n_layers)
    except (AccelError, RuntimeError, ValueError) as exc:
        summary.setdefault("cost_failed", {})[name] = f"{type(exc).__name__}: {exc}"[:300]
        return
    summary.setdefault("costs", {})[name] = costs
    if chosen and chosen not in sets.values():
        sets["cost"] = chosen


def add_exclude_sets(
    space: SearchSpace,
    config: Any,
    cancel: Callable[[], bool],
    progress: Callable[[float, str], None] | None = None,
) -> tuple[SearchSpace, dict[str, Any]]:
    """The space with an ``exclude`` Choice on each torch quantization pass, and a summary
    (the analysis, its time, the sets per pass, the passes left without sets and why)."""
    from accel.errors import AccelError, Cancelled
    from accel.models import load_model
    from accel.sensitivity import analyze_sensitivity

    t0 = time.monotonic()
    summary: dict[str, Any] = {"sets": {}, "skipped": {}}
    skipped = summary["skipped"]
    targets = _exclude_targets(space, skipped)
    if not _has_modules(space.model_kind) or not targets:
        summary["reason"] = "no quantization pass in the space takes exclude sets of torch layers"
        return space, summary
    model = load_model(config.model, config.input_spec, trust_pickle=config.trust_pickle)
    analysis = _analysis_pass(space)
    data = config.data.get("calibration") or "synthetic(batches=2)"
    try:
        report = analyze_sensitivity(
            model,
            analysis,
            data,
            max_layers=MAX_LAYERS,
            progress=progress,
            cancel=cancel,
        )
    except Cancelled:
        summary["reason"] = "the analysis was stopped (cancel, or its share of the budget)"
        return space, summary
    except AccelError as exc:
        summary["reason"] = f"the analysis failed: {exc}"
        return space, summary
    summary.update(
        {
            "pass": analysis,
            "method": report.method,
            "analysed": len(report.layers),
            "not_analysed": len(report.skipped),
            "duration_s": round(time.monotonic() - t0, 2),
            "ranking": report.ranking(),
        }
    )
    passes = _with_exclude_choices(space, targets, model, report, summary, cancel)
    log.info(
        "sensitivity (%s, %d layers) took %.1f s; exclude sets for %s",
        analysis,
        len(report.layers),
        summary["duration_s"],
        ", ".join(summary["sets"]) or "no pass",
    )
    return dataclasses.replace(space, passes=passes), summary
