"""Passes the search stops trying once their chains keep missing the parity budget by far.

A weight-changing pass (pruning) can fail parity on a model whatever comes after it: on a
random-weight BERT-base encoder, prune + distill missed a 0.01 cosine budget by 0.12 to 0.15
in four trials of eleven (1 thread, about 400 s of a 15-minute search), each under another
runtime chain, while the same chains without pruning passed. Optuna cannot carry that
lesson across chains (each chain is one categorical value), so the search does: after
``FAILS`` trials whose chains hold the pass and failed the gate by more than ``FACTOR`` times
the budget, with none of its chains within the constraints, the pass is left out for the
rest of the search, and the result says so (``space.ruled_out``). A pass with one chain
within the budget is never left out: a lower ratio, another learning rate may still win.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from accel.passes.distill import PRUNE_PASSES

FAILS = 2  # far misses before the pass is left out
FACTOR = 5.0  # a miss counts when the cosine drop is over this many times the budget
WATCHED = PRUNE_PASSES


def far_misses(trials: Iterable[Any], name: str, budget: float) -> list[Any] | None:
    """The trials holding pass ``name`` that failed the gate by far; None when one of its
    chains passed (the pass is then never left out)."""
    misses = []
    for t in trials:
        if name not in t.chain:
            continue
        if t.status == "ok":
            return None
        drop = t.metrics.get("cosine_drop")
        if t.status == "gate_failed" and drop is not None and drop > FACTOR * budget:
            misses.append(t)
    return misses


def rule_out(trials: Iterable[Any], budget: float, known: Mapping[str, str]) -> dict[str, str]:
    """Pass -> why it is left out now (the passes in ``known`` already are)."""
    trials = list(trials)
    out: dict[str, str] = {}
    for name in WATCHED:
        if name in known:
            continue
        misses = far_misses(trials, name, budget)
        if misses is None or len(misses) < FAILS:
            continue
        drops = ", ".join(f"{t.metrics['cosine_drop']:.2g} (trial {t.number})" for t in misses)
        out[name] = (
            f"left out after {len(misses)} trials: its chains missed the cosine budget "
            f"{budget:g} by far (drop {drops}) and none passed"
        )
    return out


def holds_ruled_out(chain: Iterable[str], ruled_out: Mapping[str, str]) -> bool:
    return any(name in ruled_out for name in chain)
