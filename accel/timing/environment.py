"""Versions and hardware recorded next to every timing result."""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import sys
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

_VERSIONED_PACKAGES = {
    "torch": ("torch",),
    "numpy": ("numpy",),
    "onnx": ("onnx",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "torchao": ("torchao",),
}


def _package_version(names: Sequence[str]) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment_info(device: str = "cpu") -> dict[str, Any]:
    """Versions and hardware recorded next to every benchmark result.

    Library versions come from package metadata (nothing heavy is imported). The GPU name is
    looked up only when ``device`` is CUDA or CUDA is already initialised in this process, so
    calling this never creates a CUDA context on its own.
    """
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_name(),
        "logical_cores": os.cpu_count(),
        "device": device,
    }
    for key, names in _VERSIONED_PACKAGES.items():
        env[key] = _package_version(names)
    env["gpu"] = None
    torch = sys.modules.get("torch")
    wants_cuda = str(device).startswith("cuda")
    if torch is not None and (wants_cuda or _cuda_initialized(torch)):
        try:
            if torch.cuda.is_available():
                index = torch.device(device).index if wants_cuda else None
                index = torch.cuda.current_device() if index is None else index
                env["gpu"] = torch.cuda.get_device_name(index)
                env["cuda"] = torch.version.cuda
        except Exception as exc:  # a broken driver must not break a benchmark report
            log.debug("could not query the GPU: %s", exc)
    return env


def _cuda_initialized(torch: Any) -> bool:
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False
