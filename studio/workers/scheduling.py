"""Scheduling: which lane a job's device maps to, and starting queued jobs (highest
priority first, then submission order) while lanes have free slots under the pool's
concurrency limit."""

from __future__ import annotations

import heapq
import threading
import time

from studio.workers.pool_jobs import FINAL, Job, Lane


class Scheduling:
    """The WorkerPool part that moves jobs from the queue to lanes and back."""

    def _lane_for(self, device: str | None, *, check_only: bool = False) -> Lane | None:
        dev = (device or "auto").lower()
        gpu_lanes = [lane for lane in self.lanes if lane.name.startswith("cuda")]
        cpu_lanes = [lane for lane in self.lanes if lane.name == "cpu"]
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
            have = ", ".join(lane.name for lane in self.lanes)
            hint = "; nvidia-smi -L finds no such GPU" if dev.startswith("cuda") else ""
            raise ValueError(f"no worker lane for device {device!r} (this pool has: {have}){hint}")
        if check_only:
            return None
        free = [lane for lane in candidates if lane.busy < lane.slots]
        return min(free, key=lambda lane: lane.busy) if free else None

    def _schedule(self) -> None:
        to_start: list[Job] = []
        with self._lock:
            waiting: list[tuple[int, int, Job]] = []
            while self._queue and len(self._running) < self.max_concurrency:
                entry = heapq.heappop(self._queue)
                job = entry[2]
                lane = self._lane_for(job.device)
                if lane is None:
                    waiting.append(entry)
                    continue
                lane.busy += 1
                job.lane = lane
                job.status = "running"
                job.started = time.monotonic()
                self._running.add(job.id)
                to_start.append(job)
            for entry in waiting:
                heapq.heappush(self._queue, entry)
        for job in to_start:
            threading.Thread(
                target=self._supervise, args=(job,), name=f"job-{job.id[:8]}", daemon=True
            ).start()

    def _release(self, job: Job) -> None:
        with self._lock:
            if job.id in self._running:
                self._running.discard(job.id)
                if job.lane is not None:
                    job.lane.busy -= 1
            if job.status not in FINAL:
                job.status = "failed"
            self._jobs.pop(job.id, None)
        job.finished.set()
        self._schedule()
        with self._wake:
            self._wake.notify_all()
