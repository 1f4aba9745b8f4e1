"""Torch quantization passes vs eager fp32 on this CPU: speedup, parity and weight size.

For each model (default zoo:mlp, zoo:transformer, zoo:resnet at their own input specs), in one
run: eager fp32, then every torch quantization pass as the studio applies it
(quantize_dynamic_int8 with the eager and the torchao backend, quantize_weight_only int8
and int4, quantize_static_int8 (PT2E, run as the converted graph in eager mode, and with
--compile also through torch.compile/inductor, where its q/dq patterns become int8
kernels) and the qat scheme's inference format (steps=0). Variants alternate for
``--rounds`` rounds; each speedup is the median of per-round ratios (fp32 p50 / variant
p50, > 1 = faster), so machine drift cancels. Parity: max abs error and cosine vs fp32
on the benchmark inputs; size: serialized weights relative to fp32.

Run: .venv/bin/python bench/bench_quantization.py [--iters 20] [--rounds 3] [--threads 2] [--compile]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import warnings

MODELS = ["zoo:mlp", "zoo:transformer", "zoo:resnet"]
VARIANTS = [
    ("dynamic eager", "quantize_dynamic_int8", {"backend": "eager"}),
    ("dynamic torchao", "quantize_dynamic_int8", {"backend": "torchao"}),
    ("weight-only int8", "quantize_weight_only", {"bits": 8}),
    ("weight-only int4", "quantize_weight_only", {"bits": 4, "group_size": 32}),
    ("static int8 (pt2e)", "quantize_static_int8", {"calibration_batches": 4}),
    ("qat fmt (int8a/int4w)", "qat", {"steps": 0}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument(
        "--compile", action="store_true", help="also time the static int8 graph under torch.compile"
    )
    ap.add_argument("--json", help="write the numbers as JSON")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    import torch
    import torch.nn.functional as F

    from accel.errors import AccelError
    from accel.models import load_model
    from accel.passes import PassContext, get_pass
    from accel.timing.single import benchmark

    torch.set_num_threads(args.threads)
    print(
        f"cpu, {args.threads} thread(s), {args.iters} iters x {args.rounds} rounds, torch {torch.__version__}"
    )
    results = []
    for source in args.models:
        base = load_model(source)
        inputs = base.input_spec.sample(seed=0)
        ref = base.forward(inputs).float()
        models = {"fp32": base}
        info = {}
        for label, name, params in VARIANTS:
            cls = get_pass(name)
            ctx = PassContext(inputs=inputs, original=base)
            try:
                q = cls().apply(
                    base.replace(module=copy.deepcopy(base.module)), cls.parse_config(params), ctx
                )
            except AccelError as exc:
                info[label] = {"error": str(exc)}
                continue
            models[label] = q
            out = q.forward(inputs).float()
            info[label] = {
                "max_abs": float((out - ref).abs().max()),
                "cosine": float(F.cosine_similarity(out.flatten(), ref.flatten(), dim=0)),
                "size_ratio": q.size_bytes / base.size_bytes,
                "backend": ctx.details.get("backend"),
            }
            if args.compile and name == "quantize_static_int8":
                compiled = torch.compile(q.module)
                with torch.no_grad():
                    compiled(*inputs.values())
                models["static int8 + inductor"] = compiled
                out = compiled(*inputs.values()).float()
                info["static int8 + inductor"] = {
                    "max_abs": float((out - ref).abs().max()),
                    "cosine": float(F.cosine_similarity(out.flatten(), ref.flatten(), dim=0)),
                    "size_ratio": info[label]["size_ratio"],
                    "backend": "pt2e-x86 + inductor",
                }
        ratios: dict[str, list[float]] = {k: [] for k in models}
        p50: dict[str, list[float]] = {k: [] for k in models}
        for _ in range(args.rounds):
            times = {}
            for label, m in models.items():
                r = benchmark(m, inputs, warmup=args.warmup, iters=args.iters, threads=args.threads)
                times[label] = r.median_ms
                p50[label].append(r.median_ms)
            for label in models:
                ratios[label].append(times["fp32"] / times[label])
        print(f"\n{source}  inputs {base.input_spec}")
        print(
            f"{'variant':<24} {'p50 ms':>9} {'speedup':>8} {'max_abs':>9} {'cosine':>9} {'size':>6}  backend"
        )
        for label in ["fp32", *[v[0] for v in VARIANTS], "static int8 + inductor"]:
            if label in info and "error" in info[label]:
                print(f"{label:<24} error: {info[label]['error'][:90]}")
                continue
            if label not in models:
                continue
            d = info.get(
                label, {"max_abs": 0.0, "cosine": 1.0, "size_ratio": 1.0, "backend": "eager fp32"}
            )
            row = {
                "model": source,
                "variant": label,
                "p50_ms": statistics.median(p50[label]),
                "speedup": statistics.median(ratios[label]),
                **d,
            }
            results.append(row)
            print(
                f"{label:<24} {row['p50_ms']:>9.2f} {row['speedup']:>7.2f}x {row['max_abs']:>9.2g} "
                f"{row['cosine']:>9.6f} {row['size_ratio']:>6.2f}  {row['backend']}"
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
