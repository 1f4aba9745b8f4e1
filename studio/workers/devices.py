"""Finding GPUs without initializing CUDA in the studio process.

The parent of the workers must never touch CUDA (a forked or later-spawned
child would inherit a broken context, and the GUI would hold GPU memory), so
GPUs are found from ``CUDA_VISIBLE_DEVICES`` or ``nvidia-smi -L`` only.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

GPU_ENV = "ACCEL_STUDIO_GPUS"  # "0,1" to choose GPUs, "" for none: overrides detection
_SMI_LINE = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?$")


@dataclass(frozen=True)
class GpuInfo:
    visible_id: str  # the value to put in CUDA_VISIBLE_DEVICES for a worker on this GPU
    name: str = ""


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    gpus = []
    for line in text.splitlines():
        m = _SMI_LINE.match(line.strip())
        if m:
            gpus.append(GpuInfo(visible_id=m.group(1), name=m.group(2)))
    return gpus


def detect_gpus(env: Mapping[str, str] | None = None) -> list[GpuInfo]:
    """GPUs the workers may use; [] on a machine without NVIDIA GPUs."""
    env = os.environ if env is None else env
    for key in (GPU_ENV, "CUDA_VISIBLE_DEVICES"):
        if key in env:
            value = env[key].strip()
            if value in ("", "-1", "NoDevFiles"):
                return []
            return [GpuInfo(visible_id=v.strip()) for v in value.split(",") if v.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("nvidia-smi -L failed (%s): no GPU workers", exc)
        return []
    return parse_nvidia_smi(out)
