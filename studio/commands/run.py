"""`studio run RECIPE`: run a recipe, printing a live per-step table and a summary."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a recipe (benchmark + parity per step)")
    p.add_argument("recipe", help="recipe file (.yaml / .json)")
    p.add_argument("--model", help="override the recipe's model source")
    p.add_argument("--device", help="override the recipe's device (cpu, cuda:0)")
    p.add_argument("--out", help="run folder for artifacts (default: runs/<time>-<name>)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from accel.runner import run_recipe
    from studio.commands._runprint import RunPrinter

    printer = RunPrinter()
    result = run_recipe(
        args.recipe,
        on_event=lambda e: printer.on_event(e.to_dict()),
        out_dir=args.out,
        model_source=args.model,
        device=args.device,
    )
    print()
    print(printer.summary())
    print(f"\nrun folder: {result.run_dir}")
    if result.status != "succeeded":
        print(f"run {result.status}: {result.error or ''}", file=sys.stderr)
        return 1
    return 0
