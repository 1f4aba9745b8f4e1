"""`studio run RECIPE`: run a recipe in a worker process, record it in the store, print
a live line per step and a summary table. Ctrl-C cancels the run (recorded as cancelled)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from studio.commands._common import add_trust_arguments, open_repo


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a recipe (benchmark + parity per step), recorded in the db")
    p.add_argument("recipe", help="recipe file (.yaml / .json)")
    p.add_argument("--model", help="override the recipe's model source")
    p.add_argument("--device", help="override the recipe's device (cpu, cuda, cuda:N)")
    p.add_argument("--out", help="run folder for artifacts (default: runs/<time>-<name>)")
    p.add_argument("--tag", action="append", default=[], help="tag the run (repeatable)")
    p.add_argument("--notes", default="", help="notes stored with the run")
    p.add_argument("--timeout", type=float, default=None, help="stop the run after SECONDS")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (the model form each step receives and produces) without loading "
        "the model; exit 1 when a step cannot run where it is",
    )
    p.add_argument(
        "--prompt-tokens",
        metavar="N[,N...]",
        help="generation recipes: prompt length; several (e.g. 32,128,512) run the recipe once "
        "per length, for History's and Compare's tokens/s and TTFT against prompt length",
    )
    p.add_argument(
        "--new-tokens", type=int, metavar="M", help="generation recipes: tokens generated"
    )
    add_trust_arguments(p)
    p.set_defaults(func=run)


def generate_overrides(args: argparse.Namespace) -> list[dict[str, int] | None]:
    """One entry per run: ``--prompt-tokens``' lengths (with ``--new-tokens``), or [None]."""
    from studio.errors import UserError

    new = {} if args.new_tokens is None else {"new_tokens": args.new_tokens}
    if not args.prompt_tokens:
        return [new or None]
    lengths = []
    for part in str(args.prompt_tokens).split(","):
        if not part.strip().isdigit() or int(part) < 1:
            raise UserError(
                "--prompt-tokens takes whole numbers of at least 1 separated by commas, e.g. "
                f"32,128,512; got {args.prompt_tokens!r}"
            )
        if int(part) not in lengths:
            lengths.append(int(part))
    return [{"prompt_tokens": n, **new} for n in lengths]


def run(args: argparse.Namespace) -> int:
    from accel.generate.settings import GenerateError, with_generate_settings
    from accel.plan import plan
    from accel.recipe import load_recipe
    from studio.errors import UserError
    from studio.workers.entry import load_plugin
    from studio.workers.pool_jobs import env_plugins

    for plugin in env_plugins():  # their passes must validate here too
        load_plugin(plugin)
    recipe_path = Path(args.recipe).resolve()
    recipe = load_recipe(recipe_path)  # a bad recipe fails here, before any worker starts
    if args.model:
        recipe = recipe.model_copy(
            update={"model": recipe.model.model_copy(update={"source": args.model})}
        )
    sweep = generate_overrides(args)
    try:  # so do generation settings this recipe cannot take
        recipes = [with_generate_settings(recipe, o) if o else recipe for o in sweep]
    except GenerateError as exc:
        raise UserError(_as_options(str(exc))) from None
    preflight = plan(recipes[0], device=args.device)  # so does an impossible step order
    if args.dry_run:
        print("\n".join(preflight.lines()))
        if not preflight.ok:
            print("\n".join(f"error: {e}" for e in preflight.errors), file=sys.stderr)
            return 1
        return 0
    if not preflight.ok:
        raise UserError("the recipe cannot run: " + "; ".join(preflight.errors))
    params = _job_params(args, recipe_path, recipe)
    codes, ids = [], []
    for override, one in zip(sweep, recipes, strict=True):
        if len(sweep) > 1:
            print(f"\n== prompt {one.benchmark.prompt_tokens} tokens ==", flush=True)
        job = {**params, "generate": override} if override else params
        if len(sweep) > 1 and args.out:  # one folder per length
            job["out"] = str(Path(args.out).resolve() / f"prompt_{one.benchmark.prompt_tokens}")
        code = run_job(
            args,
            job,
            model_source=args.model or recipe.model.source,
            recipe=one.to_dict(),
            tags=args.tag,
            notes=args.notes,
            timeout_s=args.timeout,
            ids=ids,
        )
        codes.append(code)
        if code == 130:  # Ctrl-C ends the sweep too
            break
    if len(ids) > 1:
        print(f"\nthe {len(ids)} runs side by side: studio compare {' '.join(i[:8] for i in ids)}")
    return next((c for c in codes if c), 0)


def _as_options(message: str) -> str:
    """A generation setting's error in the words of this command's options."""
    for name in ("prompt_tokens", "new_tokens"):
        option = "--" + name.replace("_", "-")
        message = message.replace(f"benchmark.{name}", option).replace(name, option)
    return message


