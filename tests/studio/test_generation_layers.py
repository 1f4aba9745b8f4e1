"""What the CLI and the Profile panel show of a per-layer generation profile (issue 31,
part 4): the group table, the coverage line, the KV growth rows, and
``studio profile --generate``'s section."""

from __future__ import annotations

import re
from pathlib import Path

from accel.profile.generation import GenerationLayers, LayerSplit
from studio.generation_layers import kv_rows, split_text

TINY = str(Path(__file__).parents[1] / "accel" / "tiny_decoder.py") + ":llama"
SPEC = "input_ids:int64[batch,seq]{0..256}; batch=1..8:1; seq=1..64:16"


def _gen() -> GenerationLayers:
    rows = [
        LayerSplit("", "Model", "other", 0.5, 0.1),
        LayerSplit("layers.0.attn", "Attention", "attention", 4.0, 1.0, 4.0, 1.0, 1),
        LayerSplit("layers.0.mlp", "MLP", "mlp", 3.0, 0.5, 3.0, 0.5, 1),
        LayerSplit("lm_head", "Linear", "lm_head", 1.0, 0.25, 1.0, 0.25, 1),
    ]
    gen = GenerationLayers(16, 5, ttft_ms=10.0, tpot_ms=2.0, rows=rows, rounds=3)
    gen.kv_lengths = list(range(16, 36))
    gen.kv_bytes = [n * 512 for n in gen.kv_lengths]
    gen.kv_bytes_per_token = 512
    return gen


def test_kv_rows_spread_evenly_and_keep_both_ends():
    gen = _gen()
    rows = kv_rows(gen, 5)
    assert len(rows) == 5 and rows[0] == (16, 16 * 512) and rows[-1] == (35, 35 * 512)
    assert [n for n, _ in rows] == sorted(n for n, _ in rows)
    assert kv_rows(gen, 50) == list(zip(gen.kv_lengths, gen.kv_bytes, strict=True))


def test_split_text_has_groups_shares_coverage_top_layers_and_kv():
    text = split_text(_gen(), top=2)
    lines = text.splitlines()
    attention = next(ln for ln in lines if ln.startswith("attention"))
    assert "4.000" in attention and "40.0%" in attention and "50.0%" in attention
    unattributed = next(ln for ln in lines if ln.startswith("(unattributed)"))
    assert "1.500" in unattributed and "0.150" in unattributed  # 10 - 8.5, 2 - 1.85
    assert "85.0% of the TTFT (10.0 ms) and 92.5% of the TPOT (2.000 ms)" in text
    top = text.split("top 2 layers by decode time per token:")[1].split("KV cache")[0]
    assert "layers.0.attn" in top and "layers.0.mlp" in top and "lm_head" not in top
    assert "(root)" not in top
    assert "KV cache (dynamic): 512 B per position" in text
    assert "17.5 KiB" in text  # 35 positions x 512 B, measured and closed form


def test_profile_generate_prints_the_split_and_the_kv_growth(capsys):
    from studio.cli import main

    argv = ["profile", TINY, "--input", SPEC, "--generate", "--rounds", "1"]
    assert main([*argv, "--prompt-tokens", "8", "--new-tokens", "4", "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "generation per layer: prefill of 8 tokens, decode per token over 3 steps" in out
    for group in ("embedding", "attention", "mlp", "norm", "lm_head", "other"):
        assert f"\n{group} " in out, out
    assert "% of the TPOT" in out and "top 5 layers by decode time per token:" in out
    assert "KV cache (dynamic): 512 B per position" in out
    assert main([*argv, "--store"]) == 2
    assert "--generate does not store a profile" in capsys.readouterr().err
    for n in (8, 9, 10, 11):  # measured and closed form agree at each length
        kib = f"{n * 512 / 1024:.1f} KiB"
        assert re.search(rf"^ +{n} +{kib} +{kib}$", out, re.M), out


def test_a_stored_generation_profile_reads_back_and_old_ones_have_none(tmp_path):
    from accel.job_results import ProfileResult
    from accel.profile import ModelProfile
    from studio.store import Repository
    from studio.usecases import store_profile

    facts = {"source": "tiny:llama", "kind": "torch", "content_hash": "h", "input_spec": SPEC}
    repo = Repository.open(str(tmp_path / "studio.db"))
    try:
        for gen in (None, _gen()):
            prof = ModelProfile(kind="torch", device="cpu", total_ms=3.0, generation=gen)
            store_profile(repo, ProfileResult(facts, "", profile=prof))
        old, new = repo.get_profiles(model_source="tiny:llama")
    finally:
        repo.close()
    assert "generation" not in old.summary
    assert GenerationLayers.from_dict(new.summary["generation"]) == _gen()
