"""No module in studio/ui longer than LIMIT lines, none in the store or the worker pool
longer than PARTS_LIMIT (issue 16).

Lines are counted as the file's physical lines. A panel that grows past the limit is split
into a package of small modules (studio/ui/graph_view/ is the example), or its non-Qt logic
moves to accel/ or studio/ where it can be tested without a window. A store feature gets its
own module in studio/store (see docs/HACKING.md), pool code goes to the worker module of its
concern (scheduling, worker_process, watchdog, dispatch). Migration scripts are not counted.
"""

from __future__ import annotations

from pathlib import Path

LIMIT = 500
PARTS_LIMIT = 400  # studio/store and studio/workers: one feature or concern per module
ROOT = Path(__file__).resolve().parents[1]


def module_sizes(folder: Path, root: Path = ROOT) -> dict[str, int]:
    """Relative path -> line count of every .py file under ``folder``."""
    return {
        p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(folder.rglob("*.py"))
    }


def test_no_studio_ui_module_over_the_limit():
    sizes = module_sizes(ROOT / "studio" / "ui")
    assert "studio/ui/main_window.py" in sizes  # the walk found the package
    over = {path: n for path, n in sizes.items() if n > LIMIT}
    assert not over, f"studio/ui modules over {LIMIT} lines (split them): {over}"


def test_no_store_or_worker_module_over_the_parts_limit():
    sizes = {
        **module_sizes(ROOT / "studio" / "store"),
        **module_sizes(ROOT / "studio" / "workers"),
    }
    assert "studio/store/repo.py" in sizes and "studio/workers/pool.py" in sizes
    over = {path: n for path, n in sizes.items() if n > PARTS_LIMIT and "/migrations/" not in path}
    assert not over, f"store / worker modules over {PARTS_LIMIT} lines (split them): {over}"


def test_the_count_sees_a_long_module(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (LIMIT + 1), encoding="utf-8")
    (tmp_path / "pkg" / "sub" / "short.py").write_text("x = 1\n", encoding="utf-8")
    sizes = module_sizes(tmp_path / "pkg", root=tmp_path)
    assert sizes == {"pkg/long.py": LIMIT + 1, "pkg/sub/short.py": 1}
