"""accel.hardware: CPU flags from /proc/cpuinfo, and the OpenVINO precision they suggest."""

from __future__ import annotations

import pytest

from accel.hardware import CpuFeatures, default_openvino_precision, parse_cpuinfo

XEON_AMX = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu
"""
EPYC = "model name\t: AMD EPYC 9654\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16\n"
CLIENT = "model name\t: Intel(R) Core(TM) i7-12700\nflags\t\t: fpu avx2 avx_vnni\n"
OLD = "model name\t: Intel(R) Xeon(R) CPU E5-2680 v4\nflags\t\t: fpu avx2\n"


def test_parse_reads_the_first_processor():
    f = parse_cpuinfo(XEON_AMX)
    assert f.name == "Intel(R) Xeon(R) Platinum 8480+"
    assert f.amx_bf16 and f.amx_int8 and f.avx512_bf16 and f.avx512_vnni and f.avx512f
    assert f.bf16 and f.int8


@pytest.mark.parametrize(
    ("text", "bf16", "int8", "precision"),
    [
        (XEON_AMX, True, True, "bf16"),
        (EPYC, True, True, "bf16"),
        (CLIENT, False, True, "f32"),
        (OLD, False, False, "f32"),
        ("", False, False, "f32"),
    ],
)
def test_precision_follows_the_flags(text, bf16, int8, precision):
    f = parse_cpuinfo(text)
    assert (f.bf16, f.int8) == (bf16, int8)
    assert default_openvino_precision(f) == precision


def test_summary_names_what_it_found():
    assert "amx_bf16" in parse_cpuinfo(XEON_AMX).summary()
    assert "no bf16/int8 matrix extensions" in CpuFeatures().summary()


@pytest.mark.parametrize(("text", "expected"), [(EPYC, None), (OLD, "f32")])
def test_openvino_auto_precision_follows_the_cpu(monkeypatch, tmp_path, text, expected):
    pytest.importorskip("openvino")
    from accel.models import load_model
    from accel.passes import PassContext, get_pass
    from accel.runtimes.openvino.ir import bf16_supported

    monkeypatch.setattr("accel.hardware.cpu_features", lambda: parse_cpuinfo(text))
    # With bf16 flags, auto is bf16 exactly where OpenVINO itself reports BF16 here.
    expected = expected or ("bf16" if bf16_supported("CPU") else "f32")
    lm = load_model("zoo:mlp")
    cls = get_pass("openvino")
    ctx = PassContext(inputs=lm.example_inputs(), work_dir=tmp_path, original=lm)
    new = cls().apply(lm, cls.parse_config({}), ctx)
    assert new.session_options["precision"] == expected
    assert ctx.details["precision_auto"].startswith(expected)


def test_int8_saturation_defaults_follow_the_cpu(monkeypatch):
    """AVX2 without VNNI/AMX multiplies u8 x s8 into int16, which saturates: ONNX Runtime's
    quantizers default to 7-bit weights there and NNCF to its overflow fix on every layer
    (measured: dynamic int8 cosine 0.977 -> 0.9998 on a small transformer); with VNNI they
    keep full range. Explicit values win, and the exported script gets the resolved literal."""
    from accel import hardware
    from accel.passes import get_pass
    from accel.passes.openvino import overflow_fix
    from accel.passes.quantize_onnx import reduce_range

    dyn = get_pass("quantize_onnx_dynamic")
    ov = get_pass("quantize_openvino")
    monkeypatch.setattr(hardware, "cpu_features", lambda: CpuFeatures(avx2=True))
    assert hardware.int8_saturates()
    assert reduce_range(dyn.parse_config({})) is True
    assert reduce_range(dyn.parse_config({"reduce_range": False})) is False
    assert overflow_fix(ov.parse_config({})) == "enable"
    assert "reduce_range=True" in dyn().to_script(dyn.parse_config({})).code
    script = ov().to_script(ov.parse_config({})).code
    assert "overflow_fix=OverflowFix.ENABLE" in script
    monkeypatch.setattr(hardware, "cpu_features", lambda: CpuFeatures(avx2=True, avx_vnni=True))
    assert not hardware.int8_saturates()
    assert reduce_range(dyn.parse_config({})) is False
    assert overflow_fix(ov.parse_config({})) == "first_layer"
    assert overflow_fix(ov.parse_config({"overflow_fix": "disable"})) == "disable"
    assert "OverflowFix" not in ov().to_script(ov.parse_config({})).code
