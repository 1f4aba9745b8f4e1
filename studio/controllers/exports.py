"""The ONNX export of the current model (for Netron): the ``export_onnx`` job.

``export_onnx()`` exports the open torch model in a worker to ``export_path()`` (named by
its content hash, so an export made in an earlier session is found again and never shown
stale); ``onnxExported(path)`` says where it is and ``state.model_info["onnx_export"]``
keeps it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal

from accel.job_specs import ExportOnnxJob
from studio.controllers.base import JobController
from studio.graph_cache import safe_name


class ExportController(JobController):
    """The Export-to-ONNX action (see the module docstring)."""

    name = "export"
    onnxExported = Signal(str)  # path of the ONNX export of the current model

    def export_path(self) -> Path:
        """Where the ONNX export of the current model goes."""
        st = self.state
        digest = str((st.model_info or {}).get("content_hash") or "")[:12]
        name = safe_name(st.model_source or "model") + (f"-{digest}" if digest else "")
        # One folder per export: the pass may write external data next to the file.
        return self.ctx.data_dir() / "exports" / name / "model.onnx"

    def export_onnx(self) -> str | None:
        """Export the current torch model to ONNX in a worker; the job id, or None."""
        st = self.state
        if not st.model_source:
            return None
        out = self.export_path()
        out.parent.mkdir(parents=True, exist_ok=True)
        spec = self.spec(ExportOnnxJob, st.model_source, st.input_spec, out=str(out))
        if spec is None:
            return None
        job_id = self.submit(spec, {"source": st.model_source}, device="cpu").job_id
        st.status.emit("exporting to ONNX…")
        return job_id

    def succeeded(self, job_id: str, ctx: dict[str, Any], result: dict[str, Any]) -> None:
        path = str(result.get("path") or "")
        self.state.model_info = {**self.state.model_info, "onnx_export": path}
        self.onnxExported.emit(path)
        self.state.status.emit(f"exported {path}")
