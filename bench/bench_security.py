"""Security bench (issue 29): every attack route's reproduction, the box, the fuzzers, and the
memory the input-size check promises.

    python bench/bench_security.py [--fuzz-total 10000] [--quick]

Prints, all measured in this run:

1. the routes: each reproduction tried at its cause (unconfined, in this process) and, where
   a command is the route, through the command; for the file routes also whether the file is
   a live attack once the checks are skipped; the tally of open routes;
2. the box on this kernel: the Landlock ABI, the confinement tests' result, and what the box
   adds to a job's start (a warm worker's jobs with and without the box, timed round-robin);
3. the fuzzers (tests/security/test_fuzz_*.py) with enough examples for ``--fuzz-total``
   cases: passing cases, failures (a traceback or a hang past the per-case deadline);
4. per dtype, a fresh process's peak memory while it samples inputs, over what the size
   check counted (the target: at most 1.2x).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DTYPES = ("bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64")


def routes() -> int:
    from tests.security.reproductions import ROUTES, live, run_route

    print("== attack routes (issue 29) ==")
    print(f"{'route':<36} {'state':<7} {'live':<5} detail")
    opened = 0
    for key in ROUTES:
        with tempfile.TemporaryDirectory(prefix=f"route-{key}-") as tmp:
            finding = run_route(key, Path(tmp) / "try")
            is_live = live(key, Path(tmp) / "live")
        opened += finding.open
        mark = "-" if is_live is None else ("yes" if is_live else "NO")
        state = "OPEN" if finding.open else "closed"
        print(f"{finding.route:<36} {state:<7} {mark:<5} {finding.detail[:90]}")
    print(f"open: {opened} of {len(ROUTES)} (routes 9 and 10 are the runtimes track's)")
    return opened


def confinement(jobs: int) -> None:
    from accel.sandbox import availability, landlock

    print("\n== the box ==")
    abi = landlock.abi_version()
    print(f"Landlock ABI {abi}; {availability() or 'files, TCP and sockets all confined'}")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(ROOT / "tests/security/test_confinement.py")],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
    )  # fmt: skip
    print(f"confinement tests: {proc.stdout.strip().splitlines()[-1]}")
    boxed, bare = _job_starts(jobs)
    print(
        f"warm-worker job (inspect zoo:mlp, no graph), median of {jobs}, round-robin: "
        f"boxed {statistics.median(boxed) * 1e3:.0f} ms, unconfined "
        f"{statistics.median(bare) * 1e3:.0f} ms, added "
        f"{(statistics.median(boxed) - statistics.median(bare)) * 1e3:+.0f} ms"
    )


def _job_starts(jobs: int) -> tuple[list[float], list[float]]:
    """Wall time of the same light job on two warm workers, one boxed, one not (the
    ``ACCEL_STUDIO_UNCONFINED`` setting), alternating."""
    from studio.workers.pool import WorkerPool

    pools = {
        "boxed": WorkerPool(None, cpu_workers=1, devices=[], warm=True),
        "bare": WorkerPool(
            None, cpu_workers=1, devices=[], warm=True, env={"ACCEL_STUDIO_UNCONFINED": "1"}
        ),
    }
    times: dict[str, list[float]] = {"boxed": [], "bare": []}
    params = {"model": "zoo:mlp", "graph": False}
    try:
        for pool in pools.values():  # warm both up (imports, first job)
            pool.submit("inspect", params, device="cpu").wait(300)
        for _ in range(jobs):
            for name, pool in pools.items():
                t0 = time.perf_counter()
                out = pool.submit("inspect", params, device="cpu").wait(300)
                times[name].append(time.perf_counter() - t0)
                assert out.ok, out.error
    finally:
        for pool in pools.values():
            pool.shutdown()
    return times["boxed"], times["bare"]


def fuzz(total: int) -> None:
    print("\n== fuzzing (tests/security/test_fuzz_*.py) ==")
    files = [
        ROOT / "tests/security/test_fuzz_recipe.py",
        ROOT / "tests/security/test_fuzz_input_spec.py",
    ]
    per_test = max(1, -(-total // 6))  # six property tests share the total
    env = {**os.environ, "ACCEL_FUZZ_EXAMPLES": str(per_test)}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--hypothesis-show-statistics", *map(str, files)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=7200,
    )  # fmt: skip
    passing = sum(int(n) for n in re.findall(r"(\d+) passing", proc.stdout))
    failing = sum(int(n) for n in re.findall(r"(\d+) failing", proc.stdout))
    hangs = proc.stdout.count("DeadlineExceeded")
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-200:]
    print(
        f"{passing} cases passed, {failing} failing (tracebacks), {hangs} hangs, "
        f"{time.perf_counter() - t0:.0f} s; pytest: {last}"
    )


_MEASURE = """
import sys
from accel.models.inputs import InputSpec
InputSpec.parse("x:float32[2]{0..1}; y:bool[2]").sample()  # imports, first-use allocations
spec = InputSpec.parse(sys.argv[1])
def field(name):
    return int(open("/proc/self/status").read().split(name + ":")[1].split()[0]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # restart the peak (VmHWM) here
base = field("VmRSS")
inputs = spec.sample()
print(spec.peak_bytes(), spec.nbytes(), field("VmHWM") - base)
"""


def memory(elements: int) -> None:
    print("\n== input memory: a fresh process's peak while sampling, over the size check ==")
    print(
        f"{'dtype':<10} {'ranged':<7} {'inputs':>9} {'checked':>9} {'peak':>9} {'peak/check':>10}"
    )
    worst = 0.0
    for dtype in DTYPES:
        for ranged in (False, True):
            if ranged and dtype == "bool":
                continue
            rng = "{0..1}" if ranged else ""
            spec = f"x:{dtype}[{elements // 1000},1000]{rng}"
            out = subprocess.run(
                [sys.executable, "-c", _MEASURE, spec], capture_output=True, text=True,
                cwd=ROOT, timeout=600,
            )  # fmt: skip
            checked, size, peak = (int(v) for v in out.stdout.split()[-3:])
            ratio = peak / checked
            worst = max(worst, ratio)
            print(
                f"{dtype:<10} {str(ranged):<7} {size / 2**20:>7.0f}Mi {checked / 2**20:>7.0f}Mi "
                f"{peak / 2**20:>7.0f}Mi {ratio:>10.2f}"
            )
    print(f"worst peak/check: {worst:.2f} (target <= 1.2)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fuzz-total", type=int, default=10_000, help="fuzz cases in all")
    ap.add_argument("--jobs", type=int, default=10, help="timed jobs per side (box cost)")
    ap.add_argument("--elements", type=int, default=50_000_000, help="input size (memory)")
    ap.add_argument("--quick", action="store_true", help="small fuzz and memory runs")
    args = ap.parse_args()
    if args.quick:
        args.fuzz_total, args.jobs, args.elements = 600, 4, 5_000_000
    opened = routes()
    confinement(args.jobs)
    fuzz(args.fuzz_total)
    memory(args.elements)
    return 1 if opened else 0


if __name__ == "__main__":
    sys.exit(main())
