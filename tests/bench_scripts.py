"""Load a script of bench/ as a module (bench/ is no package), for the tests of its helpers."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_bench(file_name: str) -> ModuleType:
    """bench/FILE_NAME, freshly executed as a module named after the file."""
    path = ROOT / "bench" / file_name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
