"""Does every corpus model open in the studio? Load, graph, collapsed layout and profile.

For each real-architecture corpus model (accel.models.corpus) this does what opening it in the
studio does, through the same engine calls the workers make: load it (``load_model``), build
its graph (``graph_from_model``, as the inspect job does), lay out the collapsed view the graph
panel first shows (``default_expanded`` + ``GroupLayouts.layout``), and profile it layer by
layer (``profile_model``) — and says for each whether it worked, how long it took, and how
much of the forward the profile's layers account for. ONNX export is a cell of bench/corpus.py.

    .venv/bin/python bench/corpus_overview.py --size small
    .venv/bin/python bench/corpus_overview.py --models tv:resnet50 hf:llama_small

Writes bench/out/corpus_overview.md and .json (one model at a time: a partial run keeps what
it finished). Times are wall times on this machine, for orientation only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accel.models.corpus import CORPUS  # noqa: E402

OUT = ROOT / "bench" / "out"


def _timed(row: dict, key: str, fn: Any) -> Any:
    """Run ``fn``; record its seconds under ``key`` or the error (type and first line)."""
    t0 = time.perf_counter()
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - the finding is the error
        row[f"{key}_error"] = (
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        )
        row[f"{key}_traceback"] = traceback.format_exc()
        return None
    row[f"{key}_s"] = round(time.perf_counter() - t0, 2)
    return value


def overview(name: str, spec: str, threads: int | None) -> dict:
    from accel.graph import graph_from_model
    from accel.graph.expansion import default_expanded
    from accel.graph.layout import GroupLayouts
    from accel.models import load_model
    from accel.profile import profile_model

    row: dict[str, Any] = {"model": name, "spec": spec}
    model = _timed(row, "load", lambda: load_model(name, spec))
    if model is None:
        return row
    row["params_m"] = round(model.num_params / 1e6, 1)
    graph = _timed(row, "graph", lambda: graph_from_model(model))
    if graph is not None:
        row["nodes"], row["groups"] = len(graph.nodes), len(graph.groups)
        expanded = default_expanded(graph)
        lay = _timed(row, "layout", lambda: GroupLayouts(graph).layout(expanded))
        if lay is not None:
            row["visible_units"] = len(getattr(lay, "positions", {}) or {})
    prof = _timed(row, "profile", lambda: profile_model(model, iters=3, warmup=1, threads=threads))
    if prof is not None:
        d = prof.to_dict()
        row["profile_total_ms"] = d["total_ms"]
        row["profile_rows"] = len(d["rows"])
        row["coverage"] = d["coverage"]
    return row


def write(rows: list[dict], size: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus_overview.json").write_text(json.dumps(rows, indent=2))
    ok = {k: sum(1 for r in rows if f"{k}_s" in r) for k in ("load", "graph", "layout", "profile")}
    lines = [
        f"# Corpus overview ({size} inputs): load, graph, collapsed layout, profile",
        "",
        f"Models: {len(rows)}; loaded {ok['load']}, graph {ok['graph']}, "
        f"collapsed layout {ok['layout']}, profiled {ok['profile']}.",
        "",
        "| model | params (M) | load s | graph (nodes / groups) | graph s | layout s "
        "| profile s | profile rows | layers / forward | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cov = f"{100 * r['coverage']:.0f} %" if r.get("coverage") is not None else "-"
        errors = "; ".join(f"{k[:-6]}: {v}" for k, v in r.items() if k.endswith("_error"))
        lines.append(
            f"| {r['model']} | {r.get('params_m', '-')} | {r.get('load_s', '-')} "
            f"| {r.get('nodes', '-')} / {r.get('groups', '-')} | {r.get('graph_s', '-')} "
            f"| {r.get('layout_s', '-')} | {r.get('profile_s', '-')} "
            f"| {r.get('profile_rows', '-')} | {cov} | {errors} |"
        )
    (out / "corpus_overview.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(CORPUS), help="corpus names")
    ap.add_argument("--size", choices=("real", "small"), default="real")
    ap.add_argument("--threads", type=int, default=None, help="profile threads")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    rows: list[dict] = []
    for name in args.models:
        entry = CORPUS[name]
        spec = entry.input_spec if args.size == "real" else entry.small_spec
        print(f"== {name} ({spec})", flush=True)
        row = overview(name, spec, args.threads)
        rows.append(row)
        print(
            "   "
            + ", ".join(
                f"{k}={v}"
                for k, v in row.items()
                if k not in ("model", "spec") and not k.endswith("traceback")
            ),
            flush=True,
        )
        write(rows, args.size, Path(args.out))
    print(f"table: {Path(args.out) / 'corpus_overview.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
