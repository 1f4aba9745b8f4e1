"""Recipe search vs sample recipes and hand-written pipelines, on this machine.

For each model: one seeded search (``accel.search``, trials in this process, the parity gate
at the looser cosine-drop budget, 0.01) within a wall-time budget; the best recipe within
0.01 and the best within 0.001 (the subset of the same trials whose cosine drop is at most
0.001) are then compared with every sample recipe in resources/recipes for that model and
with the hand-written pipelines (torch.compile bf16, ONNX Runtime int8 dynamic/static,
OpenVINO when its passes are registered; the bf16 ones only on a CPU with bf16 kernels, or
with ``--bf16``). Every contender (found or hand-written) is built
and checked (``accel.search.trial``), then all of them and the original are timed
round-robin in this process (rotating order, ``--rounds`` rounds): a contender's speedup is
the median over rounds of original / contender within the same round, and the ratio best /
hand-written compares two speedups measured against the same reference at the same time.

Every built contender's parity is also measured on held-out inputs (spec samples at seeds
BENCH_HELDOUT_SEED + i, never seen by the search's gate, calibration or distillation); a
contender counts as within a cosine-drop budget only if both its gate sample and the held-out
inputs are. The JSON is rewritten after every model, so a bench stopped early keeps the models
that finished.

For each search it also reports the time to the best: the first trial whose speedup is
within 5 % of the search's best (within 0.01), its index and when it finished.

Usage:
    .venv/bin/python bench/bench_search.py [--models bert-base,resnet50] [--budget 15m]
        [--trials N] [--iters 30] [--threads 1] [--allow prune,distill] [--bf16] [--json out.json]
``--budget`` is per model (the issue's target: 15 minutes on the 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accel.hardware import cpu_features  # noqa: E402
from accel.passes import pass_names  # noqa: E402
from accel.recipe import load_recipe  # noqa: E402
from accel.search import InProcessExecutor, SearchConfig, run_search  # noqa: E402
from accel.search.engine import trial_spec  # noqa: E402
from accel.search.trial import run_trial  # noqa: E402

# source, input spec, benchmark dims (those of the sample recipes)
MODELS: dict[str, tuple[str, str | None, dict[str, int]]] = {
    "resnet": ("zoo:resnet", None, {"batch": 8}),
    "transformer": ("zoo:transformer", None, {"batch": 4, "seq": 128}),
    # BERT-base sized encoder (12 layers, hidden 768) from transformers, random weights.
    "bert-base": (
        "bench.bench_search:bert_base",
        "input_ids:int64[batch,seq]{0..30000}; batch=1..8:1; seq=8..512:128",
        {"batch": 1, "seq": 128},
    ),
    # The corpus models (accel.models.corpus: seeded, BatchNorm statistics warmed, the entry's
    # own input spec). tv: needs torchvision, which does not import beside the CPU torch 2.13
    # of CI: run that one in a venv with a matching pair; the hf: ones need transformers only.
    "torchvision-resnet50": ("tv:resnet50", None, {"batch": 1}),
    "resnet50": ("hf:resnet50", None, {"batch": 1}),
    "efficientnet": ("hf:efficientnet_b0", None, {"batch": 1}),
    # A small decoder's prefill: one forward over the prompt (batch 1, 128 tokens), its logits
    # compared; the objective is that forward's latency, not generation.
    "decoder-prefill": ("hf:llama_small", None, {"batch": 1, "seq": 128}),
}
# Held-out inputs of the bench's own parity check: spec samples at these seeds, disjoint from
# the search gate's sample (the search seed, 0), the calibration inputs (1000 + i) and the
# distillation's held-out inputs (30000 + i).
BENCH_HELDOUT_SEED = 90000
BENCH_HELDOUT_N = 4


def bert_base() -> Any:
    """A BERT-base-sized encoder returning its pooled output (random weights)."""
    import torch
    from transformers import BertConfig, BertModel

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel(BertConfig())

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=input_ids).pooler_output

    return Encoder().eval()


# Hand-written contenders that compute in bf16: on a CPU without bf16 kernels (no AMX, no
# AVX-512 BF16) torch and OpenVINO emulate it, an engineer would not pick it, and it runs
# ~5-30x slower than the original, which makes the round robin take most of the bench.
BF16_CONTENDERS = ("torch.compile bf16", "OpenVINO bf16")


def hand_written(bf16_cpu: bool = True) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """The hand-written pipelines (label -> steps), and those left out (label -> why):
    the bf16 ones where ``bf16_cpu`` is False (see BF16_CONTENDERS)."""
    names = set(pass_names())
    out: dict[str, list[dict[str, Any]]] = {
        "torch.compile bf16": [{"pass": "bf16", "params": {}}, {"pass": "compile", "params": {}}],
        "ORT int8 dynamic": [
            {"pass": "export_onnx", "params": {}},
            {"pass": "quantize_onnx_dynamic", "params": {}},
            {"pass": "onnxruntime", "params": {}},
        ],
        "ORT int8 static": [
            {"pass": "export_onnx", "params": {}},
            {"pass": "quantize_onnx_static", "params": {}},
            {"pass": "onnxruntime", "params": {}},
        ],
    }
    if "openvino" in names:
        out["OpenVINO f32"] = [{"pass": "openvino", "params": {"precision": "f32"}}]
        out["OpenVINO bf16"] = [{"pass": "openvino", "params": {"precision": "bf16"}}]
        # The hand-written OpenVINO + NNCF int8 script: OpenVINO's defaults (its CPU plugin
        # runs bf16 where the CPU has AMX; the pass's precision auto), NNCF's defaults.
        if "quantize_openvino" in names:
            out["OpenVINO + NNCF int8"] = [
                {"pass": "openvino", "params": {}},
                {"pass": "quantize_openvino", "params": {}},
            ]
    left_out: dict[str, str] = {}
    if not bf16_cpu:
        for label in BF16_CONTENDERS:
            if out.pop(label, None) is not None:
                left_out[label] = (
                    "this CPU has no bf16 kernels (AMX, AVX-512 BF16); --bf16 times it"
                )
    return out, left_out


def sample_recipes(source: str) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted((ROOT / "resources" / "recipes").glob("*.yaml")):
        r = load_recipe(path)
        if r.model.source == source:
            out[f"sample {path.name}"] = [
                {"pass": s.pass_name, "params": dict(s.params)} for _, s in r.enabled_steps()
            ]
    return out


def round_robin(
    original: Any, models: dict[str, Any], inputs: Any, args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """Time the original and every contender in ONE measurement of the project's timing
    engine (``accel.timing.compare_round_robin``: rotating order, ``args.rounds`` rounds of
    ``args.iters`` calls of each). Per contender: the speedup over the original of the same
    rounds with its bootstrap interval, its p50 and its per-round medians."""
    from accel.errors import AccelError
    from accel.timing import TimingSettings, compare_round_robin
    from accel.timing.harness import prepare
    from accel.timing.placement import choose_cpus, torch_threads, with_threads

    settings = TimingSettings(
        rounds=args.rounds,
        iters=args.rounds * args.iters,
        warmup=2,
        threads=args.threads,
        min_time_s=0.0,
    )
    # A contender built at the default threads may be refused at the timing's (OpenVINO's
    # bf16 gated-MLP crash on one thread, accel.runtimes.openvino.known_crashes): its row
    # says so and the others are timed.
    out: dict[str, dict[str, Any]] = {}
    threads = choose_cpus(settings.threads, "cpu").threads
    usable = {}
    for name, model in models.items():
        try:
            with torch_threads(threads):
                prepare(with_threads(model, threads), inputs, "cpu", threads)
            usable[name] = model
        except AccelError as exc:
            out[name] = {"error": f"not timed on {threads} thread(s): {exc}"[:300]}
    comparisons = compare_round_robin(original, usable, inputs, settings)
    for n, cmp in comparisons.items():
        t = cmp.timing()
        out[n] = {
            "speedup": t.speedup,
            "speedup_low": t.speedup_low,
            "speedup_high": t.speedup_high,
            "latency_p50_ms": t.p50_step_ms,
            "original_p50_ms": t.p50_ref_ms,
            "rounds_ms": list(cmp.candidate.round_ms),
            "noisy": t.noise_reason,
        }
    return out


def heldout_drop(original: Any, model: Any, dims: dict[str, int]) -> float | None:
    """The worst cosine drop of ``model`` against ``original`` over BENCH_HELDOUT_N spec
    samples at seeds BENCH_HELDOUT_SEED + i, inputs no pass and no gate of the search saw."""
    from accel.parity import compare, normalize_outputs

    worst: float | None = None
    for i in range(BENCH_HELDOUT_N):
        x = original.input_spec.sample(seed=BENCH_HELDOUT_SEED + i, dims=dims or None)
        report = compare(
            normalize_outputs(original.forward(x)), normalize_outputs(model.forward(x))
        )
        cos = report.worst().get("min_cosine")
        if cos is not None:
            drop = max(0.0, 1.0 - float(cos))
            worst = drop if worst is None else max(worst, drop)
    return worst


def best_within(res: Any, max_drop: float) -> Any:
    """The search's best within ``max_drop``: its own best (chosen by the final side-by-side
    re-timing when that ran) at the search's budget, else the fastest trial within it by the
    trials' own measurements."""
    if res.best is not None and max_drop >= res.config.max_cosine_drop:
        return res.trial(res.best)
    ok = [
        t
        for t in res.trials
        if t.status == "ok" and t.chain and (t.metrics.get("cosine_drop") or 0) <= max_drop
    ]
    return max(ok, key=lambda t: t.metrics.get("speedup") or 0.0) if ok else None


