"""No function in accel/ or studio/ longer than LIMIT lines (issues 16 and 30).

Length is counted with ast: from the ``def`` line to the function's last line (docstring,
comments and nested functions included). Methods and nested functions are named by their
qualified name (``Class.method``, ``outer.inner``). Every package of both trees is counted:
the panels, the CLI, the workers, the store and its migrations too.

EXCEPTIONS are the functions allowed to stay longer, each with its reason: at most five, all
here. PENDING lists functions that were over the limit when the limit went to 60 in code
that another change is rewriting at the same time (named per entry); they may only shrink:
a listed function may not grow past its recorded size, and one that is now under the limit
(or gone) must leave the list (the test says so). No new entry may be added: split the
function instead.
"""

from __future__ import annotations

from pathlib import Path

from tests.code_sizes import FUNCTIONS, PACKAGES, ROOT, definition_sizes, tree_sizes

LIMIT = 60

# "path::qualified name": why it stays longer. At most five.
EXCEPTIONS: dict[str, str] = {
    "studio/store/migrations/versions/0001_initial_schema.py::upgrade": (
        "a migration is history: the schema every existing database was created with, "
        "written once as alembic generated it; changing it changes what old databases mean"
    ),
}

# "path::qualified name": lines when recorded. Shrink only.
PENDING: dict[str, int] = {
    # Generation (issue 31) changes the OpenVINO pass.
}


def function_sizes(source: str) -> dict[str, int]:
    return definition_sizes(source, FUNCTIONS)


def tree_function_sizes(root: Path = ROOT) -> dict[str, int]:
    return tree_sizes(FUNCTIONS, root)


def test_no_function_over_the_limit():
    sizes = tree_function_sizes()
    assert any(k.startswith("studio/ui/") for k in sizes)  # the walk sees every package
    assert any(k.startswith("studio/store/migrations/") for k in sizes)
    problems = []
    for key, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if n <= LIMIT or key in EXCEPTIONS:
            continue
        pending = PENDING.get(key)
        if pending is None:
            problems.append(f"{key} is {n} lines (limit {LIMIT}): split it into named steps")
        elif n > pending:
            problems.append(f"{key} grew to {n} lines (pending at {pending}): split it")
    assert not problems, "\n".join(problems)


def test_exceptions_are_few_reasoned_and_still_needed():
    sizes = tree_function_sizes()
    assert len(EXCEPTIONS) <= 5, "at most five exceptions: split a function instead"
    assert all(len(why) > 40 for why in EXCEPTIONS.values()), "each exception says why"
    unneeded = [key for key in EXCEPTIONS if sizes.get(key, 0) <= LIMIT]
    assert not unneeded, f"no longer over the limit, remove from EXCEPTIONS: {unneeded}"


def test_pending_only_shrinks():
    sizes = tree_function_sizes()
    stale = [
        f"{key}: now {sizes[key]} lines, remove it from PENDING"
        if key in sizes
        else f"{key}: no such function any more, remove it from PENDING"
        for key in PENDING
        if sizes.get(key, 0) <= LIMIT
    ]
    assert not stale, "\n".join(stale)


def test_the_measure_counts_methods_and_nested_functions():
    source = (
        "class A:\n"
        "    def m(self):\n"
        "        def inner():\n"
        "            return 1\n"
        "        return inner()\n"
        "def f():\n"
        "    pass\n"
    )
    assert function_sizes(source) == {"A.m": 4, "A.m.inner": 2, "f": 2}


def test_the_walk_finds_a_long_function(tmp_path):
    for package in PACKAGES:
        (tmp_path / package / "sub").mkdir(parents=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT))
    (tmp_path / "studio" / "sub" / "long.py").write_text(f"def f():\n{body}", encoding="utf-8")
    assert tree_function_sizes(tmp_path) == {"studio/sub/long.py::f": LIMIT + 1}
