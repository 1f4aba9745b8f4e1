"""Run history: `studio history`, `show`, `compare`, `rerun`, `tag`, `export-run`, `delete`.

Everything reads the store (``--db`` or the default database); ``rerun`` goes through the
worker pool like ``studio run``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
from typing import TYPE_CHECKING, Any

from studio.commands._common import add_trust_arguments
from studio.commands._common import open_repo as _repo
from studio.commands._run_detail import print_run
from studio.commands._table import fmt_duration, fmt_num, fmt_when, render_table
from studio.fmt import NOISY_MARK, intervals_overlap
from studio.tables import P50_HEADER, REF_HEADER, p50_cell, ref_cell, speedup_cell

if TYPE_CHECKING:
    from accel.timing.result import StepTiming
    from studio.store import RunFilter
    from studio.store.api import RunReader
    from studio.store.records import RunRecord


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="list recorded runs (newest first)")
    p.add_argument("search", nargs="*", help="words to find in names, tags, notes, model, recipe")
    p.add_argument("--status", action="append", default=[], help="only runs with this status")
    p.add_argument("--model", help="model source contains this")
    p.add_argument("--recipe", help="recipe name contains this (or a recipe hash prefix)")
    p.add_argument("--tag", action="append", default=[], help="runs with this tag (repeatable)")
    p.add_argument("--device", help="device starts with this (cpu, cuda...)")
    p.add_argument("--since", help="runs created on or after this date (YYYY-MM-DD)")
    p.add_argument("--limit", type=int, default=30, help="how many runs to list (default 30)")
    p.add_argument("--offset", type=int, default=0, help="skip this many runs first")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--searches", action="store_true", help="list recipe searches (studio optimize)")
    p.add_argument("--trials", metavar="SEARCH", help="only the trials of this search (id prefix)")
    p.set_defaults(func=history)

    p = sub.add_parser("show", help="show a run: steps, metrics, parity, artifacts")
    p.add_argument("run", help="run id (or a unique prefix of at least 4 characters)")
    p.add_argument("--json", action="store_true", help="print the run as JSON (see export-run)")
    p.set_defaults(func=show)

    p = sub.add_parser("compare", help="compare runs side by side, metric by metric")
    p.add_argument("runs", nargs="+", help="two or more run ids (or prefixes)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=compare)

    p = sub.add_parser("rerun", help="run a recorded run's recipe again (linked to it)")
    p.add_argument("run", help="run id (or prefix)")
    p.add_argument("--device", help="device for the new run (default: the old run's)")
    p.add_argument("--out", help="run folder for artifacts (default: a new one)")
    add_trust_arguments(p)
    p.set_defaults(func=rerun)

    p = sub.add_parser(
        "import-run", help="record a run the database could not save (unrecorded_run.json)"
    )
    p.add_argument("file", help="unrecorded_run.json, or the run folder holding it")
    p.set_defaults(func=import_run)

    p = sub.add_parser("tag", help="add (+TAG or TAG) or remove (-TAG) tags of a run; set notes")
    p.add_argument("run", help="run id (or prefix)")
    p.add_argument("tags", nargs="*", help="+tag / tag adds, -tag removes (use -- before -tag)")
    p.add_argument("--notes", help="replace the run's notes")
    p.add_argument("--name", help="rename the run")
    p.set_defaults(func=tag)

    p = sub.add_parser("export-run", help="write a run (steps, metrics, parity, ...) as JSON")
    p.add_argument("run", help="run id (or prefix)")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.set_defaults(func=export_run)

    p = sub.add_parser("delete", help="delete runs from the database")
    p.add_argument("runs", nargs="+", help="run ids (or prefixes)")
    p.add_argument("--files", action="store_true", help="also delete the runs' artifact files")
    p.set_defaults(func=delete)


def _run_arg(repo: RunReader, run_id: str) -> str:
    from studio.errors import UserError
    from studio.store import RunNotFound

    try:
        return repo.resolve_run_id(run_id)
    except RunNotFound as exc:
        raise UserError(str(exc)) from None


def history(args: argparse.Namespace) -> int:
    from studio.store.records import to_json

    if getattr(args, "searches", False):
        from studio.commands.optimize import list_searches

        return list_searches(args)
    f = _run_filter(args)
    with _repo(args) as repo:
        if getattr(args, "trials", None):
            from studio.commands.optimize import search_id_arg

            f = dataclasses.replace(f, search_id=search_id_arg(repo, args.trials))
        runs = repo.list_runs(f, limit=args.limit, offset=args.offset)
        total = repo.count_runs(f)
    if args.json:
        print(json.dumps([to_json(r) for r in runs], indent=2))
        return 0
    if not runs:
        print("no runs" + (" match" if total == 0 and args.search else ""))
        return 0
    print(_runs_table(runs))
    if total > args.offset + len(runs):
        print(f"... {total - args.offset - len(runs)} more (use --limit / --offset)")
    return 0


def _run_filter(args: argparse.Namespace) -> RunFilter:
    """The store's filter from `studio history`'s options; a bad status or date is the
    user's error."""
    from studio.errors import UserError
    from studio.store import RunFilter
    from studio.store.models import RUN_STATUSES

    for s in args.status:
        if s not in RUN_STATUSES:
            raise UserError(f"unknown status {s!r}; one of {', '.join(RUN_STATUSES)}")
    since = None
    if args.since:
        try:
            since = dt.datetime.fromisoformat(args.since)
        except ValueError:
            raise UserError(f"--since {args.since!r}: give a date such as 2026-01-31") from None
        if since.tzinfo is None:
            since = since.astimezone()
    return RunFilter(
        status=tuple(args.status),
        model=args.model,
        recipe=args.recipe,
        device=args.device,
        tags=tuple(args.tag),
        search=" ".join(args.search) or None,
        since=since,
    )


