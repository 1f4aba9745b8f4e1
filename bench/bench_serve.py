"""Served load test: zoo models after their ONNX sample recipes, served by Triton (PyTriton).

    .venv/bin/python bench/bench_serve.py [--models transformer,resnet] [--clients 1,4,16]
        [--duration 5] [--rounds 2] [--db runs.db] [--artifact last|fp32|both]
        [--instances 1] [--threads N] [--clients-in-process]

For each model: runs resources/recipes/<model>_onnx.yaml with `studio run` (into --db, where a
succeeded run of that recipe is reused; default a temporary database), then `studio
serve-test`'s engine (accel.deploy.serve.serve_test) on the run's model file: a batch sweep of
direct calls, then Triton on 127.0.0.1 without and with dynamic batching under 1, 4, 16
concurrent clients. ``--artifact``: the run's last model file (the sample recipes end with
onnx_fp16, which ONNX Runtime runs on CPU through casts), the fp32 file of its onnxruntime
step, or both. With --rounds > 1 the two modes run in alternating order (round 1: no batching
first; round 2: dynamic batching first, ...) and the medians are printed.

Prints per model and file: the direct sweep's batching gain (best throughput / batch-1
throughput: what batching can gain on the model itself), throughput with dynamic batching /
without at each client count (target for the transformer at 16 clients: > 1.5x on CPU), p99
latency at each client count, and the served path's overhead over a direct call at 1 client
(single served requests timed in alternation with direct calls while the server is up).
The clients run in their own process (PyTriton runs the model in this one) unless
--clients-in-process.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_recipe(model: str, db: Path) -> str:
    recipe = ROOT / "resources" / "recipes" / f"{model}_onnx.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "studio", "--db", str(db), "run", str(recipe)],
        capture_output=True,
        text=True,
        cwd=db.parent,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    # The command's last word on the run: "run <id>: succeeded".
    line = next((ln for ln in proc.stdout.splitlines() if re.match(r"run \w+: ", ln)), "")
    if proc.returncode != 0 or not line.endswith("succeeded"):
        raise RuntimeError(f"{recipe.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return line.split()[1].rstrip(":")


def find_run(db: Path, model: str) -> str | None:
    """A succeeded run of ``<model>_onnx.yaml`` already in ``db`` (newest), or None."""
    from studio.store import Repository, RunFilter

    repo = Repository.open(db)
    try:
        runs = repo.list_runs(RunFilter(status=("succeeded",)), limit=200)
        return next((r.id for r in runs if r.recipe_name == f"{model}-onnx"), None)
    finally:
        repo.close()


def artifacts(db: Path, run_id: str, which: str) -> tuple[list[dict], object]:
    """The model files to serve: the run's last (``servable_run``) and/or its fp32 one (the
    onnxruntime step's file), and the input spec."""
    from accel.deploy.triton import servable_artifact
    from studio.serve_test import servable_run
    from studio.store import Repository

    repo = Repository.open(db)
    try:
        detail, last, spec = servable_run(repo, run_id)
        steps = {s.index: s for s in detail.steps if s.index >= 0}
        fp32 = servable_artifact(
            {"kind": a.kind, "path": a.path, "step": i, "pass": s.pass_name}
            for i, s in sorted(steps.items())
            if s.pass_name == "onnxruntime"
            for a in s.artifacts
        )
    finally:
        repo.close()
    out = []
    if which in ("last", "both"):
        out.append(last)
    if which in ("fp32", "both") and fp32 and fp32["path"] != last["path"]:
        out.append(fp32)
    return out, spec


def measure(art: dict, spec: object, args: argparse.Namespace, clients: list[int]) -> None:
    from accel.deploy.serve import serve_test
    from accel.deploy.triton import load_runtime

    runtime = load_runtime(art["kind"], art["path"], threads=args.threads)
    reports = []
    for r in range(args.rounds):
        modes = ["no batching", "dynamic batching"]
        if r % 2:
            modes.reverse()
        reports.append(
            serve_test(
                runtime,
                spec,
                clients=clients,
                duration_s=args.duration,
                modes=modes,
                instances=args.instances,
                client_process=not args.clients_in_process,
                log=lambda m: print("   ", m, flush=True),
            )
        )
    med = statistics.median
    print(f"-- {art['pass']} file ({art['kind']}), medians of {args.rounds} rounds")
    last = reports[-1]
    print(
        "   direct sweep: "
        + ", ".join(f"b{p.batch} {p.latency_ms:.2f} ms {p.throughput:.0f}/s" for p in last.sweep)
    )
    print(
        f"   batching gain of the model itself (best sweep throughput / batch 1): "
        f"{med(rp.sweep_gain for rp in reports):.2f}x (per round: "
        + ", ".join(f"{rp.sweep_gain:.2f}" for rp in reports)
        + f"); preferred {last.preferred_batch_sizes}, delay {last.max_queue_delay_us} us"
    )
    for n in clients:
        dyn = [rp.point("dynamic batching", n) for rp in reports]
        nob = [rp.point("no batching", n) for rp in reports]
        t_dyn, t_nob = med(p.throughput for p in dyn), med(p.throughput for p in nob)
        ratios = ", ".join(f"{a.throughput / b.throughput:.2f}" for a, b in zip(dyn, nob))
        print(
            f"   {n:3d} clients: {t_dyn:8.1f} vs {t_nob:8.1f} req/s = {t_dyn / t_nob:5.2f}x "
            f"with dynamic batching (rounds: {ratios}); p99 {med(p.p99_ms for p in dyn):8.2f} ms "
            f"(dynamic) / {med(p.p99_ms for p in nob):8.2f} ms (none); batches "
            + "/".join("-" if p.avg_batch is None else f"{p.avg_batch:.1f}" for p in dyn)
            + "; errors "
            f"{sum(p.errors for p in dyn + nob)}"
        )
    direct = med(rp.direct_p50_ms for rp in reports)
    served = med(rp.served_p50_ms for rp in reports)
    print(
        f"   served overhead at 1 client: {served - direct:.2f} ms (p50 {served:.2f} ms served "
        f"vs {direct:.2f} ms direct, timed in alternation)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="transformer,resnet")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--db", type=Path, help="database to run the recipes into / reuse runs from")
    ap.add_argument("--artifact", choices=("last", "fp32", "both"), default="both")
    ap.add_argument("--instances", type=int, default=1, help="model instances in the server")
    ap.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: cores)")
    ap.add_argument("--clients-in-process", action="store_true")
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    print(
        f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}; instances "
        f"{args.instances}, ORT threads {args.threads or 'default'}, clients in "
        + ("this process" if args.clients_in_process else "a separate process"),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        db = args.db or Path(tmp) / "bench.db"
        for model in args.models.split(","):
            run_id = find_run(db, model) if db.exists() else None
            if run_id is None:
                print(f"== zoo:{model}: running {model}_onnx.yaml …", flush=True)
                run_id = run_recipe(model, db)
            print(f"== zoo:{model}: run {run_id[:12]}", flush=True)
            files, spec = artifacts(db, run_id, args.artifact)
            for art in files:
                measure(art, spec, args, clients)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
