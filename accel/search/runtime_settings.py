"""Runtime settings as a search dimension for the throughput objective.

With ``objective="throughput"`` the runtime passes in the space get their session settings
searched: OpenVINO's performance hint (``latency``: one request at a time; ``throughput``:
several streams) and stream count, ONNX Runtime's intra-op and inter-op thread counts. The
trials then measure throughput with requests in flight together (the runtime's own request
queue, see ``Runtime.concurrent_throughput``) and keep the one-request latency as measured,
so each setting is reported with the latency it costs. Counts never exceed the benchmark's
thread count (the machine's CPUs when none is set): a search on one thread has no thread
counts to try, only the hints.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from accel.passes.base import Choice
from accel.search.space import SearchSpace

COUNTS = (1, 2, 4, 8, 16)


def runtime_domains(threads: int) -> dict[str, dict[str, Choice]]:
    """Pass -> searched session settings, for a machine (or benchmark) of ``threads`` threads."""
    counts = tuple(n for n in COUNTS if n <= max(1, threads))
    return {
        "openvino": {
            "performance_hint": Choice(("latency", "throughput")),
            "streams": Choice((None, *counts)),
        },
        "onnxruntime": {
            "intra_op_threads": Choice((None, *counts)),
            "inter_op_threads": Choice((None, *(n for n in counts if n <= 2))),
        },
    }


def add_runtime_settings(
    space: SearchSpace, objective: str, threads: int | None
) -> tuple[SearchSpace, dict[str, Any]]:
    """The space with the runtime passes' session settings searched (throughput objective
    only), and what was added (pass -> param -> domain)."""
    if objective != "throughput":
        return space, {}
    domains = runtime_domains(threads or os.cpu_count() or 1)
    passes = dict(space.passes)
    added: dict[str, Any] = {}
    for name, params in domains.items():
        p = passes.get(name)
        if p is None:
            continue
        passes[name] = dataclasses.replace(p, params={**p.params, **params})
        added[name] = {k: d.to_dict() for k, d in params.items()}
    return dataclasses.replace(space, passes=passes), added
