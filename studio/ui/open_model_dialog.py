"""The "Open model…" dialog: a file, a zoo model, or a ``module:factory`` with an input spec.

The dialog only builds a source string (and an optional input spec); the model is
loaded by ``Services.open_model`` in a worker.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from accel.models.runtime import model_file_suffixes
from studio.ui.model_view import check_input_spec

# Every suffix a runtime loads (accel.models.runtime's table: .onnx, .xml, .pt2, ...).
MODEL_FILTER = f"Models ({' '.join('*' + s for s in model_file_suffixes())});;All files (*)"
# Listed without importing the zoo (it imports torch, seconds on a cold start).
ZOO_MODELS = {
    "mlp": ("MLP: Linear 1024-1024-1024-10 with ReLU", "x:float32[batch,1024]; batch=1..256:8"),
    "resnet": (
        "Small ResNet (3 stages of basic blocks, BatchNorm, residuals), 3x64x64 input",
        "x:float32[batch,3,64,64]; batch=1..64:1",
    ),
    "transformer": (
        "BERT-mini-style encoder (4 layers, hidden 256, 4 heads) + classifier",
        "input_ids:int64[batch,seq]{0..8000}; batch=1..32:1; seq=1..512:128",
    ),
    "lstm": (
        "Embedding + LSTM text classifier (vocab 5000, hidden 256, 4 classes)",
        "tokens:int64[batch,seq]{0..5000}; batch=1..64:1; seq=1..512:64",
    ),
}


def zoo_models() -> dict[str, tuple[str, str]]:
    """name -> (description, input spec); the real zoo when torch is already imported."""
    zoo = sys.modules.get("accel.models.zoo")
    if zoo is not None:
        return {n: (e.description, e.input_spec) for n, e in zoo.ZOO.items()}
    return dict(ZOO_MODELS)


class OpenModelDialog(QDialog):
    """Pick a model source. ``source()``, ``input_spec()`` and ``trust_pickle()`` after exec."""

    def __init__(
        self,
        parent: QWidget | None = None,
        recent: list[str] | None = None,
        last: str | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open model")
        self.resize(620, 420)
        self.tabs = QTabWidget()

        self.tabs.addTab(self._file_tab(recent), "File")
        self._make_zoo(last)
        self.tabs.addTab(self.zoo, "Zoo")
        self.tabs.addTab(self._factory_tab(), "module:factory")

        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(self._accept)
        self.buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(self.tabs, 1)
        lay.addWidget(self.buttons)
        self.tabs.setCurrentIndex(1)

    def _file_tab(self, recent: list[str] | None) -> QWidget:
        """A model file: its path, the trust box and what its pickles import; recent files."""
        file_tab = QWidget()
        self.path = QLineEdit(placeholderText="/path/to/model.onnx, .pt, .pt2, .ts")
        browse = QPushButton("Browse…")
        browse.clicked.connect(lambda *_: self._browse())
        self.trust = QCheckBox("Trust this file: allow full unpickling (it can run code)")
        self.trust.setToolTip(
            "Only for .pt files holding a pickled nn.Module from a source you trust; "
            "otherwise files load with weights_only=True"
        )
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(browse)
        # What the file's pickles would import, read (never run) when the box is ticked:
        # the person decides on facts.
        self.pickle_facts = QLabel("")
        self.pickle_facts.setObjectName("pickleFacts")
        self.pickle_facts.setWordWrap(True)
        self.trust.toggled.connect(lambda *_: self._show_pickle_facts())
        self.path.editingFinished.connect(self._show_pickle_facts)
        fl = QVBoxLayout(file_tab)
        fl.addLayout(row)
        fl.addWidget(self.trust)
        fl.addWidget(self.pickle_facts)
        if recent:
            fl.addWidget(QLabel("Recent:"))
            self.recent = QListWidget()
            for r in recent:
                self.recent.addItem(r)
            self.recent.itemClicked.connect(lambda it: self.path.setText(it.text()))
            self.recent.itemDoubleClicked.connect(
                lambda it: (self.path.setText(it.text()), self.accept())
            )
            fl.addWidget(self.recent, 1)
        else:
            fl.addStretch(1)
        return file_tab

    def _make_zoo(self, last: str | None) -> None:
        """The zoo's models, the last one picked selected."""
        self.zoo = QListWidget()
        for name, (desc, spec) in zoo_models().items():
            item = QListWidgetItem(f"zoo:{name}  —  {desc}")
            item.setData(Qt.ItemDataRole.UserRole, f"zoo:{name}")
            item.setToolTip(spec)
            self.zoo.addItem(item)
        # The last zoo model picked (it always came back with resnet selected).
        picked = [
            i
            for i in range(self.zoo.count())
            if self.zoo.item(i).data(Qt.ItemDataRole.UserRole) == last
        ]
        self.zoo.setCurrentRow(picked[0] if picked else (1 if self.zoo.count() > 1 else 0))
        self.zoo.itemDoubleClicked.connect(lambda _: self.accept())

    def _factory_tab(self) -> QWidget:
        """A module:factory, its optional weights and the input spec."""
        fac_tab = QWidget()
        self.factory = QLineEdit(
            placeholderText="my_pkg.nets:build_model(width=64)  or  path/net.py:make"
        )
        self.weights = QLineEdit(placeholderText="optional state_dict file (.pt / .safetensors)")
        self.spec = QLineEdit(placeholderText="x:float32[batch,3,224,224]; batch=1..64:1")
        self.spec.setToolTip("Input spec; required unless the factory module defines one")
        self.spec_error = QLabel("")
        self.spec_error.setStyleSheet("color: #e03131;")
        self.spec_error.setWordWrap(True)
        self.spec.textChanged.connect(self._validate)
        form = QFormLayout(fac_tab)
        form.addRow("Factory", self.factory)
        form.addRow("Weights", self.weights)
        form.addRow("Input spec", self.spec)
        form.addRow("", self.spec_error)
        return fac_tab

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open model", "", MODEL_FILTER)
        if path:
            self.path.setText(path)

    def _show_pickle_facts(self) -> None:
        path = self.path.text().strip()
        if not (self.trust.isChecked() and path and os.path.isfile(path)):
            self.pickle_facts.setText("")
            return
        from accel.models.pickle_scan import file_imports
        from studio.ui._async import run_in_thread

        self.pickle_facts.setText("reading what the file's pickles import…")

        def show(text: str, asked: str = path) -> None:
            if self.path.text().strip() == asked and self.trust.isChecked():
                self.pickle_facts.setText(f"{os.path.basename(asked)}: {text or 'unreadable'}")

        run_in_thread(lambda: file_imports(Path(path)), show, parent=self)

    def _validate(self) -> bool:
        err = check_input_spec(self.spec.text())
        self.spec_error.setText(err or "")
        self.buttons.button(QDialogButtonBox.StandardButton.Open).setEnabled(err is None)
        return err is None

    def _accept(self) -> None:
        if self.tabs.currentIndex() == 2 and not self._validate():
            return
        if self.source():
            self.accept()

    def source(self) -> str:
        i = self.tabs.currentIndex()
        if i == 0:
            return self.path.text().strip()
        if i == 1:
            item = self.zoo.currentItem()
            return item.data(Qt.ItemDataRole.UserRole) if item else ""
        src = self.factory.text().strip()
        w = self.weights.text().strip()
        return f"{src}@{w}" if src and w else src

    def input_spec(self) -> str | None:
        if self.tabs.currentIndex() == 2:
            return self.spec.text().strip() or None
        return None

    def trust_pickle(self) -> bool:
        return self.tabs.currentIndex() == 0 and self.trust.isChecked()
