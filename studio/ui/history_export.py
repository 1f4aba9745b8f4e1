"""History's Export: the selected runs as CSV, JSON or a Markdown report (studio.report)."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QFileDialog, QWidget

FILTERS = {"csv": "CSV (*.csv)", "json": "JSON (*.json)", "md": "Markdown (*.md)"}


def export_runs(
    parent: QWidget, repo: Any, ids: list[str], fmt_: str, path: str | None = None
) -> str | None:
    """Write runs ``ids`` to ``path`` (asked for when None); the path, or None if cancelled."""
    from studio import report

    details = [repo.get_run(r) for r in ids]
    text = {
        "csv": report.runs_to_csv,
        "json": report.runs_to_json,
        "md": report.runs_to_markdown,
    }[fmt_](details)
    if path is None:
        path, _ = QFileDialog.getSaveFileName(parent, "Export runs", f"runs.{fmt_}", FILTERS[fmt_])
    if not path:
        return None
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path
