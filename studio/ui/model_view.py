"""Model panel: what is open (source, kind, input spec, parameters, size) and one-click Profile.

The input spec is editable; it is checked with ``accel.models.InputSpec.parse`` as
you type (the error shows inline) and Apply reopens the model with it.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.ui.availability import set_available
from studio.ui.slots import on_click


def fmt_bytes(n: int | float | None) -> str:
    if not n:
        return "–"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def check_input_spec(text: str) -> str | None:
    """None when ``text`` parses as an InputSpec, else the parser's message."""
    if not text.strip():
        return None  # empty: the model's own spec
    from accel.models import InputSpec

    try:
        InputSpec.parse(text)
    except Exception as exc:
        return str(exc)
    return None


class ModelView(QWidget):
    """The Model panel."""

    def __init__(self, state, services=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ModelView")
        self.state = state
        self.services = services
        self._make_fields()
        self.spec = QLineEdit()
        self.spec.setPlaceholderText("x:float32[batch,3,224,224]; batch=1..64:1")
        self.spec.setToolTip(
            "Input spec: name:dtype[shape] per input, ';'-separated; symbolic dims such as "
            "batch get a range: batch=1..64:1 (min..max:default)"
        )
        self.spec.textEdited.connect(self._validate)
        self.spec.returnPressed.connect(self.apply_spec)
        self.spec_error = QLabel("")
        self.spec_error.setObjectName("specError")
        self.spec_error.setWordWrap(True)
        self.spec_error.setStyleSheet("color: #e03131;")
        self.spec_error.hide()
        self.apply_btn = QPushButton("Apply")
        self.apply_btn.setToolTip("Reopen the model with this input spec")
        on_click(self.apply_btn.clicked, self.apply_spec)
        self.apply_btn.setEnabled(False)
        # The spec gets the panel's whole width (it was cut off next to the button).
        spec_row = QVBoxLayout()
        spec_row.addWidget(self.spec)

        self.profile_btn = QPushButton("Profile")
        self.profile_btn.setToolTip("Time every layer of this model (Ctrl+P)")
        on_click(self.profile_btn.clicked, self._profile)
        self.profile_btn.setEnabled(False)
        self.status = QLabel("")
        self.status.setWordWrap(True)

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Kind", self.kind)
        form.addRow("Parameters", self.params)
        form.addRow("Size", self.size)
        form.addRow("Weights", self.dtypes)
        form.addRow("Graph", self.graph_info)
        lay = QVBoxLayout(self)
        lay.addWidget(self.title)
        lay.addLayout(form)
        lay.addWidget(QLabel("Input spec"))
        lay.addLayout(spec_row)
        lay.addWidget(self.spec_error)
        row = QHBoxLayout()
        row.addWidget(self.apply_btn)
        row.addWidget(self.profile_btn)
        row.addStretch(1)
        lay.addLayout(row)
        lay.addWidget(self.status)
        lay.addStretch(1)

        self._connect(state, services)
        self._on_model()

    def _connect(self, state, services) -> None:
        state.modelChanged.connect(self._on_model)
        state.graphChanged.connect(self._on_graph)
        state.modelLoading.connect(self._on_loading)
        state.modelFailed.connect(self._on_failed)
        state.profileChanged.connect(self._on_profile)
        if services is not None:
            services.jobFailed.connect(self._on_job_failed)
            if hasattr(services, "runFinished"):
                services.runFinished.connect(self._on_run_finished)

    def _make_fields(self) -> None:
        """The model's title and facts (kind, parameters, size, weights, graph)."""
        self.title = QLabel("<i>No model open</i>")
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.title.setWordWrap(True)
        self.kind = QLabel("–")
        self.params = QLabel("–")
        self.size = QLabel("–")
        self.dtypes = QLabel("–")
        self.graph_info = QLabel("–")
        self.graph_info.setWordWrap(True)
        for lab in (self.kind, self.params, self.size, self.dtypes, self.graph_info):
            lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    # -- state -> view --------------------------------------------------------------------
    def _on_loading(self, source: str) -> None:
        self.status.setText(f"Opening <b>{html.escape(source)}</b> in a worker…")
        self._profile_available("the model is opening")

    def _on_failed(self, message: str) -> None:
        # The first line, wrapped; the whole message on hover. It goes with the next action
        # that succeeds (a model opened, a profile, a run), see _clear_error.
        first = message.strip().splitlines()[0] if message.strip() else message
        self.status.setText(f"<span style='color:#e03131'>{html.escape(first)}</span>")
        self.status.setToolTip(message)
        self._profile_available(None if self.state.model_source else "open a model first")

    def _clear_error(self, *_: Any) -> None:
        """A later success replaces a stale error (it stayed, clipped, after good runs)."""
        if self.status.toolTip():
            self.status.setText("")
            self.status.setToolTip("")

    def _on_run_finished(self, _job_id: str, outcome: Any) -> None:
        if getattr(outcome, "ok", False):
            self._clear_error()

    def _on_job_failed(self, kind: str, message: str) -> None:
        if kind == "profile":
            self._profile_available(None)
            self.status.setText(
                f"<span style='color:#e03131'>Profile failed: {html.escape(message)}</span>"
            )

    def _on_model(self) -> None:
        st = self.state
        info = st.model_info or {}
        if not st.model_source:
            set_available(self.apply_btn, "open a model first", "")
            self._profile_available("open a model first")
            return
        cls = info.get("class_name") or ""
        self.title.setText(
            f"<b>{html.escape(st.model_source)}</b>"
            + (f" <span style='color:gray'>({html.escape(cls)})</span>" if cls else "")
        )
        fmt = info.get("format") or ""
        self.kind.setText(f"{info.get('kind', '?')}" + (f" · {fmt}" if fmt else ""))
        n = info.get("num_params")
        self.params.setText(f"{n:,}" if isinstance(n, int) else "–")
        self.size.setText(fmt_bytes(info.get("size_bytes")))
        dt = info.get("param_dtypes") or {}
        self.dtypes.setText(", ".join(f"{k}: {v:,}" for k, v in dt.items()) or "–")
        self.spec.setText(st.input_spec or info.get("input_spec") or "")
        self.spec.setCursorPosition(0)  # show the start: input names matter most
        self._validate(self.spec.text())
        self.apply_btn.setEnabled(False)
        self._profile_available(None)
        self._clear_error()
        self.status.setText("")
        self._on_graph()

    def _on_graph(self) -> None:
        g = self.state.graph
        err = (self.state.model_info or {}).get("graph_error")
        if g is None:
            self.graph_info.setText(f"not available: {html.escape(err)}" if err else "–")
            return
        groups = max(len(g.groups) - 1, 0)
        note = f" (fallback: {html.escape(g.fallback_reason)})" if g.fallback_reason else ""
        self.graph_info.setText(
            f"{len(g.nodes)} nodes, {len(g.edges)} edges, {groups} modules, from {g.source}{note}"
        )

    def _on_profile(self) -> None:
        prof = self.state.profile
        self._profile_available(None if self.state.model_source else "open a model first")
        if prof is not None:
            self._clear_error()
            self.status.setText(
                f"Profiled: <b>{prof.total_ms:.3f} ms</b> per forward on {prof.device}"
            )

    def _profile_available(self, why: str | None) -> None:
        set_available(self.profile_btn, why, "Time every layer of this model (Ctrl+P)")

    # -- actions --------------------------------------------------------------------------
    def _validate(self, text: str) -> bool:
        err = check_input_spec(text)
        self.spec_error.setText(err or "")
        self.spec_error.setVisible(bool(err))
        same = text.strip() == (self.state.input_spec or "")
        set_available(
            self.apply_btn,
            "fix the input spec first"
            if err
            else ("the input spec is unchanged" if same else None),
            "Reopen the model with this input spec",
        )
        return err is None

    def apply_spec(self) -> None:
        text = self.spec.text().strip()
        if not self._validate(text) or not self.state.model_source or self.services is None:
            return
        self.services.open_model(self.state.model_source, text or None)

    def _profile(self) -> None:
        if self.services is not None and self.services.profile_current():
            self._profile_available("profiling in a worker…")
            self.status.setText("Profiling in a worker…")
