"""A one-shot GPU check: everything the studio does on an NVIDIA GPU, in one run of under
8 minutes, with one report (issue 32).

Every CUDA path of the studio is written against documentation; this runs them on a real
GPU so that whoever is lent one for a few minutes can run it once and read the result:

1. the environment: the GPU, the driver, torch's CUDA build, which runtimes import and
   which ONNX Runtime execution providers exist;
2. install (unless ``--no-install``): the ``[tensorrt]`` extra, onnxruntime-gpu and a CUDA
   build of the installed torch version, with pip (``--wheels DIR``: offline, from a folder);
3. every ``gpu``-marked test (pytest), passed / failed / skipped with the reason;
4. a short bench on zoo:resnet and a BERT-base-sized encoder through the studio's own runner
   on cuda:0: fp16, bf16, torch.compile, CUDA graphs, ONNX Runtime's CUDA and TensorRT
   execution providers and the TensorRT pass, each timed against eager fp32 in alternating
   rounds (speedup with its interval), or the reason it could not run;
5. the per-layer CUDA profile of zoo:resnet: the rows' sum against the headline latency;
6. the worker pool's GPU lane: a job submitted for ``cuda`` runs in a worker that sees one GPU.

The report goes to ``--out`` (gpu_check.md and gpu_check.json) and to the terminal.

    make gpu-check                             # on a machine with one NVIDIA GPU
    .venv/bin/python bench/gpu_check.py --dry-run   # what it would run (CI runs this)

Without a GPU it says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))

TOTAL_S = 8 * 60  # the whole check, install included
TESTS_S = 180
BERT = "zoo:transformer(hidden=768, num_layers=12, num_heads=12, ffn=3072, vocab_size=30522)"
MODELS = {
    "zoo:resnet": {"source": "zoo:resnet", "spec": None, "dims": {"batch": 8}},
    "bert-base": {
        "source": BERT,
        "spec": "input_ids:int64[batch,seq]{0..30522}; batch=1..64:1; seq=1..512:128",
        "dims": {"batch": 8, "seq": 128},
    },
}
# Each variant is its own recipe (a failing one does not stop the others); the speedup is
# the last step's, against eager fp32 on the GPU.
LOOSE = {"rtol": 0.1, "atol": 0.1, "min_cosine": 0.99}
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "fp16": [{"pass": "fp16", "gates": LOOSE}],
    "bf16": [{"pass": "bf16", "gates": LOOSE}],
    "torch.compile": [{"pass": "compile", "params": {"backend": "inductor"}}],
    "CUDA graphs": [{"pass": "cuda_graphs"}],
    "ORT CUDA EP": [
        {"pass": "export_onnx"},
        {"pass": "onnxruntime", "params": {"providers": ["cuda"], "io_binding": True}},
    ],
    "ORT TensorRT EP": [
        {"pass": "export_onnx"},
        {"pass": "onnxruntime", "params": {"providers": ["tensorrt", "cuda"]}, "gates": LOOSE},
    ],
    "TensorRT fp16": [{"pass": "tensorrt", "params": {"precision": "fp16"}, "gates": LOOSE}],
    # The first check on an H200 found fp16 and bf16 at 0.68x on zoo:resnet: BatchNorm kept
    # in float32 costs a cast around every conv. Folded, in NHWC, with and without graphs:
    "fold+NHWC+fp16": [
        {"pass": "fold_batchnorm"},
        {"pass": "channels_last"},
        {"pass": "fp16", "gates": LOOSE},
    ],
    "fold+NHWC+fp16+graphs": [
        {"pass": "fold_batchnorm"},
        {"pass": "channels_last"},
        {"pass": "fp16", "gates": LOOSE},
        {"pass": "cuda_graphs", "gates": LOOSE},
    ],
}
# Variants that only apply to some models (BatchNorm to fold, 4-d inputs for NHWC).
ONLY = {"fold+NHWC+fp16": {"zoo:resnet"}, "fold+NHWC+fp16+graphs": {"zoo:resnet"}}
GPU_TEST_FILES = [
    "tests/accel/test_profile.py",
    "tests/accel/test_passes_torch.py",
    "tests/accel/test_codegen_torch.py",
    "tests/accel/test_prune.py",
    "tests/accel/test_passes_onnx.py",
    "tests/accel/test_tensorrt.py",
]


@dataclass
class Report:
    started: float = field(default_factory=time.time)
    environment: dict[str, Any] = field(default_factory=dict)
    install: list[str] = field(default_factory=list)
    tests: list[dict[str, str]] = field(default_factory=list)
    bench: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)
    pool: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())


def nvidia_gpus() -> list[str]:
    """GPU names from nvidia-smi (empty when there is none or no driver)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.startswith("GPU ")]


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"gpus": nvidia_gpus(), "python": sys.version.split()[0]}
    import torch

    env["torch"] = torch.__version__
    env["torch_cuda"] = torch.version.cuda
    env["cuda_available"] = torch.cuda.is_available()
    if env["cuda_available"]:
        env["device_name"] = torch.cuda.get_device_name(0)
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    for lib in ("onnxruntime", "tensorrt", "torch_tensorrt", "torchao", "openvino", "triton"):
        try:
            mod = __import__(lib)
            env[lib] = getattr(mod, "__version__", "installed")
        except Exception as exc:  # noqa: BLE001 - what is missing is the finding
            env[lib] = f"not available ({type(exc).__name__}: {str(exc)[:80]})"
    with contextlib.suppress(Exception):
        import onnxruntime as ort

        env["ort_providers"] = ort.get_available_providers()
    return env


