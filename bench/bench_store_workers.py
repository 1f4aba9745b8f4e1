"""Store and worker numbers: worker start-up, protocol overhead, history pages of 10,000 runs.

    .venv/bin/python bench/bench_store_workers.py [--runs 10000] [--events 20000]

Prints medians measured in this run on this machine:
- worker start-up: ``python -m studio.workers.entry`` spawned until its first message (hello),
  and a whole no-op job through the pool (submit -> finished);
- protocol overhead per message: encode + decode in one process, and end to end (worker
  emits N events, the parent's listener receives them);
- store: one step_finished event recorded (a write transaction);
- history: a page of 50 runs (plain, filtered by status + tag, full-text search, count) from
  a database of N runs, against the 100 ms target.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from studio.store import Repository, RunFilter  # noqa: E402
from studio.store.models import (  # noqa: E402
    MetricRow,
    ModelRow,
    RecipeRow,
    RunRow,
    RunTagRow,
    StepRow,
)
from studio.workers.pool import WorkerPool  # noqa: E402
from studio.workers.protocol import EventMessage, JobSpec, MessageWriter, decode  # noqa: E402

PLUGIN = str(ROOT / "tests" / "studio" / "fault_jobs.py")


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_worker_startup(n: int = 10) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [sys.executable, "-m", "studio.workers.entry"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        p.stdin.write(JobSpec(job_id="b", kind="echo", params={"n": 0}, plugins=[PLUGIN]).to_line())
        p.stdin.flush()
        first = p.stdout.readline()
        times.append(time.perf_counter() - t0)
        assert decode(first).type == "hello", first
        p.stdin.close()
        p.stdout.read()
        p.wait()
    pool_times = []
    with WorkerPool(devices=[], cpu_workers=1) as pool:
        for _ in range(n):
            t0 = time.perf_counter()
            out = pool.submit("echo", {"n": 0}, plugins=[PLUGIN]).wait(60)
            pool_times.append(time.perf_counter() - t0)
            assert out.ok, out
    return median_ms(times), median_ms(pool_times)


def bench_protocol(n_events: int) -> tuple[float, float]:
    buf = io.StringIO()
    w = MessageWriter(buf, job_id="b")
    ev = {"event": "progress", "index": 0, "fraction": 0.5, "message": "x"}
    t0 = time.perf_counter()
    for _ in range(n_events):
        w.send(EventMessage, event=ev)
    for line in buf.getvalue().splitlines():
        decode(line)
    in_process = (time.perf_counter() - t0) / n_events

    got = []
    first_last: list[float] = []
    done = threading.Event()

    def listen(u):
        if u.what == "event":
            got.append(1)
            if len(got) == 1:
                first_last.append(time.perf_counter())
            if len(got) == n_events:
                first_last.append(time.perf_counter())
        elif u.what == "finished":
            done.set()

    with WorkerPool(devices=[], cpu_workers=1) as pool:
        pool.subscribe(listen)
        out = pool.submit("echo", {"n": n_events}, plugins=[PLUGIN]).wait(300)
        done.wait(60)
    assert out.ok and len(got) == n_events, (out, len(got))
    end_to_end = (first_last[1] - first_last[0]) / (n_events - 1)
    return in_process * 1e6, end_to_end * 1e6


def fill(repo: Repository, n_runs: int) -> None:
    """Bulk-insert ``n_runs`` runs (2 steps, 4 metrics each, tags) straight into the tables."""
    from sqlalchemy import insert

    now = dt.datetime.now(dt.UTC)
    statuses = ["succeeded"] * 6 + ["failed", "crashed", "cancelled", "timed_out"]
    with repo.engine.begin() as conn:
        models = [
            conn.execute(
                insert(ModelRow).values(
                    source=s, kind="torch", content_hash="", input_spec="", created_at=now
                )
            ).inserted_primary_key[0]
            for s in ("zoo:mlp", "zoo:resnet", "zoo:transformer", "my_pkg.nets:build")
        ]
        recipes = [
            conn.execute(
                insert(RecipeRow).values(
                    hash=uuid.uuid4().hex * 2,
                    name=name,
                    schema_version=1,
                    content={"name": name},
                    created_at=now,
                )
            ).inserted_primary_key[0]
            for name in ("fp16", "int8-dynamic", "prune-30", "compile-max")
        ]
        runs, tags, steps = [], [], []
        for i in range(n_runs):
            rid = uuid.uuid4().hex
            runs.append(
                dict(
                    id=rid,
                    name=f"run {i}",
                    model_id=models[i % 4],
                    recipe_id=recipes[(i // 4) % 4],
                    parent_run_id=None,
                    kind="run_recipe",
                    status=statuses[i % len(statuses)],
                    device="cpu" if i % 3 else "cuda:0",
                    environment={"torch": "2.13"},
                    baseline={},
                    summary={},
                    job_params={},
                    run_dir="",
                    notes="nightly sweep" if i % 50 == 0 else "",
                    error="",
                    error_type="",
                    exit_code=None,
                    signal="",
                    log_tail="",
                    created_at=now - dt.timedelta(seconds=n_runs - i),
                    started_at=None,
                    finished_at=None,
                    duration_s=float(i % 17),
                )
            )
            tags.append(dict(run_id=rid, tag=f"batch{i % 10}"))
            if i % 7 == 0:
                tags.append(dict(run_id=rid, tag="candidate"))
            for idx in (-1, 0):
                steps.append(
                    dict(
                        run_id=rid,
                        index=idx,
                        pass_name="baseline" if idx < 0 else "fp16",
                        params={},
                        status="succeeded",
                        error="",
                        details={},
                    )
                )
        conn.execute(insert(RunRow), runs)
        conn.execute(insert(RunTagRow), tags)
        conn.execute(insert(StepRow), steps)
        step_ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM steps")]
        metrics = [
            dict(step_id=s, key=k, value=1.0, is_nan=False)
            for s in step_ids
            for k in ("latency_p50_ms", "latency_p90_ms", "speedup", "size_bytes")
        ]
        conn.execute(insert(MetricRow), metrics)


def bench_history(repo: Repository, repeats: int = 20) -> dict[str, float]:
    cases = {
        "page of 50 (newest)": lambda: repo.list_runs(limit=50),
        "page 10 of 50 (offset 450)": lambda: repo.list_runs(limit=50, offset=450),
        "filter status+tag": lambda: repo.list_runs(
            RunFilter(status=("succeeded",), tags=("candidate",)), limit=50
        ),
        "filter model+recipe": lambda: repo.list_runs(
            RunFilter(model="resnet", recipe="int8"), limit=50
        ),
        "full-text search 'nightly'": lambda: repo.search("nightly", limit=50),
        "count (filtered)": lambda: repo.count_runs(RunFilter(status=("failed",))),
        "show one run": lambda: repo.get_run(repo.list_runs(limit=1)[0].id),
    }
    out = {}
    for name, fn in cases.items():
        fn()  # warm the page cache
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        out[name] = median_ms(samples)
    return out


def bench_record(repo: Repository, n: int = 100) -> float:
    run = repo.create_run(model_source="zoo:mlp")
    samples = []
    for i in range(n):
        ev = {
            "event": "step_finished",
            "index": i,
            "pass_name": "p",
            "status": "succeeded",
            "duration_s": 0.1,
            "metrics": {"latency_p50_ms": 1.0, "speedup": 2.0, "size_bytes": 1e6},
            "parity": {
                "passed": True,
                "outputs": [{"name": "o", "max_abs": 1e-4, "cosine": 1.0, "passed": True}],
            },
            "artifacts": [{"kind": "model", "path": "/x", "sha256": "0" * 64, "bytes": 1}],
        }
        t0 = time.perf_counter()
        repo.record_event(run.id, ev)
        samples.append(time.perf_counter() - t0)
    return median_ms(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--events", type=int, default=20_000)
    args = ap.parse_args()

    hello_ms, job_ms = bench_worker_startup()
    print(f"worker start-up to first message (hello): {hello_ms:7.1f} ms   (median of 10)")
    print(f"no-op job through the pool, submit->done:  {job_ms:7.1f} ms")
    enc_us, e2e_us = bench_protocol(args.events)
    print(f"protocol per message, encode+decode:       {enc_us:7.1f} us")
    print(f"protocol per message, worker->listener:    {e2e_us:7.1f} us   ({args.events} events)")

    with tempfile.TemporaryDirectory() as tmp:
        repo = Repository.open(Path(tmp) / "bench.db")
        t0 = time.perf_counter()
        fill(repo, args.runs)
        print(f"store: filled {args.runs} runs in {time.perf_counter() - t0:.1f} s (bulk insert)")
        target = 100.0
        for name, ms in bench_history(repo).items():
            print(f"history {name:<30} {ms:7.2f} ms   {ms / target:5.2f}x of the 100 ms target")
        print(f"store: record one step_finished event:      {bench_record(repo):7.2f} ms")
        repo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
