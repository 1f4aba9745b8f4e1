"""OpenVINO precision hints against eager torch, interleaved in one process: f32, bf16 and what
``precision: auto`` picks on this CPU (accel.hardware), with parity against the original.

The measurement behind the openvino pass's default: on a CPU with bf16 matrix kernels
(AMX, AVX-512 BF16) bf16 should beat f32 by a wide margin, which makes f32 the wrong default
there. Usage:

    .venv/bin/python bench/bench_openvino_precision.py [--models hf:bert_base_padded hf:resnet50]
        [--size small|real] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accel.hardware import cpu_features  # noqa: E402
from accel.models import load_model  # noqa: E402
from accel.models.corpus import CORPUS  # noqa: E402


def measure(name: str, size: str, threads: int, work: Path) -> list[str]:
    import torch

    from accel.parity import Tolerances, compare, normalize_outputs
    from accel.passes import PassContext, get_pass
    from accel.timing import compare_interleaved

    entry = CORPUS[name]
    model = load_model(name, entry.input_spec if size == "real" else entry.small_spec)
    inputs = model.example_inputs()
    with torch.no_grad():
        reference = normalize_outputs(model.forward(inputs))
    timing = {"rounds": 5, "iters": 8, "warmup": 2, "min_time_s": 0, "threads": threads}
    rows = []
    cls = get_pass("openvino")
    for precision in ("f32", "bf16", "auto"):
        ctx = PassContext(inputs=inputs, work_dir=work / f"{name}-{precision}", original=model)
        new = cls().apply(model, cls.parse_config({"precision": precision}), ctx)
        report = compare(reference, normalize_outputs(new.forward(inputs)), Tolerances())
        cmp = compare_interleaved(model, new, inputs, timing)
        s = cmp.speedup
        rows.append(
            f"| {name} | {precision} | {ctx.details['precision_ran']} | {s.value:.2f}x "
            f"[{s.low:.2f}-{s.high:.2f}] | {report.worst()['min_cosine']:.5f} |"
        )
        print(rows[-1], flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["hf:bert_base_padded", "hf:resnet50"])
    ap.add_argument("--size", choices=("real", "small"), default="real")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print(f"# OpenVINO precision on {cpu_features().summary()}, {args.threads} thread(s)")
    print("| model | precision asked | ran | speedup over eager [95% CI] | min cosine |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for name in args.models:
            measure(name, args.size, args.threads, Path(d))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
