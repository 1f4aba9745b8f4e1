"""bench/corpus.py --merge: the tv:/timm: rows come from a second environment, so the corpus
figure is the union of two runs' corpus.json, counted per family and in all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    return load_bench("corpus.py")


def _cell(name: str, outcome: str) -> dict:
    return {"pass_name": name, "outcome": outcome, "speedup": None, "parity_passed": None,
            "build_s": None, "reason": "", "details": {}}  # fmt: skip


def _run(tmp: Path, sub: str, rows: list[dict]) -> Path:
    d = tmp / sub
    d.mkdir()
    (d / "corpus.json").write_text(json.dumps(rows))
    return d


def test_merge_counts_the_union_per_family_and_the_last_run_wins(tmp_path):
    bench = _bench()
    hf = _run(tmp_path, "hf", [
        {"model": "hf:resnet50", "params_m": 25.6,
         "cells": [_cell("bf16", "ok"), _cell("fp16", "n/a"), _cell("qat", "refused")]},
        {"model": "tv:resnet50", "load_error": "torchvision cannot be imported", "cells": []},
    ])  # fmt: skip
    tv = _run(tmp_path, "tv", [
        {"model": "tv:resnet50", "params_m": 25.6,
         "cells": [_cell("bf16", "ok"), _cell("compile", "crash")]},
    ])  # fmt: skip
    out = tmp_path / "union"
    assert bench.merge([str(hf), str(tv)], "small", out) == 0
    rows = json.loads((out / "corpus.json").read_text())
    assert [r["model"] for r in rows] == ["tv:resnet50", "hf:resnet50"]  # the corpus's order
    assert "load_error" not in rows[0]
    text = (out / "corpus.md").read_text()
    assert "| hf | 1 | 1/2 (50.0 %) | 1 | 0 | 0 |" in text
    assert "| tv | 1 | 1/2 (50.0 %) | 0 | 1 | 0 |" in text
    assert "| all | 2 | 2/4 (50.0 %) | 1 | 1 | 0 |" in text


def test_merge_of_a_folder_without_a_run_says_what_to_give(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "corpus.py"), "--merge", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "no corpus.json" in proc.stderr and "--out folder" in proc.stderr
