"""`studio export-script RECIPE -o script.py`: the recipe as a standalone Python script."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-script", help="write a recipe as a standalone Python script")
    p.add_argument("recipe", help="recipe file (.yaml / .json)")
    p.add_argument("-o", "--output", help="script file to write (default: stdout)")
    p.add_argument("--model", help="override the recipe's model source")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from accel.codegen import recipe_to_script
    from accel.recipe import load_recipe

    recipe = load_recipe(args.recipe)
    if args.model:
        recipe = recipe.model_copy(
            update={"model": recipe.model.model_copy(update={"source": args.model})}
        )
    script = recipe_to_script(recipe)
    if args.output:
        Path(args.output).write_text(script, encoding="utf-8")
        print(
            f"wrote {args.output} ({len(script.splitlines())} lines); run it with: python {args.output} --out results/",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(script)
    return 0
