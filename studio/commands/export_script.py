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
    if not recipe.model.input_spec and not _spec_without_loading(recipe.model.source):
        # A model file's spec is read by loading it: in a confined worker, never here.
        spec = _boxed_spec(recipe.model.source)
        recipe = recipe.model_copy(
            update={"model": recipe.model.model_copy(update={"input_spec": spec})}
        )
    script = recipe_to_script(recipe)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)  # as --out does
        Path(args.output).write_text(script, encoding="utf-8")
        print(
            f"wrote {args.output} ({len(script.splitlines())} lines); run it with: python {args.output} --out results/",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(script)
    return 0


def _spec_without_loading(source: str) -> bool:
    """Sources whose spec the script export reads without loading anything (zoo, corpus,
    ONNX) or that it refuses to import for it (factories)."""
    from accel.models.corpus import CORPUS_PREFIXES
    from accel.models.runtime import runtime_for_file
    from accel.trust import is_code_ref

    target = source.split("(", 1)[0].split("@", 1)[0].strip()
    if target.startswith(("zoo:", *CORPUS_PREFIXES)) or is_code_ref(source):
        return True
    runtime = runtime_for_file(target)
    try:  # a runtime that reads a file's spec from its metadata (ONNX), without loading it
        return runtime is not None and runtime.file_input_spec(Path(target)) is not None
    except Exception:  # noqa: BLE001 - the script export then reports the file's problem
        return True


def _boxed_spec(source: str) -> str:
    """The input spec of a model file, read by opening it in a confined worker (no graph);
    the file is never unpickled (no --trust-pickle here)."""
    from accel.job_specs import InspectJob
    from studio.usecases import model_job, run_boxed

    opened = run_boxed(model_job(InspectJob, source, graph=False))
    return str(opened.info.get("input_spec") or "")
