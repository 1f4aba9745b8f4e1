"""ONNX Runtime int8 quantization and channel pruning on this CPU: speedup and parity.

For zoo:transformer and zoo:resnet, in this one process on the same inputs:
  - eager fp32 (torch) vs ONNX Runtime fp32 (export_onnx) vs ORT int8 dynamic / static
    (quantize_onnx_dynamic / quantize_onnx_static on the exported file): median latency,
    speedup over eager, and parity against the eager outputs (cosine, max abs, top-1);
  - prune_channels at 30% and 50% (eager): parameters, FLOPs and latency ratios.

Usage:
    .venv/bin/python bench/bench_onnx_quant_prune.py [--iters 50] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from accel.runner import run_recipe  # noqa: E402

MODELS = {
    "transformer": (
        "zoo:transformer",
        "input_ids:int64[batch,seq]{0..8000}; batch=1..32:1; seq=1..512:128",
    ),
    "resnet": ("zoo:resnet", "x:float32[batch,3,64,64]; batch=1..64:8"),
}


def _parity(reference: torch.Tensor, out: torch.Tensor) -> dict:
    a, b = reference.double().flatten(), out.double().flatten()
    return {
        "cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=0)),
        "max_abs": float((a - b).abs().max()),
        "top1": float((reference.argmax(-1) == out.argmax(-1)).float().mean()),
    }


def _run(source: str, spec: str, steps: list[dict], out: Path, args: argparse.Namespace):
    recipe = {
        "name": out.name,
        "model": {"source": source, "input_spec": spec},
        "steps": steps,
        "benchmark": {"warmup": args.warmup, "iters": args.iters, "threads": args.threads},
        "gates": {"min_cosine": 0.99},
    }
    res = run_recipe(recipe, out_dir=out)
    if not res.ok:
        raise SystemExit(f"{out.name}: {res.error}")
    return res


def _outputs(res, index: int = -1) -> torch.Tensor:
    step = res.steps[index]
    return torch.load(res.run_dir / f"step_{step.index:02d}_{step.pass_name}" / "outputs.pt")


def bench_model(name: str, root: Path, args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    source, spec = MODELS[name]
    exported = _run(source, spec, [{"pass": "export_onnx"}], root / f"{name}_export", args)
    reference = torch.load(exported.run_dir / "reference_outputs.pt")
    eager_ms = exported.baseline["latency_p50_ms"]
    onnx_path = next(a["path"] for a in exported.steps[0].artifacts if a["kind"] == "onnx")
    rows = [
        {
            "model": name,
            "variant": "eager fp32",
            "p50_ms": eager_ms,
            **_parity(reference, reference),
        },
        {
            "model": name,
            "variant": "ORT fp32",
            "p50_ms": exported.steps[0].metrics["latency_p50_ms"],
            **_parity(reference, _outputs(exported)),
        },
    ]
    for label, step in [
        ("ORT int8 dynamic", {"pass": "quantize_onnx_dynamic"}),
        ("ORT int8 static QDQ", {"pass": "quantize_onnx_static"}),
    ]:
        res = _run(onnx_path, spec, [step], root / f"{name}_{step['pass']}", args)
        s = res.steps[0]
        rows.append(
            {
                "model": name,
                "variant": label,
                "p50_ms": s.metrics["latency_p50_ms"],
                "size_mb": s.metrics["size_bytes_after"] / 1e6,
                **_parity(reference, _outputs(res)),
            }
        )
    for r in rows:
        r["speedup_vs_eager"] = eager_ms / r["p50_ms"]

    prune_rows = []
    for ratio in (0.3, 0.5):
        res = _run(
            source,
            spec,
            [{"pass": "prune_channels", "params": {"ratio": ratio}}],
            root / f"{name}_prune_{int(ratio * 100)}",
            args,
        )
        m = res.steps[0].metrics
        prune_rows.append(
            {
                "model": name,
                "ratio": ratio,
                "params_before": m["params_before"],
                "params_after": m["params_after"],
                "params_ratio": m["params_ratio"],
                "flops_before": m["flops_before"],
                "flops_after": m["flops_after"],
                "flops_ratio": m["flops_ratio"],
                "eager_ms": res.baseline["latency_p50_ms"],
                "pruned_ms": m["latency_p50_ms"],
                "latency_ratio": m["latency_p50_ms"] / res.baseline["latency_p50_ms"],
                "cosine_no_finetune": _parity(
                    torch.load(res.run_dir / "reference_outputs.pt"), _outputs(res)
                )["cosine"],
            }
        )
    return rows, prune_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch / ORT intra-op threads")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    quant, prune = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            q, p = bench_model(name, Path(tmp), args)
            quant += q
            prune += p

    print("\nONNX Runtime quantization (median latency; parity vs eager fp32 on the same inputs)")
    print(
        f"{'model':<12} {'variant':<20} {'p50 ms':>9} {'speedup':>8} {'cosine':>9} {'max abs':>9} {'top-1':>6}"
    )
    for r in quant:
        print(
            f"{r['model']:<12} {r['variant']:<20} {r['p50_ms']:>9.3f} {r['speedup_vs_eager']:>7.2f}x "
            f"{r['cosine']:>9.5f} {r['max_abs']:>9.2e} {r['top1']:>6.2f}"
        )
    print("\nprune_channels (eager, no fine-tuning)")
    print(
        f"{'model':<12} {'ratio':>5} {'params':>21} {'FLOPs (M)':>19} {'latency':>9} {'cosine':>8}"
    )
    for r in prune:
        print(
            f"{r['model']:<12} {r['ratio']:>5.0%} {r['params_before'] / 1e6:>8.3f}M->{r['params_after'] / 1e6:.3f}M "
            f"({r['params_ratio']:.2f}) {r['flops_before'] / 1e6:>7.1f}->{r['flops_after'] / 1e6:.1f} "
            f"({r['flops_ratio']:.2f}) {r['latency_ratio']:>8.2f}x {r['cosine_no_finetune']:>8.4f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"quantization": quant, "pruning": prune}, indent=2))


if __name__ == "__main__":
    main()
