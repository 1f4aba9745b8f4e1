"""Decoder LMs generating: hand-written pipelines and the studio's best recipe, side by side.

For each model (``--models``: ``small`` = hf:llama_small, ``1b`` = hf:tinyllama_1b, TinyLlama's
config; random weights): batch 1, ``--prompt`` prompt tokens, ``--new`` new tokens, greedy,
``--threads`` threads. Contenders, all in this process and timed round-robin (rotating order,
``--rounds`` rounds after one untimed warm-up generation each):

- eager fp32 (the reference), eager bf16, torch.compile with a static KV cache,
  torchao weight-only int8 and int4 (hand-written, the torch peers);
- the studio's stateful OpenVINO LM (``openvino_stateful``: KV cache in the infer request,
  ``--kv-cache`` precision) in f32 and bf16, and with NNCF int8 / int4 weights on the f32 one
  (``compress_weights_openvino``), built by the passes themselves (``--no-openvino``: skip);
- optimum-intel OpenVINO int8 / int4 when optimum-intel is installed (else the row says so);
- the studio's ``ort_genai`` pass (ONNX Runtime GenAI's model builder, generating through
  og.Generator) at each precision of ``--genai`` (default int4; empty: none), on ``--threads``;
- the studio's best: ``studio optimize --objective tokens_per_s`` (``accel.search``, trials in
  this process) within ``--budget``, no hand-picking; its recipe is rebuilt and timed here.

Per contender: TTFT, TPOT, tokens/s (medians, 95% bootstrap intervals), tokens/s ratio to eager
fp32 (median of per-round ratios, interval), weights and KV-cache bytes, teacher-forced logits
cosine / top-1 against eager fp32 over its continuation and the free-running first divergence.

Usage: nice .venv/bin/python bench/bench_llm.py [--models small,1b] [--budget 5m] [--json F]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accel.generate.decoders import CacheDecoder, decoder_for  # noqa: E402
from accel.generate.parity import compare_generation_parity, reference_continuation  # noqa: E402
from accel.generate.settings import GenerateSettings, prompt_ids  # noqa: E402
from accel.generate.timing import median_interval, time_generation  # noqa: E402
from accel.parity import Tolerances  # noqa: E402

MODELS = {"small": "hf:llama_small", "1b": "hf:tinyllama_1b"}


def tensor_bytes(module: Any) -> int:
    """Bytes of a module's parameters and buffers, tensor subclasses (torchao) by their inner
    tensors, shared storage (tied embeddings) once."""
    seen: set[int] = set()

    def size(t: Any) -> int:
        if hasattr(t, "__tensor_flatten__") and type(t).__name__ not in ("Parameter", "Tensor"):
            names, _ = t.__tensor_flatten__()
            return sum(size(getattr(t, n)) for n in names)
        storage = t.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()

    return sum(
        size(t.data if hasattr(t, "data") else t) for t in (*module.parameters(), *module.buffers())
    )


def hand_written(module: Any) -> dict[str, Any]:
    """The hand-written contenders: label -> module (a copy of the original's)."""
    import torch
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    out: dict[str, Any] = {"eager bf16": copy.deepcopy(module).to(torch.bfloat16)}
    static = copy.deepcopy(module)
    static.generation_config.cache_implementation = "static"
    out["compile + static cache"] = torch.compile(static, dynamic=False)
    int8 = copy.deepcopy(module)
    quantize_(int8, Int8WeightOnlyConfig())
    out["torchao int8 weight-only"] = int8
    int4 = copy.deepcopy(module)
    quantize_(
        int4,
        IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(128)),
        # layers whose input size is not a multiple of 128 stay float (llama_small's 1376)
        filter_fn=lambda m, _n: isinstance(m, torch.nn.Linear) and m.in_features % 128 == 0,
    )
    out["torchao int4 weight-only (intx, g128)"] = int4
    return out


