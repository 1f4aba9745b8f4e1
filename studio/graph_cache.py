"""The graph cache: a model opened before shows at once while its live load runs (no Qt).

One JSON file per opened model (its info and graph), keyed by source, input spec and, for
files, size and modification time. Reads and writes run off the GUI thread.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class GraphCache:
    """Open results (model info + graph) of models opened before, one JSON file each, keyed
    by source, input spec and (for files) size and modification time. A hit is shown while
    the live load runs; the live result replaces it unless its content hash and graph are
    the same. Reads and writes run off the GUI thread."""

    VERSION = 1

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, source: str, input_spec: str | None) -> Path:
        import hashlib

        key = f"{self.VERSION}|{source}|{input_spec or ''}"
        path = Path(source.split("@", 1)[0].rsplit(":", 1)[0] if ":" in source else source)
        if not source.startswith("zoo:") and path.is_file():
            st = path.stat()
            key += f"|{st.st_size}|{st.st_mtime_ns}"
        return self.folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def get(self, source: str, input_spec: str | None) -> dict[str, Any] | None:
        import json

        from accel.graph import Graph

        path = self._path(source, input_spec)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("source") != source or not data.get("graph"):
                return None
            return {
                "info": dict(data["info"]),
                "raw_graph": data["graph"],
                "graph": Graph.from_dict(data["graph"]),
            }
        except FileNotFoundError:
            return None
        except Exception:  # noqa: BLE001 - a damaged cache file is dropped, never fatal
            log.warning("dropping the unreadable graph cache file %s", path)
            path.unlink(missing_ok=True)
            return None

    def put(self, source: str, input_spec: str | None, result: dict[str, Any]) -> None:
        import json
        import tempfile

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self._path(source, input_spec)
            data = {"source": source, "info": result.get("info") or {}, "graph": result["graph"]}
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, separators=(",", ":"))
            os.replace(tmp, path)
        except Exception:  # noqa: BLE001 - the cache is an optimisation
            log.warning("could not write the graph cache for %s", source, exc_info=True)

    def drop(self, source: str, input_spec: str | None) -> None:
        try:
            self._path(source, input_spec).unlink(missing_ok=True)
        except OSError:
            pass


def safe_name(source: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "_" for c in source)
    return keep.strip("._")[-80:] or "model"
