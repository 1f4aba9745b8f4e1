"""Issue 15 (10): workers have a memory cap; a runaway job ends as "out of memory" with the
figure, and the next job runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.workers.pool import WorkerPool
from studio.workers.watchdog import default_memory_limit

HOG = str(Path(__file__).with_name("memory_hog_job.py"))
FAULTS = str(Path(__file__).parents[1] / "studio" / "fault_jobs.py")


def test_runaway_worker_is_stopped_at_the_cap_and_the_next_job_runs():
    limit = 400 << 20
    with WorkerPool(None, cpu_workers=1, devices=[], memory_limit_bytes=limit) as pool:
        out = pool.submit("memory_hog", {"seconds": 120}, plugins=[HOG]).wait(120)
        assert out.status == "crashed" and out.error_type == "OutOfMemory"
        assert "out of memory" in out.error and "limit of 400 MiB" in out.error
        nxt = pool.submit("fake_run", {"steps": 1}, plugins=[FAULTS]).wait(60)
        assert nxt.status == "succeeded"


def test_memory_cap_setting(monkeypatch):
    monkeypatch.setenv("ACCEL_WORKER_MEMORY_MB", "512")
    assert default_memory_limit() == 512 << 20
    monkeypatch.setenv("ACCEL_WORKER_MEMORY_MB", "0")
    assert default_memory_limit() == 0
    monkeypatch.delenv("ACCEL_WORKER_MEMORY_MB")
    import psutil

    assert default_memory_limit() == int(psutil.virtual_memory().total * 0.75)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc")
def test_mapped_file_pages_do_not_count_and_allocations_do(tmp_path):
    """OpenVINO and GenAI map an IR's weights file, each once: a 1B decoder's f32 weights
    counted twice as resident stopped a search trial that held half the cap itself."""
    import mmap

    import psutil

    from studio.workers.processes import resident_bytes

    me = psutil.Process()
    size = 256 << 20
    path = tmp_path / "weights.bin"
    with path.open("wb") as f:
        f.truncate(size)
    before, rss_before = resident_bytes(me), me.memory_info().rss
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        touched = sum(m[i] for i in range(0, size, mmap.PAGESIZE))  # every page resident
        assert touched == 0
        assert me.memory_info().rss - rss_before > size // 2  # RSS sees the mapped file
        if _status_kib("RssFile") * 1024 < size // 2:  # tmpfs: the file's pages are memory
            pytest.skip("the temporary folder is in memory (tmpfs): its pages count, rightly")
        assert resident_bytes(me) - before < size // 4  # the cap does not
        block = bytearray(b"\x01") * size  # anonymous memory, written: counted
        assert resident_bytes(me) - before > size // 2
        del block


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0
