"""Test plugin: a job whose memory grows without end (a runaway model), until stopped."""

from __future__ import annotations

import time
from typing import Any

from accel.jobs import register_job


def memory_hog(params: dict[str, Any], emit: Any, cancel: Any) -> dict[str, Any]:
    chunks = []
    deadline = time.monotonic() + float(params.get("seconds", 60))
    # Stops by itself at 2 GiB (the test then fails) so a broken cap cannot eat the machine.
    while time.monotonic() < deadline and len(chunks) < 64:
        chunks.append(bytearray(32 << 20))  # 32 MiB, touched (bytearray zero-fills)
        time.sleep(0.05)
    return {"status": "succeeded", "chunks": len(chunks)}


register_job("memory_hog", memory_hog)
