"""The Optimize dialog's settings: the model, the parity budget, the objective, the budget,
the passes allowed to change weights and where trials run; ``config()`` reads them as a
``SearchConfig``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QSpinBox,
    QWidget,
)

# The widgets the dialog reaches as its own attributes (``dialog.model_edit`` ...).
FIELDS = (
    "model_edit",
    "input_edit",
    "device_combo",
    "cosine_spin",
    "objective_combo",
    "budget_spin",
    "trials_spin",
    "allow_prune",
    "allow_distill",
    "allow_qat",
    "allow_sensitivity",
    "where_combo",
    "cluster_edit",
    "out_edit",
)
# Locked while a search runs.
LOCKED = (
    "model_edit",
    "input_edit",
    "device_combo",
    "cosine_spin",
    "objective_combo",
    "budget_spin",
    "trials_spin",
    "where_combo",
    "out_edit",
)


class SearchForm(QWidget):
    """The search's settings; ``state`` gives the model, ``services`` the lanes and folder."""

    def __init__(self, state, services, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model_fields(state, services)
        self._goal_fields()
        allow = self._allow_row()
        where = self._where_row()
        self.out_edit = QLineEdit(str(Path(services.data_dir()) / "searches"))
        form = QFormLayout(self)
        form.addRow("Model", self.model_edit)
        form.addRow("Input spec", self.input_edit)
        form.addRow("Device", self.device_combo)
        form.addRow("Max cosine drop", self.cosine_spin)
        form.addRow("Objective", self.objective_combo)
        form.addRow("Budget", self.budget_spin)
        form.addRow("Max trials", self.trials_spin)
        form.addRow("Allow passes that change weights", allow)
        form.addRow("Run trials on", where)
        form.addRow("Output folder", self.out_edit)

    def _model_fields(self, state, services) -> None:
        self.model_edit = QLineEdit(state.model_source or "")
        self.model_edit.setPlaceholderText("zoo:resnet, model.onnx, pkg.mod:factory ...")
        self.input_edit = QLineEdit(state.input_spec or "")
        self.input_edit.setPlaceholderText("default: the model's own input spec")
        self.device_combo = QComboBox()
        self.device_combo.addItems(
            ["cpu", *[ln.name for ln in services.pool.lanes if ln.name.startswith("cuda")]]
        )

    def _goal_fields(self) -> None:
        self.cosine_spin = QDoubleSpinBox()
        self.cosine_spin.setDecimals(5)
        self.cosine_spin.setRange(0.0, 1.0)
        self.cosine_spin.setSingleStep(0.0005)
        self.cosine_spin.setValue(0.001)
        self.cosine_spin.setToolTip("parity budget: 1 - the smallest cosine similarity allowed")
        self.objective_combo = QComboBox()
        from accel.search.engine import OBJECTIVES  # tokens_per_s, ttft: decoder LMs generating

        self.objective_combo.addItems(list(OBJECTIVES))
        self.objective_combo.setToolTip(
            "latency / throughput / size of one forward call; tokens_per_s / ttft: a decoder "
            "language model generating (prompt 128, 64 new tokens), gated on teacher-forced "
            "logits cosine"
        )
        self.budget_spin = QDoubleSpinBox()
        self.budget_spin.setRange(0.1, 24 * 60)
        self.budget_spin.setValue(15.0)
        self.budget_spin.setSuffix(" min")
        self.trials_spin = QSpinBox()
        self.trials_spin.setRange(0, 10000)
        self.trials_spin.setSpecialValueText("no limit")

    def _allow_row(self) -> QHBoxLayout:
        self.allow_prune = QCheckBox("pruning")
        self.allow_distill = QCheckBox("distillation after pruning")
        self.allow_distill.setToolTip(
            "train the pruned model towards the original's outputs on the calibration inputs "
            "(bounded steps and seconds, counted in the budget); kept only if held-out inputs agree"
        )
        self.allow_distill.setEnabled(False)
        self.allow_prune.toggled.connect(self.allow_distill.setEnabled)
        self.allow_qat = QCheckBox("QAT")
        allow = QHBoxLayout()
        allow.addWidget(self.allow_prune)
        allow.addWidget(self.allow_distill)
        allow.addWidget(self.allow_qat)
        self.allow_sensitivity = QCheckBox("quantization exclude sets (sensitivity)")
        self.allow_sensitivity.setToolTip(
            "analyse per-layer sensitivity after the first seeds (counts in the budget) and "
            "search keeping the "
            "1, 3 or 10 % most sensitive layers in float"
        )
        allow.addWidget(self.allow_sensitivity)
        allow.addStretch(1)
        return allow

    def _where_row(self) -> QHBoxLayout:
        self.where_combo = QComboBox()
        self.where_combo.addItems(["local workers", "Ray cluster"])
        self.cluster_edit = QLineEdit()
        self.cluster_edit.setPlaceholderText("HOST:PORT, ray://HOST:PORT or auto")
        self.cluster_edit.setEnabled(False)
        self.where_combo.currentIndexChanged.connect(lambda i: self.cluster_edit.setEnabled(i == 1))
        where = QHBoxLayout()
        where.addWidget(self.where_combo)
        where.addWidget(self.cluster_edit, 1)
        return where

    def cluster(self) -> str | None:
        """The Ray cluster's address ("" when asked for but not given); None: local workers."""
        if self.where_combo.currentIndex() != 1:
            return None
        return self.cluster_edit.text().strip()

    def lock(self, running: bool) -> None:
        for name in LOCKED:
            getattr(self, name).setEnabled(not running)

    def config(self) -> Any:
        from accel.search import SearchConfig

        allow = tuple(
            n
            for n, box in (
                ("prune", self.allow_prune),
                ("distill", self.allow_distill),
                ("qat", self.allow_qat),
                ("sensitivity", self.allow_sensitivity),
            )
            if box.isChecked() and box.isEnabled()
        )
        return SearchConfig(
            model=self.model_edit.text().strip(),
            input_spec=self.input_edit.text().strip() or None,
            device=self.device_combo.currentText(),
            max_cosine_drop=self.cosine_spin.value(),
            objective=self.objective_combo.currentText(),
            budget_s=self.budget_spin.value() * 60.0,
            max_trials=self.trials_spin.value() or None,
            allow=allow,
            out_dir=self.out_edit.text().strip(),
        )
