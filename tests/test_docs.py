"""The guide lives in the repository: docs/*.md point at no folder outside it, and every
repository path they name in backticks exists (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
TOP = ("accel", "studio", "tests", "docs", "bench", "resources", "packaging")
PATH = re.compile(r"`([A-Za-z_][\w./-]*/[\w./-]*)`")
OUTSIDE = re.compile(r"(?<![\w.`])/(?:work|home|tmp|opt|usr|mnt|root|Users)/\S*")


def named_paths(text: str) -> list[str]:
    """Repository paths in backticks (``studio/ui/_async.run_in_thread`` names a module's
    attribute: the module's file is the path)."""
    return [m.group(1) for m in PATH.finditer(text) if m.group(1).split("/")[0] in TOP]


def exists(rel: str) -> bool:
    path = ROOT / rel.rstrip("/")
    if path.exists():
        return True
    module, _, _attr = rel.rpartition(".")
    return bool(module) and (ROOT / f"{module}.py").is_file()


def test_the_guide_is_there():
    assert {p.name for p in DOCS} >= {"HACKING.md", "DESIGN.md"}


def test_docs_point_at_nothing_outside_the_repository():
    found = {p.name: OUTSIDE.findall(p.read_text(encoding="utf-8")) for p in DOCS}
    assert not {k: v for k, v in found.items() if v}


def test_every_named_repository_path_exists():
    missing = {
        p.name: [rel for rel in named_paths(p.read_text(encoding="utf-8")) if not exists(rel)]
        for p in DOCS
    }
    assert not {k: v for k, v in missing.items() if v}


def test_the_checks_see_what_they_look_for():
    text = "see `studio/nope.py`, `studio/ui/_async.run_in_thread` and /work/main/.venv"
    assert named_paths(text) == ["studio/nope.py", "studio/ui/_async.run_in_thread"]
    assert not exists("studio/nope.py") and exists("studio/ui/_async.run_in_thread")
    assert OUTSIDE.findall(text) == ["/work/main/.venv"]
