"""Per-layer sensitivity at real sizes: the full method against the layer-local one, and a
``max_layers`` sample (issue 13, item 4).

For one model and a layer-local pass (quantize_dynamic_int8 by default), rounds alternate
the order of the full method (a model copy and a whole-model pass per layer) and the local
method (the layer quantized alone and swapped into one working copy). The script prints the
median wall time of each, their ratio, and whether the two reports agree: same ranking and
the largest metric difference. A ``--max-layers`` run shows the cost of a sample and where
its layers sit in the full ranking.

    .venv/bin/python bench/bench_sensitivity.py                          # hf:roberta_base, seq 128
    .venv/bin/python bench/bench_sensitivity.py --model zoo:transformer --rounds 3
    .venv/bin/python bench/bench_sensitivity.py --input 'input_ids:int64[batch,seq]{3..50265};
        batch=1..32:1; seq=1..512:16' --max-layers 16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("ACCEL_SAVE_STEP_MODELS", "0")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="hf:roberta_base")
    ap.add_argument("--input", dest="input_spec", help="input spec (default: the model's own)")
    ap.add_argument("--pass", dest="pass_name", default="quantize_dynamic_int8")
    ap.add_argument("--data", default="synthetic(batches=2)")
    ap.add_argument("--rounds", type=int, default=1, help="full/local pairs, order alternating")
    ap.add_argument("--max-layers", type=int, default=16, help="0: no sample run")
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args(argv)

    from accel.models import load_model
    from accel.sensitivity import analyze_sensitivity

    model = load_model(args.model, args.input_spec)
    times: dict[str, list[float]] = {"full": [], "local": []}
    reports = {}
    for r in range(args.rounds):
        order = ("full", "local") if r % 2 == 0 else ("local", "full")
        for method in order:
            t = time.perf_counter()
            reports[method] = analyze_sensitivity(model, args.pass_name, args.data, method=method)
            times[method].append(time.perf_counter() - t)
            print(f"round {r + 1}: {method} {times[method][-1]:.1f} s", flush=True)
    full, local = reports["full"], reports["local"]
    by_name = {x.name: x for x in full.layers}
    diff_abs = max(abs(x.max_abs - by_name[x.name].max_abs) for x in local.layers)
    diff_cos = max(abs(x.cosine - by_name[x.name].cosine) for x in local.layers)
    out = {
        "model": args.model,
        "input_spec": str(model.input_spec),
        "pass": args.pass_name,
        "layers": len(full.layers),
        "full_s": statistics.median(times["full"]),
        "local_s": statistics.median(times["local"]),
        "same_ranking": full.ranking() == local.ranking(),
        "max_abs_diff": diff_abs,
        "cosine_diff": diff_cos,
    }
    out["speedup"] = out["full_s"] / out["local_s"]
    if args.max_layers:
        t = time.perf_counter()
        sample = analyze_sensitivity(model, args.pass_name, args.data, max_layers=args.max_layers)
        pos = {n: i for i, n in enumerate(full.ranking())}
        out["sample"] = {
            "max_layers": args.max_layers,
            "seconds": time.perf_counter() - t,
            "positions_in_full_ranking": [pos[n] for n in sample.ranking()],
            "top3_same": sample.ranking()[:3] == full.ranking()[:3],
        }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
