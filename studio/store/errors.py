"""The store's errors (no SQLAlchemy here: callers typed against ``studio.store.api`` catch
them without loading the database layer)."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The database cannot be opened or migrated; the message says which and why."""


class RunNotFound(KeyError):
    """No run (or more than one) matches the id or id prefix given."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "run not found"
