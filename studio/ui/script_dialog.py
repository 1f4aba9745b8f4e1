"""The recipe as a standalone Python script: highlighted, copyable, savable."""

from __future__ import annotations

import re

from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QSyntaxHighlighter,
    QTextCharFormat,
)
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.ui._async import run_in_thread

_KEYWORDS = (
    "and as assert break class continue def del elif else except False finally for from global if import in is "
    "lambda None nonlocal not or pass raise return True try while with yield"
).split()


class PythonHighlighter(QSyntaxHighlighter):
    """Keywords, strings, comments, numbers and decorators."""

    def __init__(self, document, dark: bool = False):
        super().__init__(document)

        def fmt(color: str, bold: bool = False, italic: bool = False) -> QTextCharFormat:
            f = QTextCharFormat()
            f.setForeground(QColor(color))
            if bold:
                f.setFontWeight(QFont.Weight.Bold)
            f.setFontItalic(italic)
            return f

        kw, st, cm, nm, dc = (
            ("#c678dd", "#98c379", "#7f848e", "#d19a66", "#61afef")
            if dark
            else ("#0033b3", "#067d17", "#8c8c8c", "#1750eb", "#9e880d")
        )
        self.rules = [
            (re.compile(r"\b(" + "|".join(_KEYWORDS) + r")\b"), fmt(kw, bold=True)),
            (re.compile(r"\b\d+(\.\d+)?([eE][-+]?\d+)?\b"), fmt(nm)),
            (re.compile(r"@\w+"), fmt(dc)),
            (re.compile(r"[rbf]?'[^'\n]*'|[rbf]?\"[^\"\n]*\""), fmt(st)),
            (re.compile(r"#[^\n]*"), fmt(cm, italic=True)),
        ]
        self.doc_fmt = fmt(st, italic=True)

    def highlightBlock(self, text: str) -> None:  # noqa: N802 - Qt API
        for rx, f in self.rules:
            for m in rx.finditer(text):
                self.setFormat(m.start(), m.end() - m.start(), f)
        # triple-quoted strings spanning lines
        self.setCurrentBlockState(0)
        start = 0 if self.previousBlockState() == 1 else text.find('"""')
        while start >= 0:
            end = text.find(
                '"""', start + (0 if self.previousBlockState() == 1 and start == 0 else 3)
            )
            if end < 0:
                self.setCurrentBlockState(1)
                self.setFormat(start, len(text) - start, self.doc_fmt)
                break
            self.setFormat(start, end - start + 3, self.doc_fmt)
            start = text.find('"""', end + 3)


class ScriptDialog(QDialog):
    """Shows ``accel.codegen.recipe_to_script(state.recipe)`` (generated off the GUI thread)."""

    def __init__(self, state, services=None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(f"Recipe {state.recipe.name!r} as a Python script")
        self.resize(900, 700)
        self.state = state
        self.script = ""
        self.info = QLabel("generating…")
        self.info.setWordWrap(True)
        self.editor = QPlainTextEdit()
        self.editor.setReadOnly(True)
        self.editor.setObjectName("scriptText")
        self.editor.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.editor.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        dark = self.palette().window().color().lightness() < 128
        self.highlighter = PythonHighlighter(self.editor.document(), dark)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.btn_save = QPushButton("Save…")
        self.btn_copy = QPushButton("Copy")
        self.btn_save.setEnabled(False)
        self.btn_copy.setEnabled(False)
        buttons.addButton(self.btn_copy, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.btn_save, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        self.btn_save.clicked.connect(lambda: self.save())
        self.btn_copy.clicked.connect(self.copy)
        lay = QVBoxLayout(self)
        lay.addWidget(self.info)
        lay.addWidget(self.editor, 1)
        lay.addWidget(buttons)
        recipe = state.recipe

        def make() -> str:
            from accel.codegen import recipe_to_script

            return recipe_to_script(recipe)

        run_in_thread(make, self._ready, self._failed, self)

    def _ready(self, script: str) -> None:
        self.script = script
        self.editor.setPlainText(script)
        self.info.setText(
            f"{len(script.splitlines())} lines, public libraries only. Run it with "
            "<code>python script.py --out results/</code>; it prints the same metrics as the studio."
        )
        self.btn_save.setEnabled(True)
        self.btn_copy.setEnabled(True)

    def _failed(self, exc: BaseException) -> None:
        self.info.setText(f"<span style='color:#d03030'>Cannot export this recipe: {exc}</span>")

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.script)

    def save(self, path: str | None = None) -> bool:
        if not path:
            path, _ = QFileDialog.getSaveFileName(
                self, "Save script", f"{self.state.recipe.name}.py", "Python (*.py)"
            )
        if not path:
            return False
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(self.script)
        except OSError as exc:
            QMessageBox.warning(self, "Cannot save", str(exc))
            return False
        return True