def _runs_table(runs: list[RunRecord]) -> str:
    """One row per run: id, when, status, model, recipe, device, time, tags, note."""
    rows = [
        [
            r.short_id,
            fmt_when(r.created_at),
            r.status,
            r.model_source or "-",
            r.recipe_name or (r.recipe_hash[:8] or "-"),
            r.device or "-",
            fmt_duration(r.duration_s),
            ",".join(r.tags) or "-",
            (r.name or r.notes or r.error).splitlines()[0][:40]
            if (r.name or r.notes or r.error)
            else "",
        ]
        for r in runs
    ]
    return render_table(
        ["run", "created", "status", "model", "recipe", "device", "time", "tags", "note"],
        rows,
        "lllllllll",
    )


def show(args: argparse.Namespace) -> int:
    with _repo(args) as repo:
        run_id = _run_arg(repo, args.run)
        if args.json:
            print(json.dumps(repo.export_run(run_id), indent=2))
            return 0
        d = repo.get_run(run_id)
    print_run(d)
    return 0


def compare(args: argparse.Namespace) -> int:
    from studio.errors import UserError
    from studio.generation_columns import compare_cells, sweep_settings

    if len(args.runs) < 2:
        raise UserError("give at least two runs to compare")
    with _repo(args) as repo:
        ids = [_run_arg(repo, r) for r in args.runs]
        cmp = repo.compare(ids)
    if args.json:
        print(json.dumps(_compare_json(cmp), indent=2))
        return 0
    heads = [d.run.short_id for d in cmp.runs]
    info = [
        ["", "status", *[d.status for d in cmp.runs]],
        ["", "model", *[d.run.model_source or "-" for d in cmp.runs]],
        ["", "recipe", *[d.run.recipe_name or "-" for d in cmp.runs]],
        ["", "device", *[d.run.device or "-" for d in cmp.runs]],
    ]
    lengths = [sweep_settings(d.recipe) for d in cmp.runs]
    if any(lengths):  # generation runs: their figures depend on these
        info.append(["", "prompt tokens", *[str(n[0]) if n else "-" for n in lengths]])
        info.append(["", "new tokens", *[str(n[1]) if n else "-" for n in lengths]])
    rows = []
    ties = False
    for (index, pass_name), per_run in cmp.timings.items():
        step = "original" if index < 0 else f"{index + 1} {pass_name}"
        cells = [speedup_cell(t) for t in per_run]
        if _within_noise(per_run):
            cells = [c + " =" if c != "-" else c for c in cells]
            ties = True
        rows.append([step, REF_HEADER, *[ref_cell(t) for t in per_run]])
        rows.append([step, P50_HEADER, *[p50_cell(t) for t in per_run]])
        rows.append([step, "speedup", *cells])
    for (index, pass_name, metric), values in cmp.rows.items():
        step = "original" if index < 0 else f"{index + 1} {pass_name}"
        gen = compare_cells(cmp.rows, index, pass_name, metric)  # TTFT, TPOT, tokens/s
        if gen is not None:
            if gen:
                rows.append([step, metric, *gen])
            continue
        rows.append([step, metric, *[fmt_num(v) for v in values]])
    for (index, pass_name), values in cmp.parity.items():
        step = f"{index + 1} {pass_name}"
        rows.append(
            [step, "parity", *[{True: "pass", False: "FAIL", None: "-"}[v] for v in values]]
        )
    rows.sort(key=lambda r: (r[0] != "original", r[0], r[1]))
    print(render_table(["step", "metric", *heads], info + rows, "ll" + "r" * len(heads)))
    if ties:
        print("= the speedups' 95% intervals overlap: the difference is within noise (a tie)")
    if any(r[1] == "speedup" and any(NOISY_MARK in str(c) for c in r[2:]) for r in rows):
        print(f"{NOISY_MARK} timed on a busy machine (or too scattered): see `studio show RUN`")
    return 0


