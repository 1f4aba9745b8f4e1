"""Recipe search: find the fastest chain of passes within a parity budget.

``build_space`` (the chains the passes allow), ``run_search`` (seeds + Optuna), executors
(``InProcessExecutor`` here, ``RayExecutor`` in ``accel.search.ray_cluster``, the studio's
worker pool in ``studio.search``), ``PrefixCache`` (built prefixes reused across trials).
"""

from accel.search.cache import PrefixCache
from accel.search.engine import (
    OBJECTIVES,
    InProcessExecutor,
    SearchConfig,
    SearchResult,
    TrialRecord,
    pareto_front,
    run_search,
    trial_recipe,
)
from accel.search.space import SearchError, SearchSpace, build_space, check_chain

__all__ = [
    "OBJECTIVES",
    "InProcessExecutor",
    "PrefixCache",
    "SearchConfig",
    "SearchError",
    "SearchResult",
    "SearchSpace",
    "TrialRecord",
    "build_space",
    "check_chain",
    "pareto_front",
    "run_search",
    "trial_recipe",
]
