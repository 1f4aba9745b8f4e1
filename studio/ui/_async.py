"""Run a function on a Python thread and get its result back on the GUI thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal


class _Relay(QObject):
    done = Signal(object, object)  # (result, exception)


_relays: set[_Relay] = set()


def run_in_thread(
    fn: Callable[[], Any],
    on_done: Callable[[Any], None],
    on_error: Callable[[BaseException], None] | None = None,
    parent: QObject | None = None,
) -> None:
    """Call ``fn()`` off the GUI thread; ``on_done(result)`` / ``on_error(exc)`` run on it."""
    relay = _Relay(parent)
    _relays.add(relay)

    def deliver(result: Any, exc: Any) -> None:
        _relays.discard(relay)
        relay.deleteLater()
        if exc is not None:
            if on_error is not None:
                on_error(exc)
        else:
            on_done(result)

    relay.done.connect(deliver)

    def work() -> None:
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to on_error on the GUI thread
            relay.done.emit(None, exc)
        else:
            relay.done.emit(result, None)

    threading.Thread(target=work, daemon=True, name="studio-ui-task").start()
