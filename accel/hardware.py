"""What this machine's CPU can do fast, read from the CPU's own flags (no library, no timing).

Headless and cheap: the OpenVINO pass's ``precision: auto`` and the search's seed order read
these. Linux reads ``/proc/cpuinfo``; elsewhere (or in a container hiding it) every flag is
False and the callers keep their f32 defaults.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class CpuFeatures:
    """The x86 flags that decide which low-precision kernels run fast."""

    name: str = ""
    avx2: bool = False  # 256-bit u8 x s8 multiply-adds: the int8 GEMM kernels of AVX2 CPUs
    avx512f: bool = False
    avx512_vnni: bool = False  # int8 dot products (VNNI)
    avx_vnni: bool = False  # VNNI on 256-bit vectors (client CPUs without AVX-512)
    avx512_bf16: bool = False  # bf16 dot products
    amx_bf16: bool = False  # Advanced Matrix Extensions (Sapphire Rapids and later)
    amx_int8: bool = False

    @property
    def bf16(self) -> bool:
        """bf16 matrix kernels in hardware (AMX or AVX-512 BF16)."""
        return self.amx_bf16 or self.avx512_bf16

    @property
    def int8(self) -> bool:
        """int8 dot-product kernels in hardware (AMX, AVX-512 VNNI or AVX-VNNI)."""
        return self.amx_int8 or self.avx512_vnni or self.avx_vnni

    def summary(self) -> str:
        flags = [f for f in ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx_vnni")]
        have = [f for f in flags if getattr(self, f)]
        if not have and self.avx2:
            have = ["avx2 (int8 without dot products, no bf16)"]
        return f"{self.name or 'CPU'}: {', '.join(have) or 'no bf16/int8 matrix extensions'}"


def parse_cpuinfo(text: str) -> CpuFeatures:
    """CpuFeatures from the text of ``/proc/cpuinfo`` (the first processor's lines)."""
    flags: set[str] = set()
    name = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not name:
            name = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return CpuFeatures(
        name=name,
        avx2="avx2" in flags,
        avx512f="avx512f" in flags,
        avx512_vnni="avx512_vnni" in flags,
        avx_vnni="avx_vnni" in flags,
        avx512_bf16="avx512_bf16" in flags,
        amx_bf16="amx_bf16" in flags,
        amx_int8="amx_int8" in flags,
    )


@functools.cache
def cpu_features() -> CpuFeatures:
    """This machine's CpuFeatures (read once)."""
    try:
        return parse_cpuinfo(CPUINFO.read_text(errors="replace"))
    except OSError:
        return CpuFeatures()


def default_openvino_precision(features: CpuFeatures | None = None) -> str:
    """The OpenVINO CPU precision hint worth starting from: bf16 where the CPU has bf16
    matrix kernels, else f32 (bench/bench_openvino_precision.py measures both)."""
    return "bf16" if (features or cpu_features()).bf16 else "f32"


def int8_saturates() -> bool:
    """Whether this CPU's int8 GEMM kernels multiply u8 x s8 pairs into int16 (AVX2's
    VPMADDUBSW, no VNNI / AMX), which saturates with full-range weights: ONNX Runtime's
    quantizers then want 7-bit weights (``reduce_range``) and NNCF its overflow fix on every
    layer. Measured on an AMD EPYC (AVX2): dynamic int8 cosine 0.977 (a small transformer),
    0.9998 with 7-bit weights."""
    return not cpu_features().int8
