"""`studio optimize MODEL`: search for the fastest recipe within a parity budget.

Trials run in the local worker pool (or a Ray cluster with ``--cluster``), each recorded as
a run; a live line per trial, then the Pareto front; the best recipe within the constraints
goes to OUT/best.yaml (and OUT/best.py with ``--script``). Exit 0 when a recipe was found,
1 when no trial met the constraints (the closest ones and the gate each missed are shown),
130 when cancelled with Ctrl-C (finished trials are kept).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from studio.commands._generate import add_optimize_arguments, generate_settings
from studio.tables import TIMING_HEADERS, best_figure, timing_cells, trial_note

if TYPE_CHECKING:
    from studio.store.api import SearchStore


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "optimize",
        help="search for the fastest recipe within a parity budget (Optuna, local or Ray)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_goal_arguments(p)
    add_optimize_arguments(p)
    _add_budget_arguments(p)
    p.set_defaults(func=run)


def _add_goal_arguments(p: argparse.ArgumentParser) -> None:
    """The model, the device, the parity and accuracy budgets, the data and the objective."""
    p.add_argument("model", help="model source: zoo:NAME, file.onnx, pkg.mod:factory, ...")
    p.add_argument(
        "--input", dest="input_spec", help="input spec, e.g. 'x:float32[batch,3,224,224]'"
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    p.add_argument(
        "--max-cosine-drop",
        type=float,
        default=0.001,
        help="parity budget: 1 - min cosine similarity (default 0.001)",
    )
    p.add_argument(
        "--max-accuracy-drop", type=float, default=None, help="accuracy budget (needs --data)"
    )
    p.add_argument(
        "--data", default=None, help="labelled evaluation data (file.npz, file.pt, pkg.mod:fn)"
    )
    p.add_argument(
        "--calibration",
        default=None,
        help="calibration data for static quantization (default: synthetic)",
    )
    p.add_argument(
        "--objective",
        default="latency",
        choices=["latency", "throughput", "size", "tokens_per_s", "ttft"],
        help="latency/throughput/size of a forward call, or for decoder LMs generating: "
        "tokens_per_s or ttft (time to first token), gated on teacher-forced logits cosine",
    )


def _add_budget_arguments(p: argparse.ArgumentParser) -> None:
    """The time and trial budget, the passes searched, where trials run and the outputs."""
    p.add_argument("--budget", default="15m", help="wall-time budget: 90s, 15m, 1h (default 15m)")
    p.add_argument("--trials", type=int, default=None, help="stop after N trials")
    p.add_argument(
        "--allow",
        default="",
        help="passes that change weights, allowed: prune,distill (train the pruned model "
        "towards the original's outputs, bounded, counted in the budget),qat; and "
        "sensitivity: a sensitivity "
        "analysis after the first seeds (its time counts in the budget) gives the torch quantization passes "
        "exclude sets (none, top-1, top-3, top-10%% most sensitive layers) to search, and the "
        "OpenVINO / ONNX Runtime quantizers a set by measured cost (sensitive layers int8 "
        "barely speeds up)",
    )
    p.add_argument("--passes", default=None, help="only these passes (comma-separated names)")
    p.add_argument("--exclude", default="", help="never these passes (comma-separated names)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.add_argument(
        "--threads", type=int, default=None, help="threads per trial (timing and Ray num_cpus)"
    )
    p.add_argument("--iters", type=int, default=30, help="timed iterations per trial (default 30)")
    p.add_argument(
        "--trial-timeout",
        type=float,
        default=600.0,
        help="stop a trial after SECONDS (default 600)",
    )
    p.add_argument(
        "--cluster", default=None, help="Ray cluster: HOST:PORT, ray://HOST:PORT or auto"
    )
    p.add_argument(
        "--artifacts",
        default=None,
        help="folder for trial artifacts every node can reach (with --cluster)",
    )
    p.add_argument("--out", required=True, help="output folder: best.yaml, search.json, trials/")
    p.add_argument(
        "--script", action="store_true", help="also export the best recipe as OUT/best.py"
    )
    p.add_argument("--trust-pickle", action="store_true", help="allow full unpickling of .pt files")


def parse_duration(text: str) -> float:
    """'90s', '15m', '1h', '1h30m', '300' (seconds) -> seconds."""
    from studio.errors import UserError

    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([hms])", t)
    if not parts or "".join(f"{a}{b}" for a, b in parts) != t.replace(" ", ""):
        raise UserError(f"--budget {text!r}: write it like 90s, 15m, 1h or 1h30m")
    return sum(float(a) * {"h": 3600, "m": 60, "s": 1}[b] for a, b in parts)


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def check_options(args: argparse.Namespace) -> None:
    """Bad numbers are refused naming the option, before anything starts."""
    from studio.errors import UserError

    if args.budget and parse_duration(args.budget) <= 0:
        raise UserError(f"--budget {args.budget!r}: give a time above zero, like 90s or 15m")
    positive = {"--trial-timeout": args.trial_timeout, "--trials": args.trials}
    positive.update({"--iters": args.iters, "--threads": args.threads})
    for option, value in positive.items():
        if value is not None and not value > 0:
            raise UserError(f"{option} must be above zero, got {value:g}")


def build_config(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from accel.search import SearchConfig

    check_options(args)

    data: dict[str, Any] = {}
    if args.data:
        data["eval"] = args.data
    if args.calibration:
        data["calibration"] = args.calibration
    return SearchConfig(
        model=args.model,
        input_spec=args.input_spec,
        device=args.device,
        trust_pickle=args.trust_pickle,
        max_cosine_drop=args.max_cosine_drop,
        max_accuracy_drop=args.max_accuracy_drop,
        data=data,
        objective=args.objective,
        budget_s=parse_duration(args.budget) if args.budget else None,
        max_trials=args.trials,
        allow=_names(args.allow),
        passes=_names(args.passes) or None,
        exclude=_names(args.exclude),
        seed=args.seed,
        out_dir=str(Path(args.out).resolve()),
        artifacts_dir=str(Path(args.artifacts).resolve()) if args.artifacts else None,
        trial_timeout_s=args.trial_timeout,
        bench_iters=args.iters,
        bench_threads=args.threads,
        generate=_generate_settings(args),
    )


def _generate_settings(args: argparse.Namespace) -> dict[str, int]:
    from accel.generate.settings import GenerateError
    from studio.errors import UserError

    try:
        return generate_settings(args)
    except GenerateError as exc:
        raise UserError(str(exc)) from None


def trial_row(t: Any) -> list[Any]:
    """One trial's row: its timing cells (the original's p50 and the trial's from the same
    rounds, the speedup) from its StepTiming (studio.tables)."""
    from studio.commands._table import fmt_bytes

    m = t.metrics
    drop = m.get("cosine_drop")
    status = t.status if t.status != "gate_failed" else "gate"
    return [
        t.number,
        t.label + _exclude_note(t.steps),
        status,
        *timing_cells(t.timing),
        "-" if drop is None else f"{drop:.2e}",
        fmt_bytes(m.get("size_bytes")) if m.get("size_bytes") else "-",
        t.reused_steps or "",
        trial_note(t)[:70],
    ]


def trial_line(t: Any) -> str:
    """A finished trial as one line of the live log, its cells named by their headers."""
    cell = dict(zip(HEADERS, trial_row(t), strict=True))
    ref, p50, speedup = (cell[h] for h in TIMING_HEADERS)
    return (
        f"trial {cell['#']}: {cell['chain']}  {cell['status']}  ref p50 {ref} ms  p50 {p50} ms"
        f"  speedup {speedup}  cos drop {cell['cos drop']}  size {cell['size']}"
        + (f"  (reused {t.reused_steps} step(s))" if t.reused_steps else "")
        + (f"  {cell['note']}" if cell["note"] else "")
    )


def _exclude_note(steps: list[dict[str, Any]]) -> str:
    """' (float: a, b +6)' when a step keeps layers in float (--allow sensitivity's sets)."""
    kept = [n for s in steps for n in (s.get("params") or {}).get("exclude") or []]
    if not kept:
        return ""
    more = f" +{len(kept) - 2}" if len(kept) > 2 else ""
    return f" (float: {', '.join(kept[:2])}{more})"


HEADERS = ["#", "chain", "status", *TIMING_HEADERS, "cos drop", "size", "reused", "note"]


def run(args: argparse.Namespace) -> int:
    from accel.errors import AccelError
    from accel.search import SearchError
    from studio.commands._common import open_repo as _repo
    from studio.errors import UserError
    from studio.optimize import SearchCancelled, SearchThread

    config = build_config(args)
    try:
        config.validate()
    except SearchError as exc:
        raise UserError(str(exc)) from None
    repo = _repo(args)
    t0 = time.monotonic()
    limit = []
    if config.max_trials:
        limit.append(f"{config.max_trials} trials")
    if config.budget_s:
        limit.append(f"{config.budget_s / 60:g} min")

    def on_start(search_id: str, where: str) -> None:
        print(
            f"search {search_id[:12]}: {config.model} on {config.device}, objective "
            f"{config.objective}, max cosine drop {config.max_cosine_drop:g}, "
            f"budget {' / '.join(limit)}",
            flush=True,
        )
        print(f"trials run in the {where}", flush=True)
        if "sensitivity" in config.allow:
            print(
                "sensitivity analysis after the first seeds (exclude sets for the torch "
                "quantization passes; its time counts in the budget) ...",
                flush=True,
            )

    def on_trial(t: Any) -> None:
        el = time.monotonic() - t0
        if t.status == "running":
            print(f"  [{el:6.0f}s] trial {t.number}: {t.label} ...", flush=True)
            return
        print(f"  [{el:6.0f}s] {trial_line(t)}", flush=True)

    th = SearchThread(
        config,
        repo=repo,
        cluster=args.cluster,
        on_trial=on_trial,
        script=args.script,
        on_start=on_start,
    ).start()
    interrupted = wait_for_search(th)
    if th.error is not None and not isinstance(th.error, SearchCancelled):
        if isinstance(th.error, AccelError):
            raise UserError(str(th.error)) from None
        raise th.error
    if th.outcome is None:  # cancelled and still winding down after CANCEL_WAIT_S
        print("the search was cancelled; finished trials are in the database", file=sys.stderr)
        return 130
    return report(th.outcome, interrupted, trust_pickle=bool(args.trust_pickle))


# After Ctrl-C: how long to wait for the running trial to stop (the pool cancels it, then
# terminates and kills its worker's process group within a few seconds).
CANCEL_WAIT_S = 30.0


def wait_for_search(th: Any) -> bool:
    """Wait for the search thread; Ctrl-C cancels it (finished trials are kept) and waits for
    it to wind down. Returns True when it was interrupted. More Ctrl-Cs only say so."""
    try:
        while not th.join(0.2):
            pass
        return False
    except KeyboardInterrupt:
        pass
    print("cancelling the search (finished trials are kept) ...", file=sys.stderr, flush=True)
    th.cancel()
    if getattr(th, "inspecting", False):
        # No worker started and nothing stored yet: the inspection (seconds for a large
        # model) stops with this process; the thread checks the cancel before going on.
        return True
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        try:
            if th.join(0.2):
                break
        except KeyboardInterrupt:
            print("still stopping the running trial ...", file=sys.stderr, flush=True)
    return True


def report(outcome: Any, interrupted: bool = False, trust_pickle: bool = False) -> int:
    from studio.commands._table import render_table

    res = outcome.result
    print()
    n_ok = sum(1 for t in res.trials if t.status == "ok")
    print(
        f"{len(res.trials)} trials in {res.wall_s:.0f} s ({n_ok} within the constraints); "
        f"prefix cache: {res.cache.get('hits', 0)} trial(s) reused "
        f"{res.cache.get('reused_steps', 0)} built step(s), {res.cache.get('stored', 0)} stored"
    )
    sens = res.space.get("sensitivity")
    if sens is not None:
        print(_sensitivity_line(sens))
    for name, why in (res.space.get("ruled_out") or {}).items():
        print(f"{name}: {why}")
    if res.front:
        print("\nPareto front (objective, parity error, size):")
        print(render_table(HEADERS[:-1], [trial_row(res.trial(n))[:-1] for n in res.front]))
    if res.reason:
        print(f"\n{res.reason}")
    if res.final is not None:
        print(final_retime_text(res))
    if res.best is not None:
        b = res.trial(res.best)
        print(f"\nbest within the constraints: trial {b.number} {b.label}{best_figure(res)}")
        for key in ("best", "script", "search"):
            if key in outcome.files:
                print(f"  {key}: {outcome.files[key]}")
        if trust_pickle and "best" in outcome.files:
            print(
                "  the model needs unpickling, which a recipe cannot allow by itself: "
                f"studio run {outcome.files['best']} --trust-pickle"
            )
    else:
        print(f"\n  search: {outcome.files.get('search')}")
    if res.status == "cancelled" or interrupted:
        return 130
    return 0 if res.best is not None else 1


def final_retime_text(res: Any) -> str:
    """The final re-timing: each re-timed trial's own figure beside its figure from the one
    side-by-side measurement, or why there is none."""
    final = res.final
    head = "\nfinal side-by-side re-timing of trials " + ", ".join(str(n) for n in final.trials)
    if not final.done:
        return f"{head}: not done ({final.reason}); the best is chosen on the trials' own figures"
    lines = [f"{head} with the original, in one measurement ({final.duration_s:.0f} s):"]
    for n in final.trials:
        t = res.trial(n)
        own = t.metrics.get("speedup")
        own_text = "-" if own is None else f"{own:.2f}x"
        ft = final.timings.get(n)
        if ft is None or ft.speedup is None:
            side = "not timed"
        else:
            side = f"{ft.speedup:.2f}x [{ft.speedup_low:.2f}-{ft.speedup_high:.2f}]"
        mark = "  <- chosen" if n == final.winner else ""
        lines.append(
            f"  trial {n} {t.label}: own measurement {own_text}, side by side {side}{mark}"
        )
    if final.reason:
        lines.append(f"  {final.reason}")
    lines.append("  (the trial table's speedups are each trial's own measurement)")
    return "\n".join(lines)


def _sensitivity_line(sens: dict[str, Any]) -> str:
    if "pass" not in sens:
        return f"sensitivity: no exclude sets ({sens.get('reason', 'nothing to analyse')})"
    sample = f" of {sens['analysed'] + sens['not_analysed']}" if sens["not_analysed"] else ""
    line = (
        f"sensitivity: {sens['pass']} ({sens['method']} method) on {sens['analysed']}{sample} "
        f"layers took {sens['duration_s']:.1f} s of the budget; most sensitive: "
        f"{', '.join(sens['ranking'][:3])}"
    )
    for name, sets in sens["sets"].items():
        line += f"\n  {name} searches exclude sets: {', '.join(sets)}"
    for name, why in sens["skipped"].items():
        line += f"\n  {name}: no exclude sets ({why})"
    return line


def search_id_arg(repo: SearchStore, prefix: str) -> str:
    from studio.errors import UserError
    from studio.store import RunNotFound

    try:
        return repo.get_search(prefix).id
    except RunNotFound as exc:
        raise UserError(str(exc.args[0] if exc.args else exc)) from None


def _final_mark(summary: dict[str, Any]) -> str:
    """' 5.40x (final side by side)' when the final re-timing chose the stored best."""
    final = summary.get("final") or {}
    t = (final.get("timings") or {}).get(str(summary.get("best")))
    if not final.get("done") or not t or t.get("speedup") is None:
        return ""
    return f" {t['speedup']:.2f}x (final side by side)"


def list_searches(args: argparse.Namespace) -> int:
    """`studio history --searches`: one line per search with its best trial."""
    import json

    from studio.commands._common import open_repo as _repo
    from studio.commands._table import render_table
    from studio.store.records import to_json

    with _repo(args) as repo:
        searches = repo.list_searches(limit=args.limit)
    if args.json:
        print(json.dumps([to_json(s) for s in searches], indent=2))
        return 0
    if not searches:
        print("no searches")
        return 0
    rows = []
    for s in searches:
        summ = s.summary
        best = summ.get("best")
        best_run = (summ.get("trial_runs") or {}).get(str(best)) if best is not None else None
        rows.append(
            [
                s.short_id,
                s.created_at.astimezone().strftime("%Y-%m-%d %H:%M"),
                s.status,
                s.model_source,
                s.device,
                s.objective,
                s.trials,
                "-"
                if best is None
                else f"#{best} run {str(best_run or '')[:8]}{_final_mark(summ)}",
                f"{summ['wall_s']:.0f} s" if summ.get("wall_s") is not None else "-",
            ]
        )
    print(
        render_table(
            [
                "search",
                "created",
                "status",
                "model",
                "device",
                "objective",
                "trials",
                "best",
                "time",
            ],
            rows,
            "llllllrll",
        )
    )
    print("trials of a search: studio history --trials SEARCH")
    return 0
