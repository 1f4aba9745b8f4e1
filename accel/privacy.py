"""The studio sends nothing anywhere: third-party telemetry is off in every process that runs
the engine (the CLI, the window, every worker) and in exported scripts.

Libraries phone home by default: OpenVINO and NNCF send usage events to Google Analytics
through ``openvino_telemetry`` (forking a process per message), Ray reports usage stats, the
Hugging Face hub counts downloads and looks files up. ``disable_telemetry()`` turns all of
that off for this process and the processes it starts, without touching the user's own
settings (no consent file is written; nothing under ``~/intel`` or ``~/.cache`` changes):

- environment switches the libraries document (``TELEMETRY_ENV``), set for this process and
  inherited by its children;
- ``openvino_telemetry`` cannot be imported (OpenVINO's converter and NNCF then use their own
  no-op stand-ins, as they do when the package is not installed); where it was imported
  before, its sender is made a no-op;
- ONNX Runtime's telemetry is switched off: ``ORT_DISABLE_TELEMETRY`` (its Linux 1DS
  client) and its telemetry events when it is imported; ONNX Runtime GenAI's events too
  (``onnxruntime_genai.disable_telemetry_events()`` when it is imported; the ort_genai
  pass's exported script calls it itself).
- OpenVINO GenAI and OpenVINO Tokenizers (the ``pipeline: genai`` path) bring no sender of
  their own: they import openvino (whose converter would import ``openvino_telemetry``,
  blocked above) and their native libraries call no socket, name lookup or HTTP client
  (tests/accel/test_privacy.py checks both).

``SCRIPT_PREAMBLE`` is the same in plain Python for exported scripts.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

# Each library's documented off switch. Set (not defaulted): the studio must send nothing
# even where the user's shell enabled a library's reporting.
TELEMETRY_ENV: dict[str, str] = {
    "HF_HUB_DISABLE_TELEMETRY": "1",  # huggingface_hub, transformers, diffusers, timm
    "HF_HUB_OFFLINE": "1",  # no hub lookups: models are built from configs
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    "RAY_USAGE_STATS_ENABLED": "0",  # Ray's usage stats report
    "RAY_USAGE_STATS_PROMPT_ENABLED": "0",
    "DO_NOT_TRACK": "1",  # the cross-tool convention (consoledonottrack.com)
    "NNCF_CI": "1",  # NNCF's own switch to its no-op telemetry
    "GRADIO_ANALYTICS_ENABLED": "False",
    # ONNX Runtime's Linux wheels carry a 1DS telemetry client that keeps a device id and an
    # event store under ~/.cache/Microsoft/DeveloperTools/.onnxruntime; this switch stops it.
    "ORT_DISABLE_TELEMETRY": "1",
}
# Packages whose only job is to send telemetry: never imported in a studio process.
BLOCKED_PACKAGES: tuple[str, ...] = ("openvino_telemetry",)
# Packages whose telemetry events are switched off as they are imported.
EVENTS_OFF_PACKAGES: tuple[str, ...] = ("onnxruntime", "onnxruntime_genai")
# The packages whose events this process switched off (what the tests check).
EVENTS_OFF: set[str] = set()


def _script_preamble() -> str:
    env = "".join(f"        {k!r}: {v!r},\n" for k, v in TELEMETRY_ENV.items())
    return (
        "# Third-party telemetry off (OpenVINO/NNCF, ONNX Runtime (GenAI), Ray, Hugging Face): this script sends\n"
        "# nothing. A blocked package fails to import and its users fall back to no-ops.\n"
        "os.environ.update(\n    {\n" + env + "    }\n)\n"
        f"sys.modules.update(dict.fromkeys({BLOCKED_PACKAGES!r}))\n"
    )


# The same for exported scripts (which import os and sys themselves).
SCRIPT_PREAMBLE = _script_preamble()


class _TelemetryBlocker(importlib.abc.MetaPathFinder):
    """Refuses to import telemetry packages; switches ONNX Runtime's (and ONNX Runtime
    GenAI's) events off on import."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.partition(".")[0]
        if top in BLOCKED_PACKAGES:
            raise ImportError(f"{top} is disabled: Accel Studio sends no telemetry")
        if fullname in EVENTS_OFF_PACKAGES:
            return self._onnxruntime_spec(fullname, path, target)
        return None

    def _onnxruntime_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _ort_events_off(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _ort_events_off(module: Any) -> None:
    off = getattr(module, "disable_telemetry_events", None)
    if callable(off):
        try:
            off()
            EVENTS_OFF.add(module.__name__)
        except Exception as exc:  # noqa: BLE001 - a library quirk must not stop an import
            log.debug("%s.disable_telemetry_events failed: %s", module.__name__, exc)


def _silence_imported() -> None:
    """Telemetry packages imported before ``disable_telemetry`` ran: make them send nothing."""
    sender = sys.modules.get("openvino_telemetry.utils.sender")
    cls = getattr(sender, "TelemetrySender", None)
    if cls is not None:
        cls.send = lambda self, *a, **k: None  # type: ignore[method-assign]
    for name in EVENTS_OFF_PACKAGES:
        if sys.modules.get(name) is not None:
            _ort_events_off(sys.modules[name])


def disable_telemetry() -> None:
    """Turn third-party telemetry off in this process and the ones it starts (idempotent)."""
    os.environ.update(TELEMETRY_ENV)
    if not any(isinstance(f, _TelemetryBlocker) for f in sys.meta_path):
        sys.meta_path.insert(0, _TelemetryBlocker())
    _silence_imported()


__all__ = [
    "BLOCKED_PACKAGES",
    "EVENTS_OFF",
    "SCRIPT_PREAMBLE",
    "TELEMETRY_ENV",
    "disable_telemetry",
]
