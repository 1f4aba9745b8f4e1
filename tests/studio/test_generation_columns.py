"""The generation figures as the CLI and the Runs panel show them (issue 31)."""

from __future__ import annotations

from studio.generation_columns import (
    compare_cells,
    generation_columns,
    has_generation,
    interval_text,
    panel_cells,
    profile_lines,
    with_interval,
)
from studio.tables import cli_table

METRICS = {
    "ttft_ms": 12.5,
    "ttft_ms_low": 12.0,
    "ttft_ms_high": 13.25,
    "tpot_ms": 3.0,
    "tokens_per_s": 310.26,
    "tokens_per_s_low": 300.0,
    "tokens_per_s_high": 320.0,
    "tokens_per_s_ratio": 2.5,
    "tf_top1": 0.96875,
    "weights_bytes": 2048.0,
    "kv_cache_bytes": 1024.0,
}


def test_values_carry_their_intervals():
    assert with_interval(METRICS, "ttft_ms") == "12.50 [12.00, 13.25]"
    assert with_interval(METRICS, "tpot_ms") == "3.00"  # no interval recorded
    assert with_interval(METRICS, "missing") == "-"
    assert interval_text(METRICS).startswith("TTFT 12.50 [12.00, 13.25] ms; TPOT 3.00 ms/token")
    assert has_generation(METRICS) and not has_generation({"latency_p50_ms": 1.0})


def test_profile_lines_split_memory_into_weights_and_kv_cache():
    lines = dict(profile_lines(METRICS))
    assert lines["tokens/s"] == "310.3 [300.0, 320.0] tokens/s"
    assert lines["weights"] == "2.0 KiB" and lines["KV cache"] == "1.0 KiB"
    assert lines["peak (weights + KV)"] == "3.0 KiB"


def test_panel_cells_and_columns():
    cells = panel_cells(METRICS)
    assert [t for t, _ in cells] == ["12.50", "3.00", "310.3"]
    assert "[12.00, 13.25]" in cells[0][1]
    assert panel_cells({}) == [("", ""), ("", ""), ("", "")]
    table = cli_table(generation_columns(lambda row: row), [METRICS, {}])
    assert "2.50x" in table and "0.969" in table and "310.3" in table


def test_compare_cells_fold_the_interval_rows_into_the_value_row():
    rows = {
        (0, "bf16", "tokens_per_s"): [100.0, 120.0],
        (0, "bf16", "tokens_per_s_low"): [90.0, None],
        (0, "bf16", "tokens_per_s_high"): [110.0, None],
        (0, "bf16", "latency_p50_ms"): [1.0, 2.0],
    }
    assert compare_cells(rows, 0, "bf16", "tokens_per_s") == ["100.0 [90.0, 110.0]", "120.0"]
    assert compare_cells(rows, 0, "bf16", "tokens_per_s_low") == []
    assert compare_cells(rows, 0, "bf16", "latency_p50_ms") is None


def test_optimize_refuses_a_bad_generation_setting_naming_the_option(tmp_path, capsys):
    from studio.cli import main

    argv = ["optimize", "zoo:mlp", "--objective", "tokens_per_s", "--new-tokens", "0"]
    assert main([*argv, "--out", str(tmp_path / "s")]) == 2
    assert "--new-tokens must be at least 1, got 0" in capsys.readouterr().err


def test_profile_generate_prints_the_figures_and_names_a_bad_setting(capsys):
    from pathlib import Path

    from studio.cli import main

    tiny = str(Path(__file__).parents[1] / "accel" / "tiny_decoder.py") + ":llama"
    spec = "input_ids:int64[batch,seq]{0..256}; batch=1..8:1; seq=1..64:16"
    base = ["profile", tiny, "--input", spec, "--generate", "--rounds", "2"]
    assert main([*base, "--prompt-tokens", "8", "--new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    for label in ("TTFT", "TPOT", "tokens/s", "weights", "KV cache", "peak (weights + KV)"):
        assert f"\n{label} " in out, out
    assert "prompt 8 tokens, 4 new, batch 1" in out and "KV cache dynamic" in out
    assert main([*base, "--prompt-tokens", "60", "--new-tokens", "8"]) == 2
    assert "prompt_tokens + new_tokens is 68" in capsys.readouterr().err
