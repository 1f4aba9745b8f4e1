"""bench/bench_reliability.py's table check exports the run it just made: by the id
`studio run` printed (`studio export-run` takes an id or a prefix of one, not "latest")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench_scripts import load_bench


def _bench():
    return load_bench("bench_reliability.py")


def test_the_table_check_exports_the_run_by_the_id_studio_run_printed():
    bench = _bench()
    run_id = "f26a164fe576402881ac40bac0f82c84"
    out = f"run {run_id} queued (database: sqlite:////tmp/s.db)\nmodel zoo:mlp ...\n"
    assert bench.run_id_of(out) == run_id
    with pytest.raises(ValueError, match="no run id"):
        bench.run_id_of("Error: no run 'latest'\n")
    assert '"latest"' not in Path(bench.__file__).read_text().split("def tables", 1)[1]


def test_the_table_check_counts_rows_whose_interval_was_widened_to_the_p50_ratio():
    bench = _bench()
    assert bench.check_row(10.0, 5.0, 1.5, 2.5) == (True, False)
    assert bench.check_row(52.0, 0.5, 2.0, 104.0) == (True, True)  # covering() widened it
    assert bench.check_row(10.0, 1.0, 1.5, 2.5) == (False, False)
