"""`studio gui` (and `studio` with no command): open the studio window."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gui", help="open the studio window (the default without a command)")
    p.add_argument("model", nargs="?", help="model source to open (default: the last one)")
    p.add_argument("--recipe", metavar="FILE", help="recipe to load")
    # Also accepted after `gui`: `studio --db X` re-parses as `studio gui --db X`. SUPPRESS
    # keeps a global --db given before `gui` from being reset to None.
    p.add_argument("--db", metavar="URL", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Before Qt is imported: no display or missing xcb libraries get one clear message
    # (exit 2) instead of Qt's abort.
    from studio.platform_check import EXIT_NO_PLATFORM, check_platform

    problem = check_platform()
    if problem:
        import sys

        print(f"studio: {problem}", file=sys.stderr)
        return EXIT_NO_PLATFORM
    from studio.app import run_gui

    return run_gui(db=getattr(args, "db", None), model=args.model, recipe=args.recipe)
