"""Prefix artifact cache: models built by a prefix of steps, kept on disk by key.

A trial whose first steps (same passes, same parameters, same model content hash, device,
input spec and data) were built before starts from the stored model instead of rebuilding
it: one ``export_onnx`` serves every ONNX trial, one ``openvino`` conversion (or NNCF
quantization) every trial that shares it, and the final re-timing of the top trials loads
their models instead of building them again. Only models that live in files (an ONNX graph,
a runtime's file such as an OpenVINO IR with its weights) are stored; torch prefixes are
rebuilt (cheap, and a module is not safe to unpickle). Entries are folders ``ROOT/KEY/`` with the model files (hard links where
the file system allows) and ``entry.json``; writes go to a temporary folder renamed into
place, so worker processes and Ray tasks can share one cache. The cache is bounded by
entries and bytes; the least recently used entries go first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.jsonable import jsonable

log = logging.getLogger(__name__)

# LoadedModel fields stored with an entry (besides the files); module is never stored.
_FIELDS = (
    "kind",
    "num_params",
    "size_bytes",
    "format",
    "input_casts",
    "providers",
    "session_options",
    "metadata",
)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    stored: int = 0
    evicted: int = 0
    reused_steps: int = 0
    hit_keys: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "stored": self.stored,
            "evicted": self.evicted,
            "reused_steps": self.reused_steps,
        }


class PrefixCache:
    """See module docstring. ``max_entries`` / ``max_bytes`` bound the folder."""

    def __init__(
        self, root: str | Path, *, max_entries: int = 32, max_bytes: int = 8 * 1024**3
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.stats = CacheStats()

    @staticmethod
    def model_file(model: Any) -> tuple[str, Path] | None:
        """(field, path) of the file a model without a torch module lives in: its runtime's
        file (an OpenVINO IR) or its ONNX graph; None for an in-memory model."""
        if getattr(model, "module", None) is not None:
            return None
        for name in ("runtime_file", "onnx_path"):
            path = getattr(model, name, None)
            if path is not None:
                # A model folder (ONNX Runtime GenAI's) is not stored: one file and its
                # companions make an entry.
                return (name, Path(path)) if Path(path).is_file() else None
        return None

    @classmethod
    def cacheable(cls, model: Any) -> bool:
        return cls.model_file(model) is not None

    def get(self, key: str, original: Any) -> Any | None:
        """The stored model for ``key`` (a LoadedModel built on ``original``), or None."""
        entry = self.root / key
        meta_path = entry / "entry.json"
        if not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            path = entry / meta["file"]
            role = meta.get("role", "onnx_path")
            if not path.is_file() or role not in ("onnx_path", "runtime_file"):
                return None
            os.utime(meta_path)  # least recently used goes first
        except (OSError, ValueError, KeyError):
            return None
        fields = {k: meta["fields"][k] for k in _FIELDS if k in meta["fields"]}
        files = {"onnx_path": None, "runtime_file": None, role: path}
        return original.replace(module=None, _session=None, **files, **fields)

    def put(self, key: str, model: Any) -> bool:
        """Store ``model`` under ``key`` (no-op when present or not cacheable)."""
        found = self.model_file(model)
        if found is None or (self.root / key / "entry.json").is_file():
            return False
        role, src = found
        files = [src, *_companions(src)]
        tmp = self.root / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        try:
            tmp.mkdir(parents=True)
            for f in files:
                _link_or_copy(f, tmp / f.name)
            meta = {
                "file": src.name,
                "role": role,
                "fields": {k: jsonable(getattr(model, k, None)) for k in _FIELDS},
                "created": time.time(),
            }
            (tmp / "entry.json").write_text(json.dumps(meta))
            try:
                tmp.rename(self.root / key)
            except OSError:  # another process stored the same key first
                shutil.rmtree(tmp, ignore_errors=True)
                return False
        except OSError as exc:
            log.warning("could not cache %s: %s", src, exc)
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        self.stats.stored += 1
        self._evict(keep=key)
        return True

    def entries(self) -> list[tuple[Path, float, int]]:
        out = []
        for d in self.root.iterdir():
            meta = d / "entry.json"
            if d.name.startswith(".") or not meta.is_file():
                continue
            size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
            out.append((d, meta.stat().st_mtime, size))
        return out

    def _evict(self, keep: str) -> None:
        entries = sorted(self.entries(), key=lambda e: e[1])
        total = sum(e[2] for e in entries)
        count = len(entries)
        for d, _, size in entries:
            if count <= self.max_entries and total <= self.max_bytes:
                break
            if d.name == keep:
                continue
            shutil.rmtree(d, ignore_errors=True)
            count -= 1
            total -= size
            self.stats.evicted += 1


def _companions(path: Path) -> list[Path]:
    """The files a model file needs beside it: those named after it (an ONNX file's external
    data, ``model.onnx.data``) or sharing its stem (an OpenVINO IR's weights, ``model.bin``);
    a step's folder holds one model."""
    out = []
    with contextlib.suppress(OSError):
        for f in path.parent.iterdir():
            if f != path and f.is_file() and (f.name.startswith(path.name) or f.stem == path.stem):
                out.append(f)
    return out


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
