"""Do speedups hold still when the machine is busy? (issue 10)

Runs the same 3-step recipe on zoo:resnet and zoo:transformer: once with no load of our own
(the "quiet" reference), then ``--runs`` times while a busy-loop subprocess that this script
starts (pinned to one core) keeps that core at 100 %. For every step it prints:

* the speedups the runner reported (median of per-round ratios, original and step timed in
  alternating rounds) and max/min over the loaded runs (target <= 1.15),
* how many loaded runs' 95 % intervals contain the quiet speedup (target >= 4 of 5),
* how many were flagged noisy, and the interval half-widths,
* for contrast, the ratio the old runner reported: the original timed once at the start of
  the run against the step timed minutes later (baseline p50 / step p50), max/min,
* the wall time of each run.

    .venv/bin/python bench/bench_noise.py                 # both models, 5 loaded runs each
    .venv/bin/python bench/bench_noise.py --runs 3 --models resnet --json out.json

The machine's own load counts too: on a shared machine the "quiet" run is not quiet, and
the script says so (other processes' CPU use during each run comes from the noise guard).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("ACCEL_SAVE_STEP_MODELS", "0")  # saving step models is not timed work

RECIPES = {
    "resnet": {
        "name": "noise-resnet",
        "model": {"source": "zoo:resnet"},
        "steps": [
            {"pass": "fold_batchnorm"},
            {"pass": "channels_last"},
            {"pass": "export_onnx"},
        ],
    },
    "transformer": {
        "name": "noise-transformer",
        "model": {"source": "zoo:transformer"},
        "steps": [
            {"pass": "export_onnx"},
            {"pass": "onnxruntime", "params": {"graph_optimization_level": "all"}},
            {
                "pass": "quantize_onnx_dynamic",
                "gates": {"rtol": 0.5, "atol": 0.5, "min_cosine": 0.9},
            },
        ],
    },
}

BUSY_LOOP = "while True:\n    pass\n"


@contextlib.contextmanager
def busy_core(core: int):
    """A busy-loop subprocess pinned to ``core`` for the duration of the block."""

    def pin() -> None:
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, {core})

    proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], preexec_fn=pin)
    try:
        time.sleep(0.5)  # let it get going
        yield proc
    finally:
        proc.kill()
        proc.wait()


def run_once(recipe: dict, work: Path) -> dict:
    from accel.runner import run_recipe

    t0 = time.perf_counter()
    res = run_recipe(recipe, out_dir=work / f"run-{time.monotonic_ns()}")
    wall = time.perf_counter() - t0
    if res.status != "succeeded":
        raise SystemExit(f"{recipe['name']}: run {res.status}: {res.error}")
    base = res.baseline_timing.p50_ref_ms if res.baseline_timing else None
    steps = []
    for s in res.steps:
        t = s.timing
        if t is None:
            continue
        noise = t.noise or {}
        steps.append(
            {
                "step": s.label,
                "speedup": t.speedup,
                "low": t.speedup_low,
                "high": t.speedup_high,
                "noisy": t.noisy,
                "reason": t.noise_reason,
                "other_cores": noise.get("other_cores"),
                "rounds": t.rounds,
                "threads": t.threads,
                "placement": t.placement,
                # What an old runner reported: the original timed at the start of the run
                # against the step timed later (not one comparison).
                "sequential": (base / t.p50_step_ms) if base and t.p50_step_ms else None,
            }
        )
    return {"wall_s": wall, "steps": steps, "threads": res.environment.get("threads")}


def spread(values: list[float]) -> float:
    v = [x for x in values if x]
    return max(v) / min(v) if v else float("nan")


def report(name: str, quiet: dict, loaded: list[dict], same: dict | None = None) -> dict:
    """``same``: a quiet run with the thread count the loaded runs ended up with (when the
    studio left a busy CPU out); the intervals are checked against it, like for like."""
    print(f"\n== {name}: threads {quiet['threads']}, {len(loaded)} loaded runs")
    placements = {s["placement"] for r in loaded for s in r["steps"] if s.get("placement")}
    for p in sorted(placements):
        print(f"   loaded runs: {p}")
    print(
        f"   wall time: quiet {quiet['wall_s']:.1f} s, loaded "
        f"{statistics.mean(r['wall_s'] for r in loaded):.1f} s (mean)"
    )
    out = {"quiet": quiet, "loaded": loaded, "steps": []}
    for i, q in enumerate(quiet["steps"]):
        runs = [r["steps"][i] for r in loaded]
        sp = [r["speedup"] for r in runs]
        seq = [r["sequential"] for r in runs]
        ref = same["steps"][i] if same else q
        contains = sum(1 for r in runs if r["low"] <= ref["speedup"] <= r["high"])
        widths = [
            max(r["speedup"] - r["low"], r["high"] - r["speedup"]) / r["speedup"] for r in runs
        ]
        row = {
            "step": q["step"],
            "quiet": q["speedup"],
            "quiet_interval": [q["low"], q["high"]],
            "quiet_same_threads": ref["speedup"],
            "quiet_same_threads_interval": [ref["low"], ref["high"]],
            "loaded": sp,
            "max_over_min": spread(sp),
            "contains_quiet": contains,
            "noisy": sum(r["noisy"] for r in runs),
            "half_width_max": max(widths),
            "sequential_max_over_min": spread(seq + [q["sequential"]]),
        }
        out["steps"].append(row)
        print(
            f"   {i + 1}. {q['step']:<22} quiet {q['speedup']:.2f}x [{q['low']:.2f}-{q['high']:.2f}]"
            f"{' noisy' if q['noisy'] else ''}"
            + (
                f"; quiet at the loaded runs' {same['steps'][i]['threads']} thread(s) "
                f"{ref['speedup']:.2f}x [{ref['low']:.2f}-{ref['high']:.2f}]"
                if same
                else ""
            )
        )
        print(
            f"      loaded: {' '.join(f'{x:.2f}' for x in sp)}  max/min {row['max_over_min']:.2f}"
            f"  contain quiet {contains}/{len(runs)}  noisy {row['noisy']}/{len(runs)}"
            f"  widest +-{100 * row['half_width_max']:.0f}%"
        )
        print(
            f"      old method (baseline at start / step later): "
            f"{' '.join(f'{x:.2f}' for x in seq)}  max/min {row['sequential_max_over_min']:.2f}"
        )
    busy = [s["other_cores"] for r in loaded for s in r["steps"] if s["other_cores"] is not None]
    qbusy = [s["other_cores"] for s in quiet["steps"] if s["other_cores"] is not None]
    if qbusy:
        print(
            f"   other processes' CPU (cores): quiet run {statistics.mean(qbusy):.2f}, "
            f"loaded runs {statistics.mean(busy):.2f} (of {os.cpu_count()})"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="loaded runs per model (5)")
    ap.add_argument("--models", default="resnet,transformer", help="comma list (both)")
    ap.add_argument("--core", type=int, default=0, help="core the busy loop is pinned to (0)")
    ap.add_argument("--json", help="write every number here")
    ap.add_argument(
        "--benchmark", default="{}", help='recipe benchmark settings (JSON), e.g. {"rounds": 16}'
    )
    args = ap.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-noise-") as tmp:
        work = Path(tmp)
        for name in args.models.split(","):
            recipe = {**RECIPES[name], "benchmark": json.loads(args.benchmark)}
            run_once(recipe, work)  # warm caches (imports, inductor, ORT) before measuring
            quiet = run_once(recipe, work)
            loaded = []
            with busy_core(args.core):
                for _ in range(args.runs):
                    loaded.append(run_once(recipe, work))
            used = {s["threads"] for r in loaded for s in r["steps"] if s.get("threads")}
            same = None
            if len(used) == 1 and used != {s["threads"] for s in quiet["steps"]}:
                threads = used.pop()
                bench = {**recipe.get("benchmark", {}), "threads": threads}
                same = run_once({**recipe, "benchmark": bench}, work)
            results[name] = report(name, quiet, loaded, same)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
