"""The batching rule for tiny models, one rule for every timer (the comparison, the
original's row, ``benchmark`` and the exported script, which embeds this module's source).

A call shorter than ``TINY_CALL_S`` is timed in groups: one sample is the mean of
``calls_per_sample`` calls lasting about ``TARGET_SAMPLE_S`` together, so the timer's own
cost, its resolution and the scheduler's jitter do not dominate a sub-millisecond model.
"""

from __future__ import annotations

import math

# A model faster than this per call is batched: several calls per sample.
TINY_CALL_S = 1e-3
# A batched sample lasts about this long.
TARGET_SAMPLE_S = 2e-3
MAX_BATCH = 10_000


def calls_per_sample(call_s):
    """Calls per sample for a model that takes ``call_s`` seconds a call: 1 unless tiny."""
    if call_s >= TINY_CALL_S:
        return 1
    return int(min(MAX_BATCH, max(2, math.ceil(TARGET_SAMPLE_S / max(call_s, 1e-7) - 1e-6))))
