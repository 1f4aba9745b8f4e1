"""The question before runs are deleted from the history: it names them, Cancel is the
default, and Enter never deletes (not even with the Delete button focused)."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QCheckBox, QMessageBox, QWidget

from studio.fmt import counted


def confirm_delete_box(
    parent: QWidget, ids: list[str], rows: list[Any]
) -> tuple[QMessageBox, QCheckBox]:
    """The dialog (not shown) and its "also delete the files" box; ``rows`` are the loaded
    RunRecords, for the names."""
    by_id = {r.id: r for r in rows}
    names = []
    for rid in ids[:8]:
        r = by_id.get(rid)
        label = (getattr(r, "name", "") or getattr(r, "model_source", "") or "") if r else ""
        names.append(f"{rid[:8]} {label}".strip())
    more = f"\n… and {len(ids) - 8} more" if len(ids) > 8 else ""
    box = QMessageBox(
        QMessageBox.Icon.Warning,
        "Delete runs",
        f"Delete {counted(len(ids), 'run')} from the history?\n\n" + "\n".join(names) + more,
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
        parent,
    )
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.setEscapeButton(QMessageBox.StandardButton.Cancel)
    delete = box.button(QMessageBox.StandardButton.Yes)
    delete.setText(f"Delete {counted(len(ids), 'run')}")
    # A focused auto-default button takes Enter for itself: this one never does, so Enter
    # reaches the dialog's default button, Cancel.
    delete.setAutoDefault(False)
    box.button(QMessageBox.StandardButton.Cancel).setFocus()
    # Parented at birth: PySide's setCheckBox leaves a parentless check box owned by Python,
    # which deleted it under the live dialog when the caller returned (a bus error on X11).
    files = QCheckBox("also delete their artifact files (models, ONNX files, reports)", box)
    box.setCheckBox(files)

    def explain(on: bool) -> None:
        box.setInformativeText(
            "Their run folders (models, ONNX files, reports) are deleted from disk too; "
            "this cannot be undone."
            if on
            else "Only the history entries go; the run folders stay on disk."
        )

    files.toggled.connect(explain)
    explain(False)
    return box, files
