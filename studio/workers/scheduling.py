"""The pool's scheduler: which lane a job's device maps to, and starting queued jobs (highest
priority first, then submission order) while lanes have free slots under the pool's
concurrency limit."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable

from studio.workers.pool_jobs import FINAL, Job, Lane, PoolState


class Scheduler:
    """Moves jobs from the queue to lanes (``schedule``) and gives their slot back
    (``release``). ``start(job)`` runs a job that got a lane (on a thread of its own)."""

    def __init__(self, state: PoolState, start: Callable[[Job], None]) -> None:
        self.state = state
        self.start = start

    def lane_for(self, device: str | None, *, check_only: bool = False) -> Lane | None:
        """The least busy free lane for ``device`` (None: all busy); ValueError when the pool
        has no lane for it at all."""
        lanes = self.state.lanes
        dev = (device or "auto").lower()
        gpu_lanes = [lane for lane in lanes if lane.name.startswith("cuda")]
        cpu_lanes = [lane for lane in lanes if lane.name == "cpu"]
        if dev == "auto":
            candidates = gpu_lanes or cpu_lanes
        elif dev == "cpu":
            candidates = cpu_lanes
        elif dev == "cuda":
            candidates = gpu_lanes
        elif dev.startswith("cuda:"):
            candidates = [lane for lane in gpu_lanes if lane.name == dev]
        else:
            raise ValueError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")
        if not candidates:
            have = ", ".join(lane.name for lane in lanes)
            hint = "; nvidia-smi -L finds no such GPU" if dev.startswith("cuda") else ""
            raise ValueError(f"no worker lane for device {device!r} (this pool has: {have}){hint}")
        if check_only:
            return None
        free = [lane for lane in candidates if lane.busy < lane.slots]
        return min(free, key=lambda lane: lane.busy) if free else None

    def schedule(self) -> None:
        st = self.state
        to_start: list[Job] = []
        with st.lock:
            waiting: list[tuple[int, int, Job]] = []
            while st.queue and len(st.running) < st.max_concurrency:
                entry = heapq.heappop(st.queue)
                job = entry[2]
                lane = self.lane_for(job.device)
                if lane is None:
                    waiting.append(entry)
                    continue
                lane.busy += 1
                job.lane = lane
                job.status = "running"
                job.started = time.monotonic()
                st.running.add(job.id)
                to_start.append(job)
            for entry in waiting:
                heapq.heappush(st.queue, entry)
        for job in to_start:
            threading.Thread(
                target=self.start, args=(job,), name=f"job-{job.id[:8]}", daemon=True
            ).start()

    def release(self, job: Job) -> None:
        """The job ended: free its slot, let the next one start, wake its waiters."""
        st = self.state
        with st.lock:
            if job.id in st.running:
                st.running.discard(job.id)
                if job.lane is not None:
                    job.lane.busy -= 1
            if job.status not in FINAL:
                job.status = "failed"
            st.jobs.pop(job.id, None)
        job.finished.set()
        self.schedule()
        st.notify()
