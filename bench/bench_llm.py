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
- optimum-intel OpenVINO int8 / int4, exported by bench/optimum_export.py in its own process
  under ``--optimum-site`` (a ``pip install --target`` folder with transformers<5.6 and
  optimum-intel, which does not import beside the studio's transformers), the IR generating
  through the studio's stateful runtime (else the row says why not);
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
import json
import os
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


def hand_written(module: Any, which: str = "bf16,static,torchao") -> dict[str, Any]:
    """The hand-written contenders (``which``: bf16, static, torchao): label -> module (a
    copy of the original's)."""
    import torch
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    out: dict[str, Any] = {}
    if "bf16" in which:
        out["eager bf16"] = copy.deepcopy(module).to(torch.bfloat16)
    if "static" in which:
        static = copy.deepcopy(module)
        static.generation_config.cache_implementation = "static"
        out["compile + static cache"] = torch.compile(static, dynamic=False)
    if "torchao" not in which:
        return out
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
    """The studio's stateful OpenVINO LM (``openvino_stateful``, ``--kv-cache`` KV cache): NNCF
    int8 / int4 weights on the f32 export (``compress_weights_openvino``), each generating
    through the infer request and through OpenVINO GenAI's LLMPipeline (``pipeline: genai``,
    the attention backends of ``--ov-pipelines``), and bf16 with ``--ov-bf16``: label ->
    LoadedModel, or the reason the contender is missing. The f32 export itself is dropped
    once compressed (its weights are the eager model's)."""
    import gc

    from accel.models.runtime import runtime_of
    from accel.passes import PassContext, get_pass
    from accel.runtimes.openvino.ir import bf16_supported

    def apply(name: str, model: Any, params: dict[str, Any], sub: str) -> Any:
        cls = get_pass(name)
        ctx = PassContext(inputs=model.example_inputs(), work_dir=work / sub, original=original)
        new = cls().apply(model, cls.parse_config(params), ctx)
        return runtime_of(new).with_threads(new, args.threads)

    def piped(model: Any, attention: str) -> Any:
        # what openvino_stateful(pipeline: genai, attention) + compression gives: same IR
        return model.replace(
            session_options={**model.session_options, "pipeline": "genai", "attention": attention}
        )

    out: dict[str, Any] = {}
    kv = {"kv_cache_precision": args.kv_cache}
    pipes = [a.strip() for a in args.ov_pipelines.split(",") if a.strip()]
    print("  exporting the stateful OpenVINO LM (f32)", flush=True)
    f32 = apply("openvino_stateful", original, {"precision": "f32", **kv}, "ov_f32")
    for mode, params in (
        ("int8", {"mode": "int8_asym"}),
        ("int4", {"mode": "int4_sym", "group_size": args.int4_group}),
    ):
        if mode not in args.ov_modes:
            continue
        label = f"OpenVINO stateful + {mode} weights"
        if mode == "int4":
            label += f" (g{args.int4_group})"
        print(f"  compressing weights to {mode}", flush=True)
        try:
            model = apply("compress_weights_openvino", f32, params, f"ov_{mode}")
        except Exception as exc:  # noqa: BLE001 - a failed contender is a row that says why
            out[label] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        out[label + ", infer request"] = model
        for attention in pipes:
            out[label + f", GenAI LLMPipeline ({attention})"] = piped(model, attention)
    del f32
    gc.collect()
    if args.ov_bf16:
        label = f"OpenVINO stateful bf16 ({args.kv_cache} KV)"
        if bf16_supported("CPU"):
            bf16 = apply("openvino_stateful", original, {"precision": "bf16", **kv}, "ov_bf16")
            out[label + ", infer request"] = bf16
            for attention in pipes:
                out[label + f", GenAI LLMPipeline ({attention})"] = piped(bf16, attention)
        else:
            out[label] = "no bf16 kernels on this CPU"
    return out


def optimum_peers(original: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The hand-written peers: optimum-intel's OVModelForCausalLM export with int8 / int4
    weights (its own defaults otherwise), made by bench/optimum_export.py in a process of its
    own under ``--optimum-site`` (optimum-intel 2.2 needs transformers<5.6, older than the
    studio's), the IR it writes generating through the studio's stateful runtime: label ->
    LoadedModel, or why not."""
    import subprocess

    from accel.models import load_model
    from accel.passes._ort_genai_build import save_hf_folder

    labels = {8: "optimum-intel OpenVINO int8", 4: "optimum-intel OpenVINO int4 (g128)"}
    if not args.optimum_site:
        why = (
            "--optimum-site not given (a pip --target folder with optimum-intel, transformers<5.6)"
        )
        return dict.fromkeys(labels.values(), why)
    hf = work / "optimum_hf"
    save_hf_folder(original.module, hf)
    out: dict[str, Any] = {}
    for bits, label in labels.items():
        folder = work / f"optimum_int{bits}"
        cmd = [sys.executable, str(ROOT / "bench" / "optimum_export.py"), str(hf), str(folder)]
        cmd += ["--bits", str(bits), "--group", str(args.int4_group)]
        env = {**os.environ, "PYTHONPATH": str(Path(args.optimum_site).resolve())}
        print(f"  optimum-intel export int{bits} (own process)", flush=True)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:]) or "?"
            out[label] = f"export failed (exit {done.returncode}): {tail[-400:]}"
            continue
        loaded = load_model(str(folder / "openvino_model.xml"))
        options = {"threads": args.threads, "kv_cache_precision": args.kv_cache}
        out[f"{label}, infer request"] = loaded.replace(
            session_options={**loaded.session_options, **options}
        )
        if "sdpa" in args.ov_pipelines:  # as OpenVINO's docs run an optimum export
            genai = {**options, "pipeline": "genai", "attention": "sdpa"}
            out[f"{label}, GenAI sdpa"] = loaded.replace(
                session_options={**loaded.session_options, **genai}
            )
    return out


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


def build_group(
    group: str, original: Any, args: argparse.Namespace, work: Path
) -> tuple[dict[str, Any], dict[str, int], dict[str, str]]:
    """One group's contenders: (label -> decoder, label -> weight bytes, label -> why not).
    ``a+b``: the contenders of both, built one after the other, timed together."""
    if "+" in group:
        merged: tuple[dict[str, Any], dict[str, int], dict[str, str]] = ({}, {}, {})
        # The search first: its trials load their own copy of the model, and at 1B that
        # beside the other parts' built contenders outgrew 24 GiB (the kernel killed it).
        for part in sorted(group.split("+"), key=lambda g: g != "search"):
            for into, new in zip(merged, build_group(part, original, args, work / part)):
                into.update(new)
        return merged
    total = args.prompt + args.new
    decoders: dict[str, Any] = {}
    weights: dict[str, int] = {}
    missing: dict[str, str] = {}
    if group == "torch":
        for k, m in hand_written(original.module, args.torch_rows).items():
            decoders[k] = CacheDecoder(m, total)
            weights[k] = tensor_bytes(getattr(m, "_orig_mod", m))
        return decoders, weights, missing
    if group == "openvino":
        built = openvino_stateful(original, args, work)
    elif group == "ort_genai":
        built = genai_contenders(original, args, work)
    elif group == "peers":
        built = optimum_peers(original, args, work)
    elif group == "search":
        built = {}
        if args.budget_s > 0:
            print(f"  searching (tokens_per_s, budget {args.budget_s:.0f} s)", flush=True)
            best, params, info = studio_best(original.source, args, work)
            args.search_info = info
            built = {f"studio best: {params}": best if best is not None else "none found"}
    else:
        raise SystemExit(f"unknown group {group!r}")
    for label, m in built.items():
        if isinstance(m, str):
            missing[label] = m
            continue
        decoders[label] = decoder_for(m, total)
        weights[label] = int(m.size_bytes or 0)
    return decoders, weights, missing


def bench_model(key: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Each group of contenders is built, checked, timed round-robin beside eager fp32 and
    freed before the next (``--groups``), so a ~1B model's contenders need not all fit in
    memory at once. A row's ratio is to the eager fp32 of its own group (paired rounds)."""
    import gc
    import shutil

    import torch

    from accel.models import load_model

    torch.set_num_threads(args.threads)
    source = MODELS[key]
    print(f"[{key}] loading {source}", flush=True)
    original = load_model(source)
    module = original.module
    settings = GenerateSettings(args.prompt, args.new, 1)
    prompt = prompt_ids(settings, module.config.vocab_size)
    reference = CacheDecoder(module, settings.total_tokens)
    fp32_bytes = tensor_bytes(module)
    print(f"[{key}] eager fp32 reference continuation", flush=True)
    tokens, logits = reference_continuation(reference, prompt, args.new)
    result: dict[str, Any] = {
        "model": source,
        "settings": settings.to_dict(),
        "threads": args.threads,
        "rows": [],
        "unavailable": {},
        "search": {},
        "load_average": [],
    }
    for group in [g.strip() for g in args.groups.split(",") if g.strip()]:
        sub = work / key / group
        print(f"[{key}] group {group}: building", flush=True)
        try:
            decoders, weights, missing = build_group(group, original, args, sub)
        except Exception as exc:  # noqa: BLE001 - a group that fails is reported, not fatal
            decoders, weights, missing = {}, {}, {f"group {group}": f"{type(exc).__name__}: {exc}"}
        result["unavailable"].update(missing)
        if decoders:
            print(
                f"[{key}] group {group}: parity and timing {len(decoders)} + eager fp32", flush=True
            )
            parity = {
                k: compare_generation_parity(tokens, logits, d, prompt, Tolerances()).metrics()
                for k, d in decoders.items()
            }
            per = round_robin({"eager fp32": reference, **decoders}, prompt, args.new, args.rounds)
            result["load_average"].append([group, list(os.getloadavg())])
            rows = [row(f"eager fp32 [{group}]", per["eager fp32"], per["eager fp32"])]
            rows[0].update(weights_bytes=fp32_bytes, kv_cache_bytes=reference.kv_cache_bytes())
            rows[0].update(tf_cosine_mean=1.0, tf_top1=1.0, greedy_agree_tokens=args.new)
            for k, dec in decoders.items():
                r = row(k, per[k], per["eager fp32"])
                r.update(weights_bytes=weights[k], kv_cache_bytes=dec.kv_cache_bytes())
                r.update(
                    {m: parity[k][m] for m in ("tf_cosine_mean", "tf_top1", "greedy_agree_tokens")}
                )
                rows.append(r)
            for r in rows:
                r.update(group=group, weights_vs_fp32=r["weights_bytes"] / fp32_bytes)
            peer_ratios(rows, per, {k: parity[k]["tf_cosine_min"] for k in parity}, args)
            result["rows"] += rows
        del decoders
        gc.collect()
        shutil.rmtree(sub, ignore_errors=True)
        result["search"] = getattr(args, "search_info", {})
        if args.json:  # what is done so far survives a later group's death
            Path(args.json).write_text(json.dumps([result], indent=1, default=str))
    return result


PEER = "optimum-intel"  # the hand-written peers' labels start with it


def peer_ratios(
    rows: list[dict[str, Any]],
    per: dict[str, list[Any]],
    min_cosine: dict[str, float],
    args: argparse.Namespace,
) -> None:
    """Each row's tokens/s against the group's best hand-written peer within the cosine
    budget (``--max-cosine-drop`` on the teacher-forced logits, as the search gates), as the
    median of per-round ratios with its interval (``vs_peer``) and the peer's label
    (``peer``): both timed in the same rounds. Peers that fail the budget (int4 on random
    weights) are not what a recipe within it is held to; no peer within it, no column."""
    import statistics

    peers = [k for k in per if k.startswith(PEER) and 1.0 - min_cosine[k] <= args.max_cosine_drop]
    if not peers:
        return
    best = max(peers, key=lambda k: statistics.median(t.tokens_per_s for t in per[k]))
    for r in rows:
        label = r["contender"].removesuffix(" [" + r.get("group", "") + "]")
        mine = per.get(label) or per["eager fp32"]
        ratios = [a.tokens_per_s / b.tokens_per_s for a, b in zip(mine, per[best], strict=True)]
        i = median_interval(ratios)
        r.update(peer=best, vs_peer=[i.value, i.low, i.high])


def row(label: str, timings: list[Any], reference: list[Any]) -> dict[str, Any]:
    return {"contender": label, **figures(timings, reference)}


def print_table(result: dict[str, Any]) -> None:
    s = result["settings"]
    print(
        f"\n{result['model']}: batch {s['batch']}, prompt {s['prompt_tokens']}, "
        f"{s['new_tokens']} new tokens, {result['threads']} threads; x fp32: against the "
        f"eager fp32 timed in the same group; load average {result['load_average']}"
    )
    head = f"{'contender':62} {'TTFT ms':>22} {'TPOT ms':>20} {'tok/s':>20} {'x fp32':>18} {'weights':>8} {'KV MiB':>7} {'TF cos':>8} {'TF top1':>7} {'agree':>5} {'x peer':>18}"
    print(head)
    for r in result["rows"]:

        def c(v: list[float], d: int) -> str:
            return f"{v[0]:.{d}f} [{v[1]:.{d}f},{v[2]:.{d}f}]"

        print(
            f"{r['contender'][:62]:62} {c(r['ttft_ms'], 1):>22} {c(r['tpot_ms'], 2):>20} "
            f"{c(r['tokens_per_s'], 1):>20} {c(r['ratio'], 2):>18} "
            f"{r['weights_vs_fp32']:>7.2f}x {r['kv_cache_bytes'] / 2**20:>7.2f} "
            f"{r['tf_cosine_mean']:>8.5f} {r['tf_top1']:>7.3f} {int(r['greedy_agree_tokens']):>5} "
            f"{c(r['vs_peer'], 2) if 'vs_peer' in r else '-':>18}"
        )
    peers = {r["peer"] for r in result["rows"] if "peer" in r}
    if peers:
        print(f"x peer: tokens/s against {', '.join(sorted(peers))} in the same rounds")
    for k, why in result["unavailable"].items():
        print(f"{k[:62]:62} unavailable: {why}")
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
        "--groups",
        default="torch,openvino,ort_genai,peers,search",
        help="contender groups, each built, timed beside eager fp32 and freed in turn",
    )
    p.add_argument("--torch-rows", default="bf16,static,torchao", help="the torch group's rows")
    p.add_argument("--ov-modes", default="int8,int4", help="NNCF weight modes on the stateful IR")
    p.add_argument(
        "--ov-pipelines",
        default="sdpa,paged",
        help="OpenVINO GenAI LLMPipeline attention backends timed beside the infer request",
    )
    p.add_argument("--ov-bf16", action="store_true", help="also the bf16 stateful export")
    p.add_argument("--optimum-site", default=None, help="a pip --target folder with optimum-intel")
    p.add_argument("--max-cosine-drop", type=float, default=0.01)
    p.add_argument("--json", default=None)
    p.add_argument("--kv-cache", default="u8", help="stateful OpenVINO KV-cache precision")
    p.add_argument("--int4-group", type=int, default=128)
    p.add_argument("--work", default=None, help="folder for the build folders (default: tmp)")
    args = p.parse_args()
    b = args.budget.strip().lower()
    args.budget_s = float(b[:-1]) * 60 if b.endswith("m") else float(b.rstrip("s"))
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-llm-", dir=args.work) as tmp:
        for key in [m.strip() for m in args.models.split(",") if m.strip()]:
            result = bench_model(key, args, Path(tmp))
            print_table(result)
            results.append(result)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