def _job_params(args: argparse.Namespace, recipe_path: Path, recipe: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"recipe": str(recipe_path), "device": args.device or recipe.device}
    if args.model:
        params["model"] = args.model
    if args.trust_pickle:
        params["trust_pickle"] = True
    if args.trust_recipe_code:
        params["trust_recipe_code"] = True
    if args.out:
        params["out"] = str(Path(args.out).resolve())
    return params


def run_job(
    args: argparse.Namespace,
    params: dict[str, Any],
    *,
    model_source: str | None,
    recipe: dict[str, Any] | None,
    parent_run_id: str | None = None,
    tags: list[str] | None = None,
    notes: str = "",
    timeout_s: float | None = None,
    ids: list[str] | None = None,
) -> int:
    """Submit a run_recipe job to a one-job pool, print it live, return the exit code.
    ``params`` are checked as the worker will check them (``RunRecipeJob``) before any work."""
    from accel.job_specs import RunRecipeJob
    from studio.commands._runprint import RunPrinter
    from studio.errors import UserError
    from studio.store import StoreError
    from studio.workers import WorkerPool

    params = RunRecipeJob.from_params(params).to_params()
    repo = open_repo(args)
    try:  # before any work: a run that cannot be recorded does not start
        repo.check_writable()
    except StoreError as exc:
        repo.close()
        raise UserError(str(exc)) from None
    printer = RunPrinter()
    device = str(params.get("device") or "auto")
    pool = WorkerPool(repo, cpu_workers=1, devices=[] if device == "cpu" else None)
    pool.subscribe(lambda update: _print_update(printer, update))
    try:
        handle = pool.submit(
            RunRecipeJob.kind,
            params,
            device=device,
            model_source=model_source,
            recipe=recipe,
            parent_run_id=parent_run_id,
            tags=tags or [],
            notes=notes,
            timeout_s=timeout_s,
        )
        print(f"run {handle.run_id} queued (database: {repo.url})", flush=True)
        if ids is not None:
            ids.append(handle.run_id)
        outcome = _wait(handle, pool)
    finally:
        pool.shutdown(timeout=10)
    time.sleep(0)  # let the dispatcher's last print reach the terminal first
    print()
    print(printer.summary())
    _report_outcome(outcome, printer)
    repo.close()
    if outcome.status == "cancelled":
        return 130
    if outcome.store_error:
        return 3
    return 0 if outcome.status == "succeeded" else 1


def _print_update(printer: Any, u: Any) -> None:
    """A pool update live: the run's events as its table, its warnings on stderr."""
    if u.what == "event":
        printer.on_event(u.data)
    elif u.what == "log" and u.data.get("level") in ("warning", "error", "critical"):
        worker_log(u.data)


def worker_log(data: Mapping[str, Any]) -> None:
    """A worker's warning: the studio's own on stderr; another library's (torchao's kernels
    that did not load, a deprecation) through this process's logging, so it lands in the
    log file and on the terminal only with -v, as the CLI's own foreign warnings do."""
    from studio.logs import is_own

    level, logger, message = data["level"], str(data.get("logger") or ""), data["message"]
    if is_own(logger) or not logger:
        print(f"{level}: {message}", file=sys.stderr, flush=True)
    else:
        logging.getLogger(logger).log(getattr(logging, level.upper(), logging.WARNING), message)


def _wait(handle: Any, pool: Any) -> Any:
    """The job's outcome; Ctrl-C cancels it (and a second Ctrl-C stops waiting)."""
    try:
        while True:
            try:
                return handle.wait(0.2)
            except TimeoutError:
                continue
    except KeyboardInterrupt:
        print("\ncancelling the run (Ctrl-C again to stop waiting)...", file=sys.stderr)
        handle.cancel()
        return handle.wait(pool.cancel_grace_s + pool.kill_grace_s + 10)


def _report_outcome(outcome: Any, printer: Any) -> None:
    """How the run ended, where its folder is, and what was not recorded or went wrong."""
    shown = outcome.status + (", not recorded" if outcome.store_error else "")
    print(f"\nrun {outcome.run_id}: {shown}")
    run_dir = outcome.result.get("run_dir") or printer.run_dir
    if run_dir:
        print(f"run folder: {run_dir}")
    if outcome.store_error:
        kept = (
            f"; its record is kept in {outcome.record_file}: add it to the database later with "
            f"`studio import-run {outcome.record_file}`"
            if outcome.record_file
            else ""
        )
        print(
            f"run {outcome.run_id} was NOT recorded in the database ({outcome.store_error}){kept}",
            file=sys.stderr,
        )
    if outcome.status != "succeeded":
        print(f"run {outcome.status}: {outcome.error}", file=sys.stderr)
        if outcome.status in ("crashed", "timed_out") and outcome.log_tail:
            tail = "\n".join(outcome.log_tail.splitlines()[-10:])
            print(f"last lines of the worker's log:\n{tail}", file=sys.stderr)
