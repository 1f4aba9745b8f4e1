"""Checks every model loader runs on the files it is about to read."""

from __future__ import annotations

from pathlib import Path

from accel.errors import ModelLoadError


def require_file(path: Path) -> None:
    """Refuse a model file that is missing, not a file, or empty, saying which."""
    if not path.exists():
        raise ModelLoadError(f"model file {path} does not exist; check the path")
    if not path.is_file():
        raise ModelLoadError(f"{path} is not a file")
    if path.stat().st_size == 0:
        raise ModelLoadError(f"model file {path} is empty (interrupted download or save?)")


def resolve_inside(folder: Path, path: Path) -> Path | None:
    """``path`` with every link resolved, or None when that lands outside ``folder`` (the
    folder resolved too): a file a model names may not read beyond its model's folder."""
    root = Path(folder).resolve()
    target = Path(path).resolve()
    return target if target.is_relative_to(root) else None
