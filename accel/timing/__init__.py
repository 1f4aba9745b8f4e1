"""The one timing engine: every latency and speedup the studio shows comes from here.

* ``compare_interleaved(reference, candidate, inputs, settings)`` times both models in one
  process, round by round (A B, then B A, ...), each round ``per_round`` samples of each. A
  change of machine load hits both sides of a round alike, so the per-round ratio stays put.
  The speedup is the median of those ratios with a bootstrap 95 % interval, widened where
  needed to contain the ratio of the two p50s shown beside it.
* ``time_alone(model, inputs, settings)`` times one model with the very same first call,
  warm-up, batching, placement and rounds: the original's row of a run, and the fallback
  when two models do not fit in memory side by side.
* Tiny models (under ``batching.TINY_CALL_S`` a call) are called several times per sample,
  by one rule (``batching.calls_per_sample``) that the exported script embeds too.
* ``NoiseMonitor`` records what else used the machine; a comparison timed while other
  processes kept more than a quarter of the cores busy, or whose interval is wider than
  +-10 %, is ``noisy``, with the reason.
* ``benchmark(model, inputs)`` (``single``) is the benchmark job's one-model report
  (percentiles, throughput, peak memory), on the same ``prepare`` and batching rule.

Every measurement's typed result is a ``StepTiming`` (``result``), carried by events, runner
results, the store, the CLI tables and the panels alike. Settings: ``TimingSettings``.
"""

from __future__ import annotations

import importlib
from typing import Any

# Name -> submodule. Imported on first use, so that ``accel.timing.result`` (which events
# carry, at the bottom layer) never drags the harness and the model loaders in with it.
_WHERE = {
    "Alone": "rounds",
    "Comparison": "rounds",
    "CpuPlacement": "placement",
    "Interval": "result",
    "Latency": "result",
    "MeasureError": "settings",
    "Side": "rounds",
    "StepTiming": "result",
    "TimingSettings": "settings",
    "apart_timing": "rounds",
    "batch_size": "harness",
    "benchmark": "single",
    "check_finite": "harness",
    "choose_cpus": "placement",
    "compare_interleaved": "harness",
    "compare_round_robin": "harness",
    "median_interval": "stats",
    "physical_cores": "settings",
    "prepare": "harness",
    "ratio_interval": "stats",
    "run_round_robin": "rounds",
    "run_rounds": "rounds",
    "side_by_side_problem": "memory",
    "time_alone": "harness",
    "with_threads": "placement",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'accel.timing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"accel.timing.{module}"), name)


__all__ = sorted(_WHERE)