def install(wheels: str | None, report: Report, deadline: Deadline) -> None:
    """The [tensorrt] extra, onnxruntime-gpu and a CUDA build of torch, with pip."""
    import torch

    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    if wheels:
        pip += ["--no-index", "--find-links", wheels]
    steps = [["onnxruntime-gpu"], ["-e", f"{ROOT}[tensorrt]"]]
    if torch.version.cuda is None:  # a CPU build: the same version's CUDA build
        steps.insert(0, [f"torch=={torch.__version__.split('+')[0]}", "--force-reinstall"])
    for args in steps:
        if deadline.left() < 240:
            report.install.append(f"skipped {' '.join(args)}: not enough time left")
            continue
        try:
            r = subprocess.run(
                [*pip, *args], capture_output=True, text=True, timeout=deadline.left() - 200
            )
            ok = r.returncode == 0
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] if not ok else []
            report.install.append(f"{' '.join(args)}: {'ok' if ok else 'failed'} {tail}")
        except subprocess.TimeoutExpired:
            report.install.append(f"{' '.join(args)}: timed out")


def run_tests(report: Report, out: Path, timeout_s: float) -> None:
    xml = out / "gpu_tests.xml"
    files = [f for f in GPU_TEST_FILES if (ROOT / f).exists()]
    cmd = [
        sys.executable, "-m", "pytest", *files, "-m", "gpu", "-q", "-p", "no:cacheprovider",
        "-o", "addopts=", "--timeout", "150", f"--junitxml={xml}",
    ]  # fmt: skip
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        report.environment["pytest_tail"] = r.stdout.strip().splitlines()[-3:]
    except subprocess.TimeoutExpired:
        report.errors.append(f"the gpu tests ran past {timeout_s:.0f} s")
    if not xml.exists():
        report.errors.append("pytest wrote no report")
        return
    for case in ET.parse(xml).getroot().iter("testcase"):
        status, why = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                status = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                why = (el.get("message") or "").splitlines()[0][:160] if el.get("message") else ""
        report.tests.append({"test": f"{case.get('classname')}::{case.get('name')}",
                             "status": status, "why": why})  # fmt: skip


DEVICE = "cuda:0"  # --device cpu exercises the script's own logic on a machine without one


def recipe_for(model: dict[str, Any], steps: list[dict[str, Any]], rounds: int) -> dict:
    return {
        "name": "gpu-check",
        "model": {"source": model["source"], "input_spec": model["spec"]},
        "device": DEVICE,
        "benchmark": {
            "warmup": 3,
            "iters": 2 * rounds,
            "rounds": rounds,
            "min_time_s": 0.3,
            "dims": model["dims"],
        },  # fmt: skip
        "gates": {"rtol": 0.01, "atol": 0.01, "min_cosine": 0.999},
        "on_gate_fail": "warn",
        "steps": steps,
    }


def _speedup(step: Any) -> tuple[float | None, float | None, float | None, float | None]:
    """(speedup, low, high, p50 ms) of a runner StepResult (its StepTiming)."""
    t = getattr(step, "timing", None)
    if t is None:
        return None, None, None, None
    return t.speedup, t.speedup_low, t.speedup_high, t.p50_step_ms