def _compare_json(cmp: Any) -> dict[str, Any]:
    """`studio compare --json`: metric rows, parity verdicts and each step's timing per run."""
    from studio.store.values import json_safe

    return json_safe(
        {
            "runs": cmp.columns,
            "rows": [
                {"step": k[0], "pass": k[1], "metric": k[2], "values": v}
                for k, v in cmp.rows.items()
            ],
            "parity": [{"step": k[0], "pass": k[1], "passed": v} for k, v in cmp.parity.items()],
            "timings": [
                {"step": k[0], "pass": k[1], "values": [t.to_json() if t else None for t in v]}
                for k, v in cmp.timings.items()
            ],
        }
    )


def _within_noise(per_run: list[StepTiming | None]) -> bool:
    """Every pair of runs with an interval overlaps (and there are at least two)."""
    have = [t for t in per_run if t is not None and t.mode != "baseline" and t.speedup_bounds]
    if len(have) < 2:
        return False
    return all(intervals_overlap(a, b) for i, a in enumerate(have) for b in have[i + 1 :])


def rerun(args: argparse.Namespace) -> int:
    from studio.commands.run import run_job
    from studio.errors import UserError

    with _repo(args) as repo:
        run_id = _run_arg(repo, args.run)
        d = repo.get_run(run_id)
    from accel.job_specs import RunRecipeJob

    job = d.job_params or {}
    recipe_run = RunRecipeJob.kind
    if d.run.kind != recipe_run and job.get("kind", recipe_run) != recipe_run:
        raise UserError(f"run {d.run.short_id} is a {d.run.kind} job; only recipe runs re-run")
    if d.recipe is None:
        raise UserError(f"run {d.run.short_id} has no stored recipe to run again")
    old = dict(job.get("params") or {})
    # The stored recipe content, not the file: the file may have changed since. A model the
    # stored run was given goes into that recipe, not beside it: a database row is not the
    # person typing --model, so its code runs only with --trust-recipe-code, as a recipe's.
    recipe = dict(d.recipe)
    if isinstance(old.get("model"), str) and old["model"].strip():
        recipe["model"] = {**dict(recipe.get("model") or {}), "source": old["model"]}
    params: dict[str, Any] = {"recipe": recipe}
    params["device"] = args.device or old.get("device") or d.recipe.get("device") or d.run.device
    for opt in ("trust_pickle", "trust_recipe_code"):  # asked again: never carried over
        if getattr(args, opt, False):
            params[opt] = True
    if args.out:
        from pathlib import Path

        params["out"] = str(Path(args.out).resolve())
    source = str((recipe.get("model") or {}).get("source") or "")
    print(f"re-running {d.run.id} ({d.run.recipe_name or 'recipe'} on {source})")
    return run_job(
        args,
        params,
        model_source=source or None,
        recipe=recipe,
        parent_run_id=d.run.id,
        tags=d.run.tags,
    )


def import_run(args: argparse.Namespace) -> int:
    """Add a run kept in a file (the store failed while it ran) to the database."""
    from pathlib import Path

    from studio.errors import UserError
    from studio.run_records import FILE_NAME, RecordError, check_unrecorded
    from studio.store import StoreError

    path = Path(args.file)
    if path.is_dir():
        path = path / FILE_NAME
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    if not isinstance(record, dict):
        raise UserError(f"{path} is not a run record")
    try:
        check_unrecorded(record, path)
    except RecordError as exc:
        raise UserError(f"{path}: {exc}") from None
    with _repo(args) as repo:
        try:
            repo.check_writable()
            run_id = repo.import_unrecorded(record)
        except StoreError as exc:
            raise UserError(str(exc)) from None
    print(f"imported run {run_id} ({record.get('status')}) from {path}")
    return 0


def tag(args: argparse.Namespace) -> int:
    add = [t.lstrip("+") for t in args.tags if not t.startswith("-")]
    remove = [t[1:] for t in args.tags if t.startswith("-")]
    with _repo(args) as repo:
        run_id = _run_arg(repo, args.run)
        r = repo.update_run(
            run_id, add_tags=add, remove_tags=remove, notes=args.notes, name=args.name
        )
    print(f"run {r.short_id}: tags {', '.join(r.tags) or '-'}")
    return 0


def export_run(args: argparse.Namespace) -> int:
    with _repo(args) as repo:
        run_id = _run_arg(repo, args.run)
        doc = repo.export_run(run_id)
    text = json.dumps(doc, indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def delete(args: argparse.Namespace) -> int:
    with _repo(args) as repo:
        ids = [_run_arg(repo, r) for r in args.runs]
        for run_id in ids:
            removed = repo.delete_run(run_id, delete_files=args.files)
            extra = f" and {len(removed)} files" if args.files else ""
            print(f"deleted run {run_id[:8]}{extra}")
    return 0
