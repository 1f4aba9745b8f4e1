"""Run the sample recipes on the zoo models and print speedup and parity per step.

All recipes run in this one process on this machine, each step benchmarked by the runner
against the same recipe's original model on the same inputs, so the ratios are comparable
within a recipe. Usage:

    .venv/bin/python bench/bench_recipes.py                       # resources/recipes/*.yaml
    .venv/bin/python bench/bench_recipes.py resources/recipes/mlp.yaml --iters 100
    .venv/bin/python bench/bench_recipes.py --json results.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accel.recipe import load_recipe  # noqa: E402
from accel.runner import run_recipe  # noqa: E402


def _fmt(v, spec: str, missing: str = "-") -> str:
    return missing if v is None else format(v, spec)


def bench_recipe(path: Path, args: argparse.Namespace, out_root: Path) -> list[dict]:
    recipe = load_recipe(path)
    overrides = {}
    if args.iters:
        overrides["iters"] = args.iters
    if args.warmup is not None:
        overrides["warmup"] = args.warmup
    if args.threads:
        overrides["threads"] = args.threads
    if overrides:
        recipe = recipe.model_copy(
            update={"benchmark": recipe.benchmark.model_copy(update=overrides)}
        )
    t0 = time.perf_counter()
    res = run_recipe(recipe, out_dir=out_root / path.stem)
    rows = [
        {
            "recipe": path.stem,
            "model": recipe.model.source,
            "step": "original",
            "p50_ms": res.baseline_timing.p50_ref_ms if res.baseline_timing else None,
            "speedup": 1.0,
            "status": "baseline",
        }
    ]
    for s in res.steps:
        worst = (s.parity or {}).get("worst", {})
        rows.append(
            {
                "recipe": path.stem,
                "model": recipe.model.source,
                "step": s.label,
                # the step's p50 and the original's from the rounds of its speedup
                "p50_ms": s.timing.p50_step_ms if s.timing else None,
                "ref_p50_ms": s.timing.p50_ref_ms if s.timing else None,
                "speedup": s.timing.speedup if s.timing else None,
                "max_abs": worst.get("max_abs"),
                "cosine": worst.get("min_cosine"),
                "top1": worst.get("min_top1"),
                "compile_s": s.metrics.get("compile_time_s"),
                "size_mb": (s.metrics.get("size_bytes") or 0) / 1e6 or None,
                "status": s.status,
                "error": s.error,
            }
        )
    if not res.ok:
        rows.append(
            {"recipe": path.stem, "step": "(run)", "status": res.status, "error": res.error}
        )
    print(
        f"# {path.name}: {res.status} in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return rows


def print_table(rows: list[dict]) -> None:
    head = f"{'recipe':<18} {'step':<16} {'p50 ms':>9} {'speedup':>8} {'max_abs':>9} {'cosine':>9} {'top1':>5} {'compile s':>9}  gate"
    print(head)
    print("-" * len(head))
    last = None
    for r in rows:
        if last is not None and r["recipe"] != last:
            print()
        last = r["recipe"]
        status = {"succeeded": "pass", "gate_failed": "FAIL", "baseline": ""}.get(
            r["status"], r["status"]
        )
        print(
            f"{r['recipe']:<18} {r['step']:<16} {_fmt(r.get('p50_ms'), '9.3f'):>9} "
            f"{_fmt(r.get('speedup'), '7.2f') + ('x' if r.get('speedup') else ''):>8} "
            f"{_fmt(r.get('max_abs'), '9.2g'):>9} {_fmt(r.get('cosine'), '9.6f'):>9} "
            f"{_fmt(r.get('top1'), '5.2f'):>5} {_fmt(r.get('compile_s'), '9.1f'):>9}  {status}"
        )
        if r.get("error"):
            print(f"{'':<18} error: {r['error']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "recipes", nargs="*", type=Path, help="recipe files (default: resources/recipes/*.yaml)"
    )
    parser.add_argument(
        "--iters", type=int, help="timed iterations per step (default: the recipe's)"
    )
    parser.add_argument("--warmup", type=int, help="warm-up iterations (default: the recipe's)")
    parser.add_argument("--threads", type=int, help="torch / ORT threads (default: the recipe's)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument(
        "--out", type=Path, help="keep the run folders here (default: a temp folder)"
    )
    args = parser.parse_args()
    paths = args.recipes or sorted((ROOT / "resources" / "recipes").glob("*.yaml"))
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        out_root = args.out or Path(tmp)
        for p in paths:
            rows += bench_recipe(p, args, out_root)
    import torch

    threads = args.threads or "the recipes' (library default)"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"torch {torch.__version__}, threads: {threads}, {os.cpu_count()} CPUs, "
        f"load average {load:.1f}; compile s = first compiled call (inductor cache as found)"
    )
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
