"""The generation figures as the CLI and the Runs panel show them (issue 31)."""

from __future__ import annotations

from studio.generation_columns import (
    CLI_HEADERS,
    cli_rows,
    compare_cells,
    has_generation,
    interval_text,
    panel_cells,
    profile_lines,
    with_interval,
)

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


def test_panel_cells_carry_the_reference_measured_beside_the_step():
    step = {**METRICS, "baseline_tokens_per_s": 124.1}
    cells = panel_cells(step)
    assert [t for t, _ in cells] == ["124.1", "12.50", "3.00", "310.3"]
    assert "alternating rounds" in cells[0][1] and "[12.00, 13.25]" in cells[1][1]
    # the original's row is its own reference
    assert panel_cells(METRICS, original=True)[0][0] == "310.3"
    assert panel_cells({}) == [("", "")] * 4


def test_cli_rows_ratio_is_the_rows_own_tokens_over_its_own_reference():
    original = {"tokens_per_s": 10.0, "ttft_ms": 200.0, "kv_cache_bytes": 1024}
    step = {
        **METRICS,
        "tokens_per_s": 25.0,
        "baseline_tokens_per_s": 10.0,
        "baseline_ttft_ms": 190.0,
        "tokens_per_s_ratio": 2.5,
        "tokens_per_s_ratio_low": 2.4,
        "tokens_per_s_ratio_high": 2.6,
    }
    rows = cli_rows([(-1, "original", original), (0, "static_kv_cache", step)])
    cell = {h: i for i, h in enumerate(CLI_HEADERS)}
    assert rows[0][:3] == ["0", "original", "10.0"]
    assert rows[0][cell["tok/s ratio [95% CI]"]] == "1.00x"
    assert rows[1][cell["ref tok/s"]] == "10.0" and rows[1][cell["ref TTFT ms"]] == "190.0"
    assert rows[1][cell["tok/s ratio [95% CI]"]] == "2.50x [2.40-2.60]"
    assert rows[1][cell["TF top-1"]] == "0.969" and rows[0][cell["KV cache"]] == "1.0 KiB"
    # a forward-workload run has no generation table
    assert cli_rows([(-1, "original", {"size_bytes": 1}), (0, "bf16", None)]) == []


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
