"""bench/bench_search.py's hand-written contenders: the bf16 ones are left out, with the
reason in their row, on a CPU without bf16 kernels (they would only be emulated there)."""

from __future__ import annotations

from tests.bench_scripts import load_bench


def _bench():
    return load_bench("bench_search.py")


def test_bf16_pipelines_are_left_out_without_bf16_kernels() -> None:
    bench = _bench()
    with_bf16, none_left = bench.hand_written(bf16_cpu=True)
    without, left_out = bench.hand_written(bf16_cpu=False)
    assert none_left == {}
    assert "torch.compile bf16" in with_bf16 and "ORT int8 dynamic" in with_bf16
    assert "torch.compile bf16" in left_out and "torch.compile bf16" not in without
    assert "bf16 kernels" in left_out["torch.compile bf16"]
    # everything else is the same list, in the same order
    assert [k for k in with_bf16 if k not in left_out] == list(without)
    if "OpenVINO bf16" in with_bf16:
        assert "OpenVINO bf16" in left_out