def openvino_stateful(original: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The studio's stateful OpenVINO LM (``openvino_stateful``, u8 KV cache) in f32 and bf16,
    and NNCF int8 / int4 weights on the f32 one (``compress_weights_openvino``): label ->
    LoadedModel, or the reason the contender is missing."""
    from accel.models.runtime import runtime_of
    from accel.passes import PassContext, get_pass
    from accel.runtimes.openvino.ir import bf16_supported

    def apply(name: str, model: Any, params: dict[str, Any], sub: str) -> Any:
        cls = get_pass(name)
        ctx = PassContext(inputs=model.example_inputs(), work_dir=work / sub, original=original)
        new = cls().apply(model, cls.parse_config(params), ctx)
        return runtime_of(new).with_threads(new, args.threads)

    out: dict[str, Any] = {}
    kv = {"kv_cache_precision": args.kv_cache}
    print("  exporting the stateful OpenVINO LM (f32)", flush=True)
    f32 = apply("openvino_stateful", original, {"precision": "f32", **kv}, "ov_f32")
    out[f"OpenVINO stateful f32 ({args.kv_cache} KV)"] = f32
    if bf16_supported("CPU"):
        bf16 = apply("openvino_stateful", original, {"precision": "bf16", **kv}, "ov_bf16")
        out[f"OpenVINO stateful bf16 ({args.kv_cache} KV)"] = bf16
    else:
        out[f"OpenVINO stateful bf16 ({args.kv_cache} KV)"] = "no bf16 kernels on this CPU"
    for mode, params in (
        ("int8", {"mode": "int8_asym"}),
        ("int4", {"mode": "int4_sym", "group_size": args.int4_group}),
    ):
        label = f"OpenVINO stateful f32 + {mode} weights"
        if mode == "int4":
            label += f" (g{args.int4_group})"
        print(f"  compressing weights to {mode}", flush=True)
        try:
            out[label] = apply("compress_weights_openvino", f32, params, f"ov_{mode}")
        except Exception as exc:  # noqa: BLE001 - a failed contender is a row that says why
            out[label] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def optimum_rows() -> dict[str, str]:
    """optimum-intel peers: why they are missing (the bench does not install packages)."""
    if importlib.util.find_spec("optimum") is None:
        why = "optimum-intel is not installed here (pip install optimum-intel)"
        return {"optimum-intel OpenVINO int8": why, "optimum-intel OpenVINO int4": why}
    return {
        "optimum-intel OpenVINO int8": "optimum-intel is installed but this bench does not "
        "drive it yet",
        "optimum-intel OpenVINO int4": "as above",
    }


def studio_best(source: str, args: argparse.Namespace, work: Path) -> tuple[Any, str, dict]:
    """Search with objective tokens_per_s; the best trial's model rebuilt (gated) here."""
    from accel.search import InProcessExecutor, SearchConfig, run_search
    from accel.search.engine import trial_spec
    from accel.search.trial import run_trial

    config = SearchConfig(
        model=source,
        objective="tokens_per_s",
        generate={"prompt_tokens": args.prompt, "new_tokens": args.new, "batch": 1},
        max_cosine_drop=args.max_cosine_drop,
        budget_s=args.budget_s,
        max_trials=args.trials,
        bench_rounds=3,
        bench_threads=args.threads,
        out_dir=str(work),
        trial_timeout_s=None,
        seed=0,
    )
    t0 = time.monotonic()
    res = run_search(config, InProcessExecutor())
    info = {
        "trials": len(res.trials),
        "wall_s": round(time.monotonic() - t0, 1),
        "status": res.status,
        "tried": [(t.label, t.status, t.metrics.get("tokens_per_s_ratio")) for t in res.trials],
    }
    if res.best is None:
        return None, "none found", info
    best = res.trial(res.best)
    spec = trial_spec(config, 1000, best.steps)
    spec["benchmark"]["skip"] = True
    hold: dict[str, Any] = {}
    run_trial(spec, lambda e: None, lambda: False, hold=hold)
    params = "; ".join(f"{s['pass']} {s.get('params') or ''}" for s in best.steps)
    return hold.get("model"), params, info


def genai_contenders(original: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The studio's ort_genai steps (label -> LoadedModel), or label -> why not."""
    from accel.models.runtime import get_runtime
    from accel.passes import PassContext, get_pass

    out: dict[str, Any] = {}
    cls = get_pass("ort_genai")
    for precision in [p.strip() for p in args.genai.split(",") if p.strip()]:
        label = f"studio ort_genai {precision}"
        # int4-emb: the token embedding quantized too (the pass's default), int4: MatMuls only
        params: dict[str, Any] = {"precision": precision.removesuffix("-emb")}
        params["quantize_embedding"] = precision.endswith("-emb")
        ctx = PassContext(
            inputs=original.example_inputs(),
            work_dir=work / f"genai-{precision}",
            original=original,
        )
        try:
            built = cls().apply(original, cls.parse_config(params), ctx)
        except Exception as exc:  # noqa: BLE001 - the row says why
            out[label] = f"{type(exc).__name__}: {exc}"
            continue
        out[label] = get_runtime(built.kind).with_threads(built, args.threads)
    return out


def round_robin(decoders: dict[str, Any], prompt: Any, new: int, rounds: int) -> dict[str, Any]:
    """Every contender generating once per round, order rotating; one untimed warm-up."""
    for dec in decoders.values():
        time_generation(dec, prompt, new)
    labels = list(decoders)
    per: dict[str, list[Any]] = {k: [] for k in labels}
    for r in range(rounds):
        order = labels[r % len(labels) :] + labels[: r % len(labels)]
        for label in order:
            per[label].append(time_generation(decoders[label], prompt, new))
        print(f"  round {r + 1}/{rounds} done", flush=True)
    return per


def figures(timings: list[Any], reference: list[Any]) -> dict[str, Any]:
    def iv(values: list[float], scale: float = 1.0) -> list[float]:
        i = median_interval(values)
        return [i.value * scale, i.low * scale, i.high * scale]

    return {
        "ttft_ms": iv([t.ttft_s for t in timings], 1e3),
        "tpot_ms": iv([t.tpot_s for t in timings], 1e3),
        "tokens_per_s": iv([t.tokens_per_s for t in timings]),
        "ratio": iv([t.tokens_per_s / r.tokens_per_s for t, r in zip(timings, reference)]),
    }


def bench_model(key: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch

    from accel.models import load_model

    torch.set_num_threads(args.threads)
    source = MODELS[key]
    print(f"[{key}] loading {source}", flush=True)
    original = load_model(source)
    module = original.module
    settings = GenerateSettings(args.prompt, args.new, 1)
    prompt = prompt_ids(settings, module.config.vocab_size)
    total = settings.total_tokens
    modules = {"eager fp32": module, **({} if args.no_hand_written else hand_written(module))}
    decoders = {k: CacheDecoder(m, total) for k, m in modules.items()}
    weights = {k: tensor_bytes(getattr(m, "_orig_mod", m)) for k, m in modules.items()}
    unavailable: dict[str, str] = optimum_rows()
    if args.openvino:
        for label, m in openvino_stateful(original, args, work / key).items():
            if isinstance(m, str):
                unavailable[label] = m
                continue
            decoders[label] = decoder_for(m, total)
            weights[label] = int(m.size_bytes or 0)
    for label, m in genai_contenders(original, args, work / key).items():
        if isinstance(m, str):
            unavailable[label] = m
            continue
        decoders[label] = decoder_for(m, total)
        weights[label] = int(m.size_bytes or 0)
    best_info: dict[str, Any] = {}
    if args.budget_s > 0:
        print(
            f"[{key}] searching (objective tokens_per_s, budget {args.budget_s:.0f} s)", flush=True
        )
        best, params, best_info = studio_best(source, args, work / key)
        if best is not None:
            label = f"studio best: {params}"
            decoders[label] = decoder_for(best, total)
            weights[label] = int(best.size_bytes or 0)
    print(f"[{key}] parity against eager fp32", flush=True)
    tokens, logits = reference_continuation(decoders["eager fp32"], prompt, args.new)
    parity = {
        k: compare_generation_parity(tokens, logits, d, prompt, Tolerances()).metrics()
        for k, d in decoders.items()
    }
    print(f"[{key}] timing {len(decoders)} contenders round-robin", flush=True)
    per = round_robin(decoders, prompt, args.new, args.rounds)
    rows = []
    for k, dec in decoders.items():
        rows.append(
            {
                "contender": k,
                **figures(per[k], per["eager fp32"]),
                "weights_bytes": weights[k],
                "kv_cache_bytes": dec.kv_cache_bytes(),
                "tf_cosine_mean": parity[k]["tf_cosine_mean"],
                "tf_top1": parity[k]["tf_top1"],
                "greedy_agree_tokens": parity[k]["greedy_agree_tokens"],
            }
        )
    return {
        "model": source,
        "settings": settings.to_dict(),
        "rows": rows,
        "unavailable": unavailable,
        "search": best_info,
    }


def print_table(result: dict[str, Any]) -> None:
    s = result["settings"]
    fp32 = next(r for r in result["rows"] if r["contender"] == "eager fp32")
    print(
        f"\n{result['model']}: batch {s['batch']}, prompt {s['prompt_tokens']}, "
        f"{s['new_tokens']} new tokens"
    )
    head = f"{'contender':52} {'TTFT ms':>22} {'TPOT ms':>20} {'tok/s':>20} {'x fp32':>18} {'weights':>8} {'KV MiB':>7} {'TF cos':>8} {'TF top1':>7} {'agree':>5}"
    print(head)
    for r in result["rows"]:

        def c(v: list[float], d: int) -> str:
            return f"{v[0]:.{d}f} [{v[1]:.{d}f},{v[2]:.{d}f}]"

        print(
            f"{r['contender'][:52]:52} {c(r['ttft_ms'], 1):>22} {c(r['tpot_ms'], 2):>20} "
            f"{c(r['tokens_per_s'], 1):>20} {c(r['ratio'], 2):>18} "
            f"{r['weights_bytes'] / fp32['weights_bytes']:>7.2f}x {r['kv_cache_bytes'] / 2**20:>7.2f} "
            f"{r['tf_cosine_mean']:>8.5f} {r['tf_top1']:>7.3f} {int(r['greedy_agree_tokens']):>5}"
        )
    for k, why in result["unavailable"].items():
        print(f"{k[:52]:52} unavailable: {why}")
    if result["search"]:
        print(
            f"search: {result['search']['trials']} trials in {result['search']['wall_s']} s "
            f"({result['search']['status']})"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="small")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--budget", default="5m", help="search wall time per model (0: no search)")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument(
        "--genai",
        default="int4",
        help="ort_genai precisions, comma-separated (int4-emb: the embedding too)",
    )
    p.add_argument(
        "--no-hand-written", action="store_true", help="eager fp32 and the studio's rows only"
    )
    p.add_argument("--max-cosine-drop", type=float, default=0.01)
    p.add_argument("--json", default=None)
    p.add_argument("--no-openvino", dest="openvino", action="store_false")
    p.add_argument("--kv-cache", default="u8", help="stateful OpenVINO KV-cache precision")
    p.add_argument("--int4-group", type=int, default=128)
    args = p.parse_args()
    b = args.budget.strip().lower()
    args.budget_s = float(b[:-1]) * 60 if b.endswith("m") else float(b.rstrip("s"))
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp:
        for key in [m.strip() for m in args.models.split(",") if m.strip()]:
            result = bench_model(key, args, Path(tmp))
            print_table(result)
            results.append(result)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
