"""Timing travels as a typed StepTiming; its flat string keys live at the store's boundary
only (studio/store/timing_keys.py), not in the modules that carry or show it (issue 30)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "latency_" + "p50_ms"  # spelled apart so this file never counts itself
LIMIT = 2


def modules_with(text: str, root: Path = ROOT) -> list[str]:
    """accel/ and studio/ modules whose source contains ``text`` (migrations excluded)."""
    found = []
    for pkg in ("accel", "studio"):
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if "/migrations/" not in rel and text in path.read_text(encoding="utf-8"):
                found.append(rel)
    return found


def test_the_flat_latency_key_is_spelled_in_at_most_two_modules():
    found = modules_with(KEY)
    assert "studio/store/timing_keys.py" in found  # the store's mapping
    assert len(found) <= LIMIT, f"{KEY!r} spelled outside the store's mapping: {found}"


def test_the_count_sees_a_module_that_spells_the_key(tmp_path):
    (tmp_path / "accel").mkdir()
    (tmp_path / "studio" / "store" / "migrations").mkdir(parents=True)
    (tmp_path / "accel" / "a.py").write_text(f"x = {KEY!r}\n", encoding="utf-8")
    (tmp_path / "studio" / "b.py").write_text("y = 1\n", encoding="utf-8")
    (tmp_path / "studio" / "store" / "migrations" / "m.py").write_text(KEY, encoding="utf-8")
    assert modules_with(KEY, tmp_path) == ["accel/a.py"]