def time_to_best(res: Any, done_at: dict[int, float], max_drop: float) -> dict[str, Any] | None:
    """The first trial within ``max_drop`` whose speedup is within 5 % of the search's best
    within it: its number, chain and when it finished (seconds after the search started)."""
    best = best_within(res, max_drop)
    if best is None:
        return None
    final = res.final
    if final is not None and final.done and best.number == final.winner:
        # the winner's figure and the others' from the one final measurement
        top = final.timings[best.number].speedup or 0.0
        near = [n for n, t in final.timings.items() if (t.speedup or 0.0) >= 0.95 * top]
        first = res.trial(min(near))
        return {
            "trial": first.number,
            "chain": first.label,
            "seconds": done_at.get(first.number),
            "best_trial": best.number,
            "best_chain": best.label,
            "best_speedup": top,
            "measured_in": "the final side-by-side re-timing",
        }
    target = 0.95 * (best.metrics.get("speedup") or 0.0)
    first = min(
        (
            t
            for t in res.trials
            if t.status == "ok"
            and t.chain
            and (t.metrics.get("cosine_drop") or 0) <= max_drop
            and (t.metrics.get("speedup") or 0.0) >= target
        ),
        key=lambda t: t.number,
    )
    return {
        "trial": first.number,
        "chain": first.label,
        "seconds": done_at.get(first.number),
        "best_trial": best.number,
        "best_chain": best.label,
        "best_speedup": best.metrics.get("speedup"),
    }


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def bench_model(key: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    source, spec, dims = MODELS[key]
    try:
        from accel.search.engine import inspect_model

        inspect_model(SearchConfig(model=source, input_spec=spec))
    except Exception as exc:  # noqa: BLE001 - reported, the other models still run
        return {"model": key, "skipped": f"{type(exc).__name__}: {str(exc)[:200]}"}
    config = SearchConfig(
        model=source,
        input_spec=spec,
        max_cosine_drop=0.01,
        objective="latency",
        budget_s=args.budget_s,
        max_trials=args.trials,
        seed=0,
        out_dir=str(work / key),
        bench_iters=args.iters,
        bench_rounds=3,
        bench_dims=dims,
        bench_threads=args.threads,
        trial_timeout_s=None,
        allow=tuple(a for a in args.allow.split(",") if a),
    )
    t0 = time.monotonic()
    done_at: dict[int, float] = {}

    def on_trial(t: Any) -> None:
        if t.status != "running":
            done_at[t.number] = time.monotonic() - t0
            m = t.metrics
            print(
                f"  [{done_at[t.number]:5.0f} s] trial {t.number} {t.label}: {t.status} "
                f"speedup {fmt(m.get('speedup'))}x cos drop {fmt(m.get('cosine_drop'), '.1e')}",
                flush=True,
            )

    load_before = os.getloadavg()
    res = run_search(config, InProcessExecutor(), on_trial=on_trial)
    wall = time.monotonic() - t0
    first = time_to_best(res, done_at, 0.01)
    contenders: dict[str, list[dict[str, Any]]] = {}
    found: dict[float, str] = {}  # budget -> its contender (one build when both are one trial)
    by_trial: dict[int, str] = {}
    for d in (0.01, 0.001):
        t = best_within(res, d)
        if t is None:
            continue
        if t.number not in by_trial:
            params = ", ".join(
                f"{k}={v}" for st in t.steps for k, v in st["params"].items() if k != "explain"
            )
            by_trial[t.number] = f"best within {d:g}: {t.label}" + (
                f" ({params})" if params else ""
            )
            contenders[by_trial[t.number]] = t.steps
        found[d] = by_trial[t.number]
    contenders.update(sample_recipes(source))
    hands, left_out = hand_written(args.bf16 or cpu_features().bf16)
    contenders.update(hands)
    rows: list[dict[str, Any]] = [
        {"contender": label, "steps": None, "status": "left_out", "error": why}
        | {"cosine_drop": None, "heldout_cosine_drop": None}
        for label, why in left_out.items()
    ]
    built: dict[str, Any] = {}
    original = inputs = None
    for i, (label, steps) in enumerate(contenders.items()):
        spec_ = trial_spec(config, 1000 + i, steps)
        spec_["gates"]["max_cosine_drop"] = 2.0  # build everything; report the drop
        spec_["benchmark"]["skip"] = True
        hold: dict[str, Any] = {}
        r = run_trial(spec_, lambda e: None, lambda: False, hold=hold)
        m = r.get("metrics") or {}
        held = None
        if "model" in hold:
            built[label] = hold["model"]
            original, inputs = hold["original"], hold["inputs"]
            try:
                held = heldout_drop(original, hold["model"], dims)
            except Exception as exc:  # noqa: BLE001 - reported in the row
                r["error"] = f"held-out parity: {type(exc).__name__}: {exc}"
        rows.append(
            {
                "contender": label,
                "steps": steps,
                "status": r.get("trial_status", r.get("status")),
                "error": (r.get("error") or "")[:160],
                "cosine_drop": m.get("cosine_drop"),
                "heldout_cosine_drop": held,
            }
        )
    speed = round_robin(original, built, inputs, args) if built else {}
    for row in rows:
        row.update(speed.get(row["contender"], {}))
    by = {r["contender"]: r for r in rows}
    summary = {}
    for budget in (0.01, 0.001):
        best_label = found.get(budget)
        best = by.get(best_label) if best_label else None
        hands = [
            r
            for r in rows
            if not r["contender"].startswith("best")
            and r.get("speedup") is not None
            and _parity(r) <= budget
        ]
        top = max(hands, key=lambda r: r["speedup"], default=None)
        summary[str(budget)] = {
            "best": best_label,
            "best_speedup": best and best.get("speedup"),
            "best_speedup_low": best and best.get("speedup_low"),
            "best_speedup_high": best and best.get("speedup_high"),
            "best_steps": best and best["steps"],
            "best_heldout_cosine_drop": best and best.get("heldout_cosine_drop"),
            "best_within_budget_on_heldout": best is not None and _parity(best) <= budget,
            "best_hand": top and top["contender"],
            "best_hand_speedup": top and top["speedup"],
            "best_hand_speedup_low": top and top.get("speedup_low"),
            "best_hand_speedup_high": top and top.get("speedup_high"),
            "ratio_best_over_hand": (
                best.get("speedup") / top["speedup"]
                if best and top and best.get("speedup") and top["speedup"]
                else None
            ),
            **_ratio_interval(best, top),
        }
    return {
        "model": key,
        "time_to_best": first,
        "seeds": res.space.get("seeds"),
        "trials": len(res.trials),
        "search_wall_s": wall,
        "status": res.status,
        "final": res.final.to_dict() if res.final is not None else None,
        "load_average": {"search_start": load_before, "end": os.getloadavg()},
        "threads": args.threads,
        "budget_s": args.budget_s,
        "cache": res.cache,
        "rows": rows,
        "summary": summary,
    }


def _ratio_interval(best: dict[str, Any] | None, top: dict[str, Any] | None) -> dict[str, Any]:
    """Per round, hand-written latency / found latency (the same round): its min and max."""
    a = (best or {}).get("rounds_ms") or []
    b = (top or {}).get("rounds_ms") or []
    ratios = [h / f for f, h in zip(a, b, strict=False) if f]
    if not ratios:
        return {}
    return {"ratio_low": min(ratios), "ratio_high": max(ratios)}


def _parity(row: dict[str, Any]) -> float:
    """The row's cosine drop for the budget: the worse of the gate's sample and the held-out
    inputs (a row whose held-out check failed counts as over budget)."""
    drops = [row.get("cosine_drop"), row.get("heldout_cosine_drop")]
    if row.get("status") == "ok" and drops[1] is None:
        return float("inf")
    return max((d for d in drops if d is not None), default=0.0)


def _steps_label(steps: list[dict[str, Any]] | None) -> str:
    """``pass(k=v, ...) + ...`` of a chain, the search's explanations left out."""
    parts = []
    for st in steps or []:
        params = ", ".join(f"{k}={v}" for k, v in st["params"].items() if k != "explain")
        parts.append(st["pass"] + (f"({params})" if params else ""))
    return " + ".join(parts) or "-"


def markdown_table(results: list[dict[str, Any]], budget: str = "0.01") -> str:
    """The issue's table from the bench's JSON: per model the found best within ``budget``
    against the best hand-written (or sample) pipeline, and the targets it meets."""
    head = (
        "| model | studio best (steps) | speedup [rounds] | best hand-written | speedup [rounds] "
        "| ratio [rounds] | cos drop held-out | first within 5 % | ratio >= 1.0 | <= 90 s |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    lines, ratios = [head], []
    for r in results:
        if "skipped" in r:
            lines.append(f"| {r['model']} | skipped: {r['skipped']} |" + " |" * 8)
            continue
        s, ttb = r["summary"][budget], r.get("time_to_best") or {}
        ratio = s.get("ratio_best_over_hand")
        if ratio is not None:
            ratios.append(ratio)
        secs = ttb.get("seconds")
        lines.append(
            f"| {r['model']} | {_steps_label(s.get('best_steps'))} "
            f"| {fmt(s.get('best_speedup'))}x [{fmt(s.get('best_speedup_low'))}-"
            f"{fmt(s.get('best_speedup_high'))}] | {s.get('best_hand') or '-'} "
            f"| {fmt(s.get('best_hand_speedup'))}x [{fmt(s.get('best_hand_speedup_low'))}-"
            f"{fmt(s.get('best_hand_speedup_high'))}] | {fmt(ratio)} [{fmt(s.get('ratio_low'))}-"
            f"{fmt(s.get('ratio_high'))}] | {fmt(s.get('best_heldout_cosine_drop'), '.1e')} "
            f"| trial {ttb.get('trial', '-')} at {fmt(secs, '.0f')} s "
            f"| {'yes' if ratio is not None and ratio >= 1.0 else 'no'} "
            f"| {'yes' if secs is not None and secs <= 90 else 'no'} |"
        )
    if ratios:
        mean = sum(ratios) / len(ratios)
        lines.append(
            f"\nMean ratio over {len(ratios)} model(s): {mean:.2f} (target >= 1.2: "
            f"{'met' if mean >= 1.2 else 'not met'})."
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--models", default="bert-base,resnet50,efficientnet,decoder-prefill", help="MODELS keys"
    )
    p.add_argument("--budget", default="15m", help="search wall time per model (s or m)")
    p.add_argument("--trials", type=int, default=None)
    p.add_argument("--iters", type=int, default=30, help="timed calls per trial / per round")
    p.add_argument("--rounds", type=int, default=7, help="round-robin rounds of the contenders")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--allow", default="", help="the search's --allow (e.g. prune,distill)")
    p.add_argument(
        "--bf16",
        action="store_true",
        help="time the bf16 hand-written pipelines also on a CPU without bf16 kernels",
    )
    p.add_argument("--json", default=None)
    p.add_argument("--table-from", default=None, help="print the table of an earlier --json")
    args = p.parse_args()
    if args.table_from:
        print(markdown_table(json.loads(Path(args.table_from).read_text())))
        return 0
    b = args.budget.strip().lower()
    args.budget_s = float(b[:-1]) * 60 if b.endswith("m") else float(b.rstrip("s"))
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        for key in [k.strip() for k in args.models.split(",") if k.strip()]:
            r = bench_model(key, args, Path(tmp))
            results.append(r)
            print(f"\n== {key}")
            if "skipped" in r:
                print(f"  skipped: {r['skipped']}")
                if args.json:
                    Path(args.json).write_text(json.dumps(results, indent=2, default=str))
                continue
            print(
                f"  search: {r['trials']} trials in {r['search_wall_s']:.0f} s ({r['status']}); "
                f"prefix cache {r['cache']}"
            )
            ttb = r["time_to_best"]
            if ttb:
                print(
                    f"  time to best (within 5 %, max cosine drop 0.01): trial {ttb['trial']} "
                    f"{ttb['chain']} at {fmt(ttb['seconds'], '.0f')} s; best trial "
                    f"{ttb['best_trial']} {ttb['best_chain']} {fmt(ttb['best_speedup'])}x"
                )
            for row in r["rows"]:
                rng = (
                    f"[{fmt(row.get('speedup_low'))}-{fmt(row.get('speedup_high'))}]"
                    if row.get("speedup_low") is not None
                    else ""
                )
                print(
                    f"  {row['contender'][:64]:64s} {row['status']:11s} speedup "
                    f"{fmt(row.get('speedup'))}x {rng:15s} cos drop {fmt(row['cosine_drop'], '.1e')}"
                    + (f"  {row['error']}" if row["error"] else "")
                )
            for budget, s in r["summary"].items():
                print(
                    f"  max cosine drop {budget}: best found {s['best']} "
                    f"({fmt(s['best_speedup'])}x) vs best hand-written/sample "
                    f"{s['best_hand']} ({fmt(s['best_hand_speedup'])}x): "
                    f"ratio {fmt(s['ratio_best_over_hand'])} "
                    f"[{fmt(s.get('ratio_low'))}-{fmt(s.get('ratio_high'))}]"
                )
            if args.json:  # after every model: a bench stopped early keeps what finished
                Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    print("\n" + markdown_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
