"""The pass x model matrix on the real-architecture corpus (accel.models.corpus).

Every pass on every corpus model (each cell on a fresh copy of the original; ONNX passes on
the model's ONNX export): outcome (ok / n/a with the reason / refused / crash), interleaved
speedup over eager with its interval, parity against the original, build time, and for
fold_batchnorm the BatchNorm layers folded of those present. Writes bench/out/corpus.md
(readable table) and bench/out/corpus.json, one model at a time (a partial run keeps what it
finished). Usage:

    .venv/bin/python bench/corpus.py                          # all models, real input sizes
    .venv/bin/python bench/corpus.py --size small             # the same models at small inputs
    .venv/bin/python bench/corpus.py --models hf:mobilenet_v2 hf:llama_small --skip compile
    .venv/bin/python bench/corpus.py --size small --no-timing   # outcomes and parity only

tv: and timm: models need a working torchvision (the ``corpus`` extra; timm imports it);
where it cannot be imported, their rows say why. The CPU build of torch 2.13 that CI installs
has no matching torchvision wheel on PyPI (its wheels need libtorch_cuda); the tv: and timm:
rows come from a second virtual environment with ``pip install torch==2.14.1
torchvision==0.29.1 timm diffusers transformers`` (a CUDA build, run on the CPU) and
``pip install -e .``. hf: and diffusers: models run in the project's own environment.
An entry with a ``padding_mask`` (hf:bert_base_padded) is also checked on padded rows of another
sequence length; a model that only runs at the example's shape is a crash there.
bench/corpus_overview.py checks load, graph and profile. ``--merge DIR [DIR ...]`` writes one
table (with a summary per family) from the corpus.json of runs in several environments:

    .venv/bin/python bench/corpus.py --merge out/hf out/tv --out out/union
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accel.corpus_check import Cell, check_model  # noqa: E402
from accel.errors import ModelLoadError  # noqa: E402
from accel.models.corpus import CORPUS  # noqa: E402
from accel.passes import pass_names  # noqa: E402

OUT = ROOT / "bench" / "out"


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _cell_text(c: Cell) -> str:
    if c.outcome == "ok":
        text = f"ok {_fmt(c.speedup, '.2f')}x"
        if c.parity_passed is False:
            text += " (parity FAIL)"
        if c.pass_name == "fold_batchnorm":
            text += f", folded {c.details.get('folded', '?')}"
            left = c.details.get("not_folded")
            if left:
                text += f" ({len(left)} left)"
        return text
    return c.outcome


OUTCOMES = ("ok", "n/a", "refused", "crash")


def _counts(cells: list[dict]) -> tuple[dict[str, int], int]:
    counts = {k: sum(c["outcome"] == k for c in cells) for k in OUTCOMES}
    return counts, counts["ok"] + counts["refused"] + counts["crash"]


def family_summary(rows: list[dict]) -> list[str]:
    """One line per model family (the name's prefix) and a total: ok of applicable cells,
    refused, crash, models not loaded."""
    families: dict[str, list[dict]] = {}
    for r in rows:
        families.setdefault(r["model"].split(":", 1)[0], []).append(r)
    lines = [
        "| family | models | ok / applicable | refused | crash | not loaded |",
        "|---|---|---|---|---|---|",
    ]
    for fam, rs in [*sorted(families.items()), ("all", rows)]:
        counts, applicable = _counts([c for r in rs for c in r["cells"]])
        pct = f" ({100 * counts['ok'] / applicable:.1f} %)" if applicable else ""
        lines.append(
            f"| {fam} | {len(rs)} | {counts['ok']}/{applicable}{pct} | {counts['refused']} "
            f"| {counts['crash']} | {sum(1 for r in rs if r.get('load_error'))} |"
        )
    return lines


def write_outputs(rows: list[dict], size: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus.json").write_text(json.dumps(rows, indent=2))
    cells = [c for r in rows for c in r["cells"]]
    counts, applicable = _counts(cells)
    parity_fail = sum(c["outcome"] == "ok" and c["parity_passed"] is False for c in cells)
    lines = [
        f"# Corpus matrix ({size} inputs)",
        "",
        f"Cells: {len(cells)}; ok {counts['ok']}, not applicable {counts['n/a']}, "
        f"refused {counts['refused']}, crash {counts['crash']}; "
        f"ok of applicable: {counts['ok']}/{applicable}"
        + (f" ({100 * counts['ok'] / applicable:.0f} %)" if applicable else "")
        + f"; ok but outside the default parity gate: {parity_fail}. Models not loaded: "
        f"{sum(1 for r in rows if r.get('load_error'))}.",
        "",
        *family_summary(rows),
        "",
        "Speedup: eager original / candidate, median of interleaved rounds (accel.timing).",
        "",
        "| model | params (M) | pass | outcome | speedup [95% CI] | parity | build s | reason / notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("load_error"):
            lines.append(f"| {r['model']} | - | (load) | not loaded | | | | {r['load_error']} |")
            continue
        for c in r["cells"]:
            ci = (
                f"{_fmt(c['speedup'], '.2f')} [{_fmt(c['speedup_low'], '.2f')}-"
                f"{_fmt(c['speedup_high'], '.2f')}]"
                if c["speedup"] is not None
                else "-"
            )
            parity = {True: "pass", False: "FAIL", None: "-"}[c["parity_passed"]]
            notes = c["reason"]
            if c["pass_name"] == "fold_batchnorm" and c["outcome"] == "ok":
                notes = (
                    f"folded {c['details'].get('folded')} of {r.get('batchnorm', '?')} BatchNorm"
                )
            elif c["outcome"] == "ok" and c["parity_passed"] is False:
                notes = c["parity"][:160]
            notes = notes.replace("|", "/").replace("\n", " ")
            lines.append(
                f"| {r['model']} | {r.get('params_m', 0):.1f} | {c['pass_name']} | {c['outcome']} "
                f"| {ci} | {parity} | {_fmt(c['build_s'], '.1f')} | {notes} |"
            )
    (out / "corpus.md").write_text("\n".join(lines) + "\n")


def merge(dirs: list[str], size: str, out: Path) -> int:
    by_model: dict[str, dict] = {}
    for d in dirs:
        path = Path(d) / "corpus.json"
        if not path.is_file():
            print(f"no corpus.json in {d}: give the --out folder of a corpus run", file=sys.stderr)
            return 2
        for row in json.loads(path.read_text()):
            by_model[row["model"]] = row
    order = {name: i for i, name in enumerate(CORPUS)}
    rows = sorted(by_model.values(), key=lambda r: order.get(r["model"], len(order)))
    write_outputs(rows, size, out)
    missing = [n for n in CORPUS if n not in by_model]
    print("\n".join(family_summary(rows)))
    if missing:
        print(f"not in these runs: {', '.join(missing)}")
    print(f"table: {out / 'corpus.md'}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(CORPUS), help="corpus names")
    ap.add_argument("--passes", nargs="*", default=None, help="pass names (default: all)")
    ap.add_argument("--skip", nargs="*", default=[], help="pass names to leave out")
    ap.add_argument("--size", choices=("real", "small"), default="real")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument(
        "--no-timing",
        action="store_true",
        help="outcomes and parity only, no interleaved speedup (faster; the "
        "speedup column shows -)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch/ORT threads while timing (default: physical cores; 1 on a shared machine)",
    )
    ap.add_argument(
        "--merge",
        nargs="+",
        metavar="DIR",
        help="write one table from these runs' corpus.json (a model in several: the last run "
        "wins) instead of running",
    )
    args = ap.parse_args()
    if args.merge:
        return merge(args.merge, args.size, Path(args.out))
    import torch

    passes = [p for p in (args.passes or pass_names()) if p not in args.skip]
    rows: list[dict] = []
    t_all = time.perf_counter()
    for name in args.models:
        entry = CORPUS[name]
        spec = entry.input_spec if args.size == "real" else entry.small_spec
        row: dict = {"model": name, "spec": spec, "cells": []}
        rows.append(row)
        t0 = time.perf_counter()
        print(f"== {name} ({spec})", flush=True)

        def on_cell(c: Cell, row: dict = row) -> None:
            print(f"   {c.pass_name:<24} {_cell_text(c):<28} {c.reason[:110]}", flush=True)
            row["cells"].append(c.to_dict())

        try:
            from accel.models import load_model

            lm = load_model(name, spec)
            row["params_m"] = lm.num_params / 1e6
            row["batchnorm"] = sum(
                isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in lm.module.modules()
            )
            del lm
            with tempfile.TemporaryDirectory() as d:
                timing = {"rounds": 3, "iters": 6, "warmup": 1, "min_time_s": 0}
                if args.threads:
                    timing["threads"] = args.threads
                    torch.set_num_threads(args.threads)
                check_model(
                    name,
                    spec,
                    passes,
                    work_dir=d,
                    on_cell=on_cell,
                    timing=timing,
                    time_it=not args.no_timing,
                )
        except ModelLoadError as exc:
            row["load_error"] = str(exc)
            print(f"   not loaded: {exc}", flush=True)
        row["seconds"] = time.perf_counter() - t0
        write_outputs(rows, args.size, Path(args.out))
    print(f"done in {time.perf_counter() - t_all:.0f} s; table: {Path(args.out) / 'corpus.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
