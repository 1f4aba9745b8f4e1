"""Runtimes side by side: eager torch vs the studio's best ONNX Runtime artifact vs OpenVINO
f32 / bf16 / NNCF int8 (the studio's openvino and quantize_openvino steps), plus a
hand-written OpenVINO script with the same hints next to each studio OpenVINO step.

Models: a BERT-base-sized encoder (the zoo transformer's code at 12 layers, hidden 768,
12 heads, ffn 3072, seq 128) and a ResNet-50-sized CNN (transformers' ResNet with its
default ResNet-50 config, 1000 classes, 1x3x224x224). Every variant is built first
through the runner (parity checked there), then all are timed round-robin in this one
process with the same inputs and thread count, so load changes on the machine hit them
alike; speedups are over eager fp32, as medians of per-round ratios.

Usage:
    .venv/bin/python bench/bench_backends.py [--models bert,resnet50] [--threads 1]
        [--rounds 5] [--iters 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))


def resnet50():
    """ResNet-50 (transformers' ResNet, default config = ResNet-50) returning logits."""
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = ResNetForImageClassification(ResNetConfig(num_labels=1000))

        def forward(self, x):
            return self.net(pixel_values=x).logits

    return Logits().eval()


MODELS = {
    "bert": {
        "source": "zoo:transformer(hidden=768, num_layers=12, num_heads=12, ffn=3072, "
        "vocab_size=30522)",
        "spec": "input_ids:int64[batch,seq]{0..30522}; batch=1..64:1; seq=1..512:128",
        # ONNX Runtime's best on this encoder: dynamic int8 (activations quantized at run time)
        "ort": {"pass": "quantize_onnx_dynamic", "label": "ORT int8 dynamic"},
    },
    "resnet50": {
        "source": f"{Path(__file__).resolve()}:resnet50",
        "spec": "x:float32[batch,3,224,224]; batch=1..64:1",
        "ort": {"pass": "quantize_onnx_static", "label": "ORT int8 static"},
    },
}


def _run(source: str, spec: str, steps: list[dict], out: Path, threads: int):
    from accel.runner import run_recipe

    recipe = {
        "name": out.name,
        "model": {"source": source, "input_spec": spec},
        "steps": steps,
        "benchmark": {"warmup": 0, "iters": 1, "threads": threads},
        "gates": {"rtol": 1.0, "atol": 1.0, "min_cosine": 0.98},
    }
    t0 = time.perf_counter()
    # The bench names the model itself (its own resnet50 factory above): the caller's source.
    res = run_recipe(recipe, out_dir=out, model_source=source)
    if not res.ok:
        raise SystemExit(f"{out.name}: {res.error}")
    print(f"  built {out.name} in {time.perf_counter() - t0:.0f} s", flush=True)
    return res


def hand_written_ov(module, inputs: dict, precision: str, threads: int):
    """What an engineer writes by hand: convert, compile with the hints, infer."""
    import openvino as ov
    import torch

    with torch.no_grad():
        ov_model = ov.convert_model(module, example_input=tuple(inputs.values()))
    compiled = ov.Core().compile_model(
        ov_model,
        "CPU",
        {
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": precision,
            "INFERENCE_NUM_THREADS": threads,
        },
    )
    request = compiled.create_infer_request()
    feed = [x.numpy() for x in inputs.values()]
    return lambda *_: request.infer(feed)


def _parity(ref, out) -> dict:
    import torch

    ref = ref[0] if isinstance(ref, tuple | list) else ref
    out = out[0] if isinstance(out, tuple | list) else out
    a, b = ref.double().flatten(), out.double().flatten()
    return {
        "cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=0)),
        "top1": float((ref.argmax(-1) == out.argmax(-1)).float().mean()),
    }


def bench_model(name: str, root: Path, args: argparse.Namespace) -> list[dict]:
    from accel.models import load_model
    from accel.timing.single import benchmark

    cfg = MODELS[name]
    source, spec, threads = cfg["source"], cfg["spec"], args.threads
    print(f"== {name}", flush=True)
    original = load_model(source, spec)
    inputs = original.input_spec.sample(seed=0)
    variants: dict[str, object] = {"eager fp32": original}
    models: dict[str, object] = {}

    exported = _run(source, spec, [{"pass": "export_onnx"}], root / f"{name}_onnx", threads)
    onnx_path = str(exported.model.onnx_path)
    ort = _run(onnx_path, spec, [{"pass": cfg["ort"]["pass"]}], root / f"{name}_ort", threads)
    variants[cfg["ort"]["label"]] = ort.model
    for precision in ("f32", "bf16"):
        res = _run(
            source,
            spec,
            [{"pass": "openvino", "params": {"precision": precision}}],
            root / f"{name}_ov_{precision}",
            threads,
        )
        variants[f"OpenVINO {precision} (studio)"] = res.model
        variants[f"OpenVINO {precision} (by hand)"] = hand_written_ov(
            original.module, inputs, precision, threads
        )
        models[precision] = res
    int8 = _run(
        source,
        spec,
        [
            {"pass": "openvino", "params": {"precision": "bf16"}},
            {"pass": "quantize_openvino", "params": {"samples": args.samples}},
        ],
        root / f"{name}_ov_int8",
        threads,
    )
    variants["OpenVINO bf16 + NNCF int8 (studio)"] = int8.model

    # Parity against eager fp32 on 64 samples (8 batches of 8), outside the timing.
    parity: dict[str, dict] = {}
    checks = [original.input_spec.sample(seed=100 + i, dims={"batch": 8}) for i in range(8)]
    import torch

    refs = [original.forward(x) for x in checks]
    for label, m in variants.items():
        if not hasattr(m, "forward") or label == "eager fp32":
            continue
        outs = [m.forward(x) for x in checks]
        ref = torch.cat([r if isinstance(r, torch.Tensor) else r[0] for r in refs])
        out = torch.cat([o if isinstance(o, torch.Tensor) else o[0] for o in outs])
        parity[label] = _parity(ref, out)

    # Round-robin timing: every variant once per round; ratios per round, then medians.
    per_round: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(args.rounds):
        for label, m in variants.items():
            res = benchmark(m, inputs, warmup=1, iters=args.iters, threads=threads)
            per_round[label].append(res.median_ms)
        print(f"  round {r + 1}/{args.rounds}", flush=True)
    rows = []
    for label, ms in per_round.items():
        ratios = [e / v for e, v in zip(per_round["eager fp32"], ms)]
        rows.append(
            {
                "model": name,
                "variant": label,
                "p50_ms": statistics.median(ms),
                "speedup": statistics.median(ratios),
                "speedup_min": min(ratios),
                "speedup_max": max(ratios),
                **parity.get(label, {}),
            }
        )
    for precision in ("f32", "bf16"):
        studio = per_round[f"OpenVINO {precision} (studio)"]
        hand = per_round[f"OpenVINO {precision} (by hand)"]
        ratio = statistics.median([s / h for s, h in zip(studio, hand)])
        rows.append(
            {
                "model": name,
                "variant": f"studio / hand-written OpenVINO {precision} latency",
                "ratio": ratio,
                "precision_ran": models[precision].steps[-1].details.get("precision_ran"),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert,resnet50")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--samples", type=int, default=16, help="NNCF calibration batches")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import openvino as ov
    import torch

    from accel.timing.environment import environment_info

    env = environment_info("cpu")
    print(f"CPU: {env['cpu']}; torch {torch.__version__}; OpenVINO {ov.__version__}")
    print(f"threads {args.threads}, {args.rounds} rounds x {args.iters} iterations")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            new = bench_model(name.strip(), Path(tmp), args)
            _print_rows(new)  # each model's table as soon as it is measured
            rows += new
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "rows": rows}, indent=2))


def _print_rows(rows: list[dict]) -> None:
    print()
    print(f"{'model':<9} {'variant':<38} {'p50 ms':>9} {'speedup':>16} {'cosine':>8} {'top1':>6}")
    for r in rows:
        if "ratio" in r:
            print(f"{r['model']:<9} {r['variant']:<52} {r['ratio']:.3f} (ran {r['precision_ran']})")
            continue
        spread = f"{r['speedup']:.2f}x [{r['speedup_min']:.2f}-{r['speedup_max']:.2f}]"
        cos = f"{r['cosine']:.4f}" if "cosine" in r else ""
        top1 = f"{r['top1']:.2f}" if "top1" in r else ""
        print(
            f"{r['model']:<9} {r['variant']:<38} {r['p50_ms']:>9.2f} {spread:>16} {cos:>8} {top1:>6}"
        )


if __name__ == "__main__":
    main()
