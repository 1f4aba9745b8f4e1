"""Test helper for the search's fake executors: a trial handle that is already done."""

from __future__ import annotations

from typing import Any


class Done:
    """A finished trial's handle: ``result()`` returns ``outcome`` at once."""

    def __init__(self, outcome: dict[str, Any]) -> None:
        self.outcome = outcome

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        return self.outcome

    def cancel(self) -> None:
        pass
