"""ONNX Runtime int8 quantization and channel pruning on this CPU: speedup and parity.

For zoo:transformer and zoo:resnet, in this one process on the same inputs:
  - eager fp32 (torch) vs ONNX Runtime fp32 (export_onnx) vs ORT int8 dynamic / static
    (quantize_onnx_dynamic / quantize_onnx_static on the exported file): median latency,
    speedup over eager, and parity against the eager outputs (cosine, max abs, top-1);
  - prune_channels at 30% and 50% (eager): parameters, FLOPs and latency ratios.
Every variant is built first (through the runner, which also checks parity), then all are
timed round-robin in this process, so a busy machine slows them alike and ratios stay fair.

Usage:
    .venv/bin/python bench/bench_onnx_quant_prune.py [--rounds 10] [--iters 5] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from accel.models import load_model  # noqa: E402
from accel.runner import run_recipe  # noqa: E402

MODELS = {
    "transformer": (
        "zoo:transformer",
        "input_ids:int64[batch,seq]{0..8000}; batch=1..32:1; seq=1..512:128",
    ),
    "resnet": ("zoo:resnet", "x:float32[batch,3,64,64]; batch=1..64:8"),
}
# Mixed-precision fallback: the classifier head kept in float (`exclude` by module name).
HEADS = {"transformer": ["pooler", "classifier"], "resnet": ["fc"]}


def _parity(reference: torch.Tensor, out: torch.Tensor) -> dict:
    a, b = reference.double().flatten(), out.double().flatten()
    return {
        "cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=0)),
        "max_abs": float((a - b).abs().max()),
        "top1": float((reference.argmax(-1) == out.argmax(-1)).float().mean()),
    }


def _run(source: str, spec: str, steps: list[dict], out: Path):
    """Apply the steps with the runner (parity, metrics, artifacts); timing happens later."""
    recipe = {
        "name": out.name,
        "model": {"source": source, "input_spec": spec},
        "steps": steps,
        "benchmark": {"warmup": 0, "iters": 1},
        "gates": {"min_cosine": 0.99},
    }
    res = run_recipe(recipe, out_dir=out)
    if not res.ok:
        raise SystemExit(f"{out.name}: {res.error}")
    return res


def _outputs(res, index: int = -1) -> torch.Tensor:
    step = res.steps[index]
    return torch.load(res.run_dir / f"step_{step.index:02d}_{step.pass_name}" / "outputs.pt")


def _interleaved_p50(
    models: dict[str, object], inputs: dict, args: argparse.Namespace
) -> dict[str, float]:
    """Median latency per model, timed round-robin so load changes on the machine hit all alike."""
    from accel.timing.single import benchmark

    samples: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(args.rounds):
        for key, model in models.items():
            res = benchmark(
                model, inputs, warmup=args.warmup, iters=args.iters, threads=args.threads
            )
            samples[key] += list(res.samples_ms)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_model(name: str, root: Path, args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    source, spec = MODELS[name]
    exported = _run(source, spec, [{"pass": "export_onnx"}], root / f"{name}_export")
    reference = torch.load(exported.run_dir / "reference_outputs.pt")
    onnx_path = next(a["path"] for a in exported.steps[0].artifacts if a["kind"] == "onnx")
    original = load_model(source, spec)
    inputs = original.input_spec.sample(seed=0)
    ort_opts = {"intra_op_threads": args.threads} if args.threads else {}
    models = {"eager fp32": original, "ORT fp32": exported.model.replace(session_options=ort_opts)}
    rows = {
        "eager fp32": {"model": name, "variant": "eager fp32", **_parity(reference, reference)},
        "ORT fp32": {
            "model": name,
            "variant": "ORT fp32",
            **_parity(reference, _outputs(exported)),
        },
    }
    for label, step in [
        ("ORT int8 dynamic", {"pass": "quantize_onnx_dynamic"}),
        ("ORT int8 static QDQ", {"pass": "quantize_onnx_static"}),
        ("  + head in float", {"pass": "quantize_onnx_static", "params": {"exclude": HEADS[name]}}),
    ]:
        res = _run(onnx_path, spec, [step], root / f"{name}_{len(models)}_{step['pass']}")
        models[label] = res.model.replace(session_options=ort_opts)
        rows[label] = {
            "model": name,
            "variant": label,
            "size_mb": res.steps[0].metrics["size_bytes_after"] / 1e6,
            **_parity(reference, _outputs(res)),
        }
    pruned = {}
    for ratio in (0.3, 0.5):
        res = _run(
            source,
            spec,
            [{"pass": "prune_channels", "params": {"ratio": ratio}}],
            root / f"{name}_prune_{int(ratio * 100)}",
        )
        pruned[ratio] = res
        models[f"pruned {ratio:.0%}"] = res.model
    p50 = _interleaved_p50(models, inputs, args)
    eager_ms = p50["eager fp32"]
    quant_rows = []
    for label, row in rows.items():
        quant_rows.append({**row, "p50_ms": p50[label], "speedup_vs_eager": eager_ms / p50[label]})
    prune_rows = []
    for ratio, res in pruned.items():
        m = res.steps[0].metrics
        ms = p50[f"pruned {ratio:.0%}"]
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
                "eager_ms": eager_ms,
                "pruned_ms": ms,
                "latency_ratio": ms / eager_ms,
                "cosine_no_finetune": _parity(reference, _outputs(res))["cosine"],
            }
        )
    return quant_rows, prune_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=10, help="round-robin rounds over all variants"
    )
    parser.add_argument("--iters", type=int, default=5, help="timed calls per variant per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per variant per round")
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
    print("\nprune_channels (eager torch, no fine-tuning; latency = pruned p50 / unpruned p50)")
    print(
        f"{'model':<12} {'ratio':>5} {'params':>24} {'GFLOPs':>20} {'p50 ms':>17} {'latency':>8} {'cosine':>7}"
    )
    for r in prune:
        print(
            f"{r['model']:<12} {r['ratio']:>5.0%} "
            f"{r['params_before'] / 1e6:>6.3f}M->{r['params_after'] / 1e6:.3f}M ({r['params_ratio']:.2f}) "
            f"{r['flops_before'] / 1e9:>6.2f}->{r['flops_after'] / 1e9:.2f} ({r['flops_ratio']:.2f}) "
            f"{r['eager_ms']:>7.2f}->{r['pruned_ms']:<7.2f} {r['latency_ratio']:>7.2f}x "
            f"{r['cosine_no_finetune']:>7.4f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"quantization": quant, "pruning": prune}, indent=2))


if __name__ == "__main__":
    main()