def bench_variant(name: str, label: str, steps: list[dict], rounds: int, work: Path) -> dict:
    from accel.runner import run_recipe

    model = MODELS[name]
    row: dict[str, Any] = {"model": name, "variant": label}
    t0 = time.monotonic()
    try:
        res = run_recipe(
            recipe_for(model, steps, rounds), out_dir=work / f"{name}-{label}".replace(" ", "_")
        )
    except Exception as exc:  # noqa: BLE001 - the row says why
        row.update(status="error", why=f"{type(exc).__name__}: {exc}"[:300])
        return row
    row["wall_s"] = round(time.monotonic() - t0, 1)
    if not res.steps or res.status != "succeeded":
        row.update(status=res.status, why=(res.error or "")[:300])
        return row
    last = res.steps[-1]
    speed, low, high, p50 = _speedup(last)
    row.update(status=last.status, speedup=speed, low=low, high=high, p50_ms=p50)
    if last.parity:
        worst = min((o.get("cosine", 1.0) for o in last.parity.get("outputs", [])), default=None)
        row["min_cosine"] = worst
    details = dict(getattr(last, "details", {}) or {})
    if details.get("provider"):  # which execution provider really ran it (no silent CPU)
        row["provider"] = details["provider"]
        if "CPU" in str(details["provider"]):
            row["status"] = f"ran on {details['provider']}, not the GPU"
    return row


def run_bench(report: Report, work: Path, deadline: Deadline, rounds: int) -> None:
    for name in MODELS:
        for label, steps in VARIANTS.items():
            if name not in ONLY.get(label, {name}):
                continue
            if deadline.left() < 45:
                report.bench.append({"model": name, "variant": label, "status": "skipped",
                                     "why": "out of time"})  # fmt: skip
                continue
            row = bench_variant(name, label, steps, rounds, work)
            report.bench.append(row)
            print(f"  {name:10s} {label:16s} {_row_text(row)}", flush=True)


def run_profile(report: Report) -> None:
    from accel.models import load_model
    from accel.profile.api import profile_model

    model = load_model("zoo:resnet")
    prof = profile_model(model, model.example_inputs(batch=8), iters=20, warmup=5,
                         device=DEVICE)  # fmt: skip
    rows = sum(r.self_ms for r in prof.rows if not r.name.startswith("("))
    report.profile = {
        "timing": prof.timing,
        "headline_ms": prof.total_ms,
        "rows_sum_ms": rows,
        "coverage": prof.coverage,
        "overhead_ratio": prof.overhead_ratio,
        "top": [
            (r.name, round(r.self_ms, 4)) for r in sorted(prof.rows, key=lambda r: -r.self_ms)[:5]
        ],  # fmt: skip
    }


def run_pool(report: Report) -> None:
    from studio.workers.devices import detect_gpus
    from studio.workers.pool import WorkerPool

    gpus = detect_gpus()
    report.pool["detected"] = [str(g) for g in gpus]
    with WorkerPool(None, cpu_workers=1) as pool:
        report.pool["lanes"] = [lane.name for lane in pool.lanes]
        params = {"model": "zoo:mlp", "device": "cuda", "benchmark": True, "layers": False}
        out = pool.submit("profile", params, device="cuda").wait(180)
        report.pool["job"] = {"status": out.status, "error": out.error[:200]}
        bench = out.result.get("benchmark") or {}
        report.pool["device"] = bench.get("device")
        report.pool["p50_ms"] = bench.get("median_ms") or bench.get("p50_ms")


def _row_text(row: dict[str, Any]) -> str:
    if row.get("speedup") is None:
        return f"{row.get('status')}: {row.get('why', '')}"
    iv = "" if row.get("low") is None else f" [{row['low']:.2f}-{row['high']:.2f}]"
    p50 = f"  p50 {row['p50_ms']:.3f} ms" if row.get("p50_ms") else ""
    cos = f"  cos {row['min_cosine']:.5f}" if row.get("min_cosine") is not None else ""
    return f"{row['speedup']:.2f}x{iv}{p50}{cos}  {row.get('status')}"


