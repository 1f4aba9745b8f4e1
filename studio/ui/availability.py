"""One way for a button or an action to be enabled or to say why it is not: the reason goes
to the tooltip and the status tip (the status bar shows it on hover), from the same check
that decides (accel.plan's pre-flight, the store's run checks)."""

from __future__ import annotations

from typing import Any


def set_available(control: Any, why: str | None, tip: str) -> None:
    """Enable ``control`` (a QAbstractButton or QAction) when ``why`` is None; its tooltip
    and status tip say what it does, or why it is unavailable."""
    control.setEnabled(why is None)
    text = tip if why is None else f"Unavailable: {why}"
    control.setToolTip(text)
    control.setStatusTip(text)
