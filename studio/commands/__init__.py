"""Subcommands of the `studio` CLI, one module each (see studio/cli.py)."""
