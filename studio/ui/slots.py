"""Connecting buttons to slots safely, and reporting errors raised in slots.

``clicked(bool)`` and ``triggered(bool)`` pass their ``checked`` flag to the slot. A slot
with a default argument (``delete_selected(confirm=True)``, ``tag_selected(tag=None)``)
then receives ``False`` in place of its default: the History "Delete…" button deleted
without asking and "Tag…" crashed that way. ``on_click`` calls the slot with no
arguments. ``report_slot_errors`` routes exceptions raised in slots (which Qt would only
print to stderr) to the log and the status bar.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def on_click(signal: Any, slot: Callable[[], Any]) -> None:
    """Connect ``clicked``/``triggered`` to ``slot()``, dropping the ``checked`` argument."""
    signal.connect(lambda *_args: slot())


def report_slot_errors(show: Callable[[str], Any]) -> Callable[..., None]:
    """Install a ``sys.excepthook`` that logs uncaught exceptions (Qt slots end up there)
    and shows a one-line message via ``show``; returns the previous hook."""
    previous = sys.excepthook

    def hook(exc_type, exc, tb) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            previous(exc_type, exc, tb)
            return
        log.error("error in the studio: %s", exc, exc_info=(exc_type, exc, tb))
        try:
            show(f"Error: {exc_type.__name__}: {exc} (details in the log)")
        except Exception:  # the window may be gone
            log.debug("could not show the error", exc_info=True)

    sys.excepthook = hook
    return previous
