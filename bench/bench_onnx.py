"""ONNX Runtime vs eager PyTorch on the zoo models, through the studio's own passes.

For each model, in one run: eager torch latency, then the model after export_onnx
(TorchScript exporter) run by ORT with graph optimizations disabled and with all
optimizations (the onnxruntime pass), and after onnx_fp16 (on CPU: the default block
list). Every variant runs with the same thread count on the same inputs; variants
alternate for ``--rounds`` rounds and each ratio is the median of per-round ratios
(eager p50 / variant p50, > 1 means faster than eager), so machine drift cancels.

Run: .venv/bin/python bench/bench_onnx.py [--iters 30] [--threads 1] [--rounds 3] [--batch 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

MODELS = ["zoo:mlp", "zoo:resnet", "zoo:transformer", "zoo:lstm"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch and ORT intra-op threads")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=None, help="batch size (default: the spec's)")
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--json", help="write the numbers as JSON")
    args = ap.parse_args()

    import torch

    from accel.models import load_model
    from accel.passes import PassContext, get_pass
    from accel.timing.single import benchmark

    torch.set_num_threads(args.threads)
    variants = ["eager", "ort_noopt", "ort_all", "ort_fp16"]
    print(f"cpu, {args.threads} thread(s), {args.iters} iters x {args.rounds} rounds")
    print(
        f"{'model':<16} " + " ".join(f"{v + ' ms':>12}" for v in variants) + "   speedup vs eager"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for source in args.models:
            eager = load_model(source)
            dims = (
                {"batch": args.batch} if args.batch and "batch" in eager.input_spec.dims else None
            )
            inputs = eager.input_spec.sample(seed=0, dims=dims)

            def step(name, model, params, sub, inputs=inputs, folder=Path(tmp) / source[4:]):
                cls = get_pass(name)
                ctx = PassContext(inputs=inputs, work_dir=folder / sub)
                return cls().apply(model, cls.parse_config(params), ctx)

            threads = {"intra_op_threads": args.threads}
            exported = step("export_onnx", eager, {"exporter": "torchscript"}, "export")
            models = {
                "eager": eager,
                "ort_noopt": step(
                    "onnxruntime",
                    exported,
                    {"graph_optimization_level": "disabled", **threads},
                    "noopt",
                ),
                "ort_all": step(
                    "onnxruntime", exported, {"graph_optimization_level": "all", **threads}, "all"
                ),
            }
            models["ort_fp16"] = step("onnx_fp16", models["ort_all"], {}, "fp16")
            times: dict[str, list[float]] = {v: [] for v in variants}
            for _ in range(args.rounds):
                for v in variants:
                    r = benchmark(
                        models[v],
                        inputs,
                        warmup=args.warmup,
                        iters=args.iters,
                        threads=args.threads,
                    )
                    times[v].append(r.median_ms)
            p50 = {v: statistics.median(t) for v, t in times.items()}
            ratio = {
                v: statistics.median(e / x for e, x in zip(times["eager"], times[v]))
                for v in variants[1:]
            }
            print(
                f"{source:<16} "
                + " ".join(f"{p50[v]:>12.3f}" for v in variants)
                + "   "
                + "  ".join(f"{v}={ratio[v]:.2f}x" for v in variants[1:])
            )
            rows.append({"model": source, "p50_ms": p50, "speedup": ratio, "threads": args.threads})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
