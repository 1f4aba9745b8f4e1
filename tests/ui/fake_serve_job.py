"""Test-only stand-in for the ``serve_test`` job, loaded into the worker as a plugin: it emits
progress like the real one and returns a fixed report plus the worker's pid (so a test can see
the job ran in a worker process, not on the GUI thread). The real job is tested with a real
Triton server in tests/ui/test_serve_test_dialog.py (slow) and tests/accel/test_deploy_triton.py.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from accel.jobs import register_job


def fake_serve_test(params: dict[str, Any], emit: Any, cancel: Any) -> dict[str, Any]:
    emit({"event": "progress", "index": -1, "fraction": 0.5, "message": "no batching: 2 clients"})
    clients = int(params["clients"][0])
    load = [
        {"mode": mode, "clients": clients, "requests": 10, "errors": 0, "p50_ms": 2.0,
         "p99_ms": 3.0, "throughput": thr}
        for mode, thr in (("no batching", 100.0), ("dynamic batching", 180.0))
    ]  # fmt: skip
    return {
        "sweep": [{"batch": 1, "latency_ms": 1.0, "throughput": 1000.0}],
        "preferred_batch_sizes": [],
        "max_queue_delay_us": 500,
        "max_batch_size": 1,
        "direct_p50_ms": 1.0,
        "sweep_gain": 1.0,
        "load": load,
        "worker_pid": os.getpid(),
        "worker_thread": threading.current_thread().name,
        "params": params,
    }


register_job("serve_test", fake_serve_test)