def markdown(report: Report) -> str:
    env = report.environment
    lines = [
        "# GPU check",
        "",
        f"GPU: {', '.join(env.get('gpus') or ['none'])}; torch {env.get('torch')} "
        f"(CUDA {env.get('torch_cuda')}); ORT providers: {env.get('ort_providers')}",
        f"TensorRT: {env.get('tensorrt')}; torch-tensorrt: {env.get('torch_tensorrt')}; "
        f"torchao: {env.get('torchao')}; wall {report.wall_s:.0f} s",
        "",
        "## Install",
        *[f"- {line}" for line in report.install or ["(skipped)"]],
        "",
        "## gpu tests",
        "| test | status | why |",
        "|---|---|---|",
        *[f"| {t['test']} | {t['status']} | {t['why']} |" for t in report.tests],
        "",
        "## Speedups over eager fp32 on the GPU (alternating rounds, 95% interval)",
        "| model | variant | result |",
        "|---|---|---|",
        *[f"| {r['model']} | {r['variant']} | {_row_text(r)} |" for r in report.bench],
        "",
        "## Per-layer CUDA profile of zoo:resnet",
        f"{json.dumps(report.profile)}",
        "",
        "## Worker pool GPU lane",
        f"{json.dumps(report.pool)}",
    ]
    if report.errors:
        lines += ["", "## Errors", *[f"- {e}" for e in report.errors]]
    return "\n".join(lines) + "\n"


def dry_run() -> int:
    """What the check would run; checks the script's own parts (CI runs this)."""
    from accel.plan import plan
    from accel.recipe import load_recipe

    missing = [f for f in GPU_TEST_FILES if not (ROOT / f).exists()]
    if missing:
        print(f"gpu test files missing: {missing}")
        return 1
    r = subprocess.run(
        [sys.executable, "-m", "pytest", *GPU_TEST_FILES, "-m", "gpu", "--collect-only", "-q",
         "-p", "no:cacheprovider", "-o", "addopts="],  # fmt: skip
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    tests = [ln for ln in r.stdout.splitlines() if "::" in ln]
    print(f"would run {len(tests)} gpu tests:")
    print("\n".join(f"  {t}" for t in tests))
    if not tests:
        print(r.stdout[-2000:], r.stderr[-2000:])
        return 1
    print("would bench on cuda:0:")
    for name, model in MODELS.items():
        for label, steps in VARIANTS.items():
            if name not in ONLY.get(label, {name}):
                continue
            recipe = load_recipe(recipe_for(model, steps, 4))
            p = plan(recipe, device="cuda:0")
            where = "plan ok" if p.ok else f"plan: {'; '.join(p.errors)}"
            print(f"  {name:10s} {label:16s} {'+'.join(s['pass'] for s in steps):40s} {where}")
    print("would profile zoo:resnet on cuda:0 and run a profile job on the pool's GPU lane")
    print(markdown(Report(environment={"gpus": []})).splitlines()[0], "(report format ok)")
    return 0


def main() -> int:
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="list what would run; run nothing")
    ap.add_argument("--no-install", action="store_true", help="use what is installed")
    ap.add_argument("--wheels", default=None, help="install offline from this folder")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"), help="report folder")
    ap.add_argument("--rounds", type=int, default=6, help="timing rounds per variant")
    ap.add_argument("--skip", default="", help="phases to skip: tests,bench,profile,pool")
    ap.add_argument("--device", default=DEVICE, help=argparse.SUPPRESS)  # cpu: script check
    ap.add_argument("--budget", type=float, default=TOTAL_S, help="seconds for the whole check")
    args = ap.parse_args()
    if args.dry_run:
        return dry_run()
    DEVICE = args.device
    if not nvidia_gpus() and DEVICE.startswith("cuda"):
        print("gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing to check")
        return 0
    deadline = Deadline(args.budget)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = Report()
    skip = set(filter(None, args.skip.split(",")))
    if not args.no_install:
        install(args.wheels, report, deadline)
    report.environment = environment()
    print(json.dumps(report.environment, indent=1), flush=True)
    phases = [
        ("tests", lambda: run_tests(report, out, min(TESTS_S, deadline.left() * 0.4))),
        ("profile", lambda: run_profile(report)),
        ("pool", lambda: run_pool(report)),
    ]
    with tempfile.TemporaryDirectory() as work:
        phases.append(("bench", lambda: run_bench(report, Path(work), deadline, args.rounds)))
        for name, phase in phases:
            if name in skip or deadline.left() < 20:
                continue
            print(f"== {name} ({deadline.left():.0f} s left)", flush=True)
            try:
                phase()
            except Exception:  # noqa: BLE001 - one broken phase must not hide the others
                report.errors.append(f"{name}: {traceback.format_exc()[-1200:]}")
    report.wall_s = time.time() - report.started
    text = markdown(report)
    (out / "gpu_check.md").write_text(text)
    (out / "gpu_check.json").write_text(json.dumps(asdict(report), indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("ACCEL_SAVE_STEP_MODELS", "0")
    sys.exit(main())
