"""The studio's user-facing error, shared by the CLI and the GUI (no CLI, no Qt here).

``UserError``: a message that says what to change, shown to the person as it is (the CLI
prints it and exits with 2; the GUI shows it in the panel or status bar). The lookups both
use (a run's servable model file, ``studio.serve_test``) raise it, so the GUI never needs
the CLI package to understand their failures. ``studio.cli.CliError`` is this class.
"""

from __future__ import annotations


class UserError(Exception):
    """An error whose message is shown to the user as is (no traceback)."""
