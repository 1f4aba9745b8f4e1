"""No class in accel/ or studio/ longer than LIMIT lines (issue 30).

A class that outgrows the limit holds more than one feature: split it by its seams into
collaborators (``studio/controllers/`` for the services, ``studio/workers``' Scheduler,
Supervisor, Watchdog and Dispatcher for the pool), not by line count into mixins. Length is
the class statement's lines (its methods and nested classes included). PENDING lists the
classes over the limit that another change is rewriting now; shrink only.
"""

from __future__ import annotations

from pathlib import Path

from tests.code_sizes import CLASSES, ROOT, definition_sizes, tree_sizes

LIMIT = 400

# "path::qualified name": lines when recorded. Shrink only.
PENDING: dict[str, int] = {}


def class_sizes(source: str) -> dict[str, int]:
    return definition_sizes(source, CLASSES)


def tree_class_sizes(root: Path = ROOT) -> dict[str, int]:
    return tree_sizes(CLASSES, root)


def test_no_class_over_the_limit():
    sizes = tree_class_sizes()
    assert "studio/services.py::Services" in sizes  # the walk sees the studio too
    problems = []
    for key, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if n <= LIMIT:
            continue
        pending = PENDING.get(key)
        if pending is None:
            problems.append(f"{key} is {n} lines (limit {LIMIT}): split it by its seams")
        elif n > pending:
            problems.append(f"{key} grew to {n} lines (pending at {pending}): split it")
    assert not problems, "\n".join(problems)


def test_pending_only_shrinks():
    sizes = tree_class_sizes()
    stale = [key for key in PENDING if sizes.get(key, 0) <= LIMIT]
    assert not stale, f"under the limit or gone now, remove from PENDING: {stale}"


def test_the_measure_counts_nested_classes():
    source = "class A:\n    class B:\n        x = 1\n    def m(self):\n        pass\n"
    assert class_sizes(source) == {"A": 5, "A.B": 2}
