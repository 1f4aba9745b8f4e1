"""The `studio` command: no arguments opens the GUI, subcommands are the headless interface.

Each subcommand lives in its own module under ``studio/commands/`` and exposes
``register(subparsers)``; the module is listed in ``COMMAND_MODULES`` below. A
command's handler receives the parsed ``argparse.Namespace`` and returns an
exit code. Heavy imports (torch, Qt) stay inside handlers so ``studio --help``
is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from studio.errors import UserError

COMMAND_MODULES = [
    "studio.commands.gui",
    "studio.commands.profile",
    "studio.commands.passes",
    "studio.commands.run",
    "studio.commands.export_script",
    "studio.commands.analyze",
    "studio.commands.history",
    "studio.commands.graph",
    "studio.commands.optimize",
    "studio.commands.deploy",
]


# The commands' user error is the studio's (``studio.errors``): lookups shared with the
# GUI raise it without importing the CLI.
CliError = UserError


def build_parser() -> argparse.ArgumentParser:
    return _parser_and_commands()[0]


def _parser_and_commands() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser and its subcommands' parsers by name (the commands that registered)."""
    parser = argparse.ArgumentParser(
        prog="studio",
        description="Accel Studio: profile, optimize and verify PyTorch and ONNX models. "
        "Without a command, opens the studio window.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument(
        "--db",
        metavar="URL",
        default=None,
        help="database URL or SQLite file (default: the studio database in the user data folder)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command not written yet
                continue
            raise
        mod.register(sub)
    return parser, dict(sub.choices)


# Commands that load or run a model (in a confined worker): they say when the box is missing.
MODEL_COMMANDS = frozenset(
    {"run", "rerun", "profile", "graph", "parity", "bisect", "analyze", "optimize", "serve-test"}
)


_LAST_COMMAND: list[str | None] = [None]


def last_command() -> str | None:
    """The command the last ``main`` call ran (None before one was parsed)."""
    return _LAST_COMMAND[0]


def main(argv: list[str] | None = None) -> int:
    from accel.privacy import disable_telemetry
    from studio.logs import setup_logging

    disable_telemetry()  # before any command imports a library that phones home
    parser, commands = _parser_and_commands()
    args = parser.parse_args(argv)
    _LAST_COMMAND[0] = args.command or "gui"
    setup_logging(verbose=args.verbose)
    if args.command is None:
        args.command = "gui"
        if "gui" not in commands:
            parser.print_help()
            return 0
        args = parser.parse_args(["gui", *(argv or sys.argv[1:])])
    if args.command in MODEL_COMMANDS:
        from studio.workers.confine import confinement_note

        note = confinement_note()
        if note:  # said once per command, before any model is touched
            print(f"note: {note}", file=sys.stderr)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        # Known user-facing errors from the engine carry a message that says what to do.
        from accel.errors import AccelError

        if isinstance(exc, AccelError):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
