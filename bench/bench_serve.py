"""Served load test: zoo models after their ONNX sample recipes, served by Triton (PyTriton).

    .venv/bin/python bench/bench_serve.py [--models transformer,resnet] [--clients 1,4,16]
                                          [--duration 5] [--rounds 2]

For each model: runs resources/recipes/<model>_onnx.yaml with `studio run` into a temporary
database, then `studio serve-test`'s engine (accel.deploy.serve.serve_test) on the run's
final ONNX model: a batch sweep of direct calls, then Triton on 127.0.0.1 without and with
dynamic batching under 1, 4, 16 concurrent clients. With --rounds > 1 the two modes run in
alternating order (round 1: no batching first; round 2: dynamic batching first, ...) and the
medians are printed. Prints per model: throughput with dynamic batching / without at each
client count (target for the transformer at 16 clients: > 1.5x on CPU), p99 latency at each
client count, and the served path's overhead over a direct call at 1 client.
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="transformer,resnet")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",")]

    from accel.deploy.serve import serve_test
    from accel.deploy.triton import load_runtime
    from studio.commands.deploy import run_artifact
    from studio.store import Repository

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        db = Path(tmp) / "bench.db"
        for model in args.models.split(","):
            print(f"== zoo:{model}: running {model}_onnx.yaml …", flush=True)
            run_id = run_recipe(model, db)
            repo = Repository.open(db)
            try:
                _, art, spec = run_artifact(repo, run_id)
            finally:
                repo.close()
            runtime = load_runtime(art["kind"], art["path"])
            reports = []
            for r in range(args.rounds):
                modes = ["no batching", "dynamic batching"]
                if r % 2:
                    modes.reverse()
                rep = serve_test(
                    runtime,
                    spec,
                    clients=clients,
                    duration_s=args.duration,
                    modes=modes,
                    log=lambda m: print("   ", m, flush=True),
                )
                reports.append(rep)
            print(f"-- zoo:{model} ({art['pass']} artifact), medians of {args.rounds} rounds")
            print(f"   preferred batch sizes {reports[-1].preferred_batch_sizes}")
            for n in clients:
                dyn = [rp.point("dynamic batching", n) for rp in reports]
                nob = [rp.point("no batching", n) for rp in reports]
                t_dyn = statistics.median(p.throughput for p in dyn)
                t_nob = statistics.median(p.throughput for p in nob)
                p99_dyn = statistics.median(p.p99_ms for p in dyn)
                p99_nob = statistics.median(p.p99_ms for p in nob)
                print(
                    f"   {n:3d} clients: {t_dyn:8.1f} vs {t_nob:8.1f} req/s = "
                    f"{t_dyn / t_nob:5.2f}x with dynamic batching; p99 {p99_dyn:7.2f} ms "
                    f"(dynamic) / {p99_nob:7.2f} ms (none)"
                )
            one = statistics.median(rp.point("no batching", 1).p50_ms for rp in reports)
            direct = statistics.median(rp.direct_p50_ms for rp in reports)
            print(
                f"   served overhead at 1 client: {one - direct:.2f} ms "
                f"(p50 {one:.2f} ms served vs {direct:.2f} ms direct)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
