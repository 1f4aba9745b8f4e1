"""The GUI's serve test of a finished run: PyTriton serves the run's model file on loopback
under concurrent clients, with and without dynamic batching (``studio serve-test``'s engine).
A generation run's stateful LM is served token by token instead, with OpenVINO GenAI's
pipeline and with its continuous-batching pipeline: the dialog asks for clients, requests per
client and a time bound, and reports tokens/s and time to first token.

The test runs as a worker job (``Services.serve_test``), never on the GUI thread; Cancel
stops it cooperatively (the Triton server stops with it; the pool terminates the worker's
process group if that takes too long). The result is stored like the CLI's, and History's
serve-results section shows it.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from accel.job_specs import MAX_LM_CLIENTS
from studio.serve_test import (
    DEFAULT_CLIENTS,
    generation_run,
    lm_summary,
    parse_counts,
    unavailable_reason,
)
from studio.ui.availability import set_available
from studio.ui.slots import on_click


class ServeTestDialog(QDialog):
    """Clients, batch sizes and duration for one run's serve test; progress; Cancel."""

    def __init__(self, services: Any, run_id: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.services = services
        self.run_id = run_id
        self.job_id: str | None = None
        self.result: dict[str, Any] | None = None
        self.generation = generation_run(getattr(services, "repo", None), run_id)
        self.setWindowTitle(
            f"{'Generation serve test' if self.generation else 'Serve test'} of run {run_id[:12]}"
        )
        self.setMinimumWidth(480)
        form = self._fields()
        self.reason = QLabel()
        self.reason.setObjectName("serveTestReason")
        self.reason.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        # Room for the bar and four lines of progress from the start: the fields and buttons
        # were squashed when they appeared in a dialog that kept its size (issue 28, 10).
        policy = self.progress.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.progress.setSizePolicy(policy)
        self.progress.setVisible(False)  # until a test starts
        self.status = QLabel(
            "Triton (PyTriton) streams the run's LM token by token on 127.0.0.1, with OpenVINO "
            "GenAI's pipeline and with its continuous-batching pipeline."
            if self.generation
            else "Triton (PyTriton) serves the run's model on 127.0.0.1."
        )
        self.status.setWordWrap(True)
        self.status.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.status.setFixedHeight(4 * self.status.fontMetrics().lineSpacing() + 4)
        buttons = QDialogButtonBox()
        self.btn_start = buttons.addButton("Start", QDialogButtonBox.ButtonRole.AcceptRole)
        self.btn_cancel = buttons.addButton("Cancel test", QDialogButtonBox.ButtonRole.ActionRole)
        self.btn_close = buttons.addButton(QDialogButtonBox.StandardButton.Close)
        on_click(self.btn_start.clicked, self.start)
        on_click(self.btn_cancel.clicked, self.cancel)
        on_click(self.btn_close.clicked, self.close)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(self.reason)
        lay.addWidget(self.progress)
        lay.addWidget(self.status)
        lay.addWidget(buttons)
        services.jobProgress.connect(self._on_progress)
        services.serveTestFinished.connect(self._on_finished)
        self.refresh()

    def _fields(self) -> QFormLayout:
        """Clients, then batch sizes (a forward model's sweep) or requests per client (an
        LM's), and the duration."""
        self.clients = QLineEdit(",".join(map(str, (1, 4) if self.generation else DEFAULT_CLIENTS)))
        self.clients.setToolTip(
            f"concurrent clients, one load test per count and mode (1 to {MAX_LM_CLIENTS})"
            if self.generation
            else "concurrent clients, one load test per count"
        )
        self.batches = QLineEdit()
        self.batches.setPlaceholderText("default: 1,2,4,… up to the input spec's max batch")
        self.batches.setToolTip("batch sizes of the direct sweep that chooses dynamic_batching")
        self.requests = QSpinBox()
        self.requests.setRange(1, 10000)
        self.requests.setValue(8)
        self.requests.setToolTip("generation requests each client sends, one after another")
        self.duration = QDoubleSpinBox()
        self.duration.setRange(0.5, 600.0)
        self.duration.setValue(60.0 if self.generation else 5.0)
        self.duration.setSuffix(" s")
        self.duration.setToolTip(
            "at most this long per load test (client count and mode): the clients stop sending"
            if self.generation
            else "length of each load test (per client count and mode)"
        )
        form = QFormLayout()
        form.addRow("Clients", self.clients)
        form.addRow("Batch sizes", self.batches)
        form.addRow("Requests per client", self.requests)
        form.addRow("Duration", self.duration)
        form.setRowVisible(self.batches, not self.generation)
        form.setRowVisible(self.requests, self.generation)
        return form

    def refresh(self) -> None:
        """Start is enabled when the run can be served here (else the reason is shown)."""
        why = None if self.job_id else unavailable_reason(self.services.repo, self.run_id)
        self.reason.setText(f"Cannot serve-test this run: {why}" if why else "")
        self.reason.setVisible(bool(why))
        self.btn_start.setEnabled(why is None and self.job_id is None)
        self.btn_start.setToolTip(
            why
            or (
                "serve the LM with and without continuous batching under each client count"
                if self.generation
                else "run the batch sweep and the served load test"
            )
        )
        self.btn_cancel.setEnabled(self.job_id is not None)
        for w in (self.clients, self.batches, self.requests, self.duration):
            w.setEnabled(self.job_id is None)

    def start(self) -> None:
        try:
            clients = parse_counts(self.clients.text(), "clients")
            if self.generation:
                options: dict[str, Any] = {"requests": self.requests.value()}
            else:
                text = self.batches.text().strip()
                options = {"batches": parse_counts(text, "batch sizes") if text else None}
            self.job_id = self.services.serve_test(
                self.run_id, clients=clients, duration_s=self.duration.value(), **options
            )
        except Exception as exc:  # noqa: BLE001 - bad input or an unservable run: say so
            self.status.setText(str(exc))
            return
        self.result = None
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.status.setText(
            "compiling the LM for the pipeline without continuous batching…"
            if self.generation
            else "batch sweep of the model called directly…"
        )
        self.refresh()

    def cancel(self) -> None:
        if self.job_id:
            self.services.cancel(self.job_id)
            self.status.setText("cancelling: stopping the clients and the Triton server…")
            self.btn_cancel.setEnabled(False)

    def _on_progress(self, job_id: str, kind: str, fraction: float, message: str) -> None:
        if job_id == self.job_id:
            self.progress.setValue(round(fraction * 100))
            self.status.setText(message)
            self.status.setToolTip(message)  # a message over four lines is cut; whole here

    def _on_finished(self, job_id: str, run_id: str, info: Any, error: str) -> None:
        if job_id != self.job_id:
            return
        self.job_id = None
        if error or not isinstance(info, dict):
            self.status.setText(f"Serve test ended: {error}")
        else:
            self.result = info
            self.progress.setValue(100)
            line = (lm_summary if self.generation else summary)(info["report"])
            self.status.setText(line + " Stored with the run (History).")
        self.refresh()

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        if self.job_id:  # a running test goes on; its result is still stored
            self.services.state.status.emit(
                "the serve test goes on in the background; History shows it when it is done"
            )
        super().closeEvent(event)


def summary(report: dict[str, Any]) -> str:
    """One line on a finished test: throughput with/without dynamic batching at the most
    clients, and what the direct sweep allowed."""
    load = report.get("load") or []
    most = max((p["clients"] for p in load), default=0)
    on = next((p for p in load if p["clients"] == most and p["mode"] == "dynamic batching"), None)
    off = next((p for p in load if p["clients"] == most and p["mode"] == "no batching"), None)
    if not (on and off and off["throughput"] > 0):
        return "Done."
    batches = f", {on['avg_batch']:.1f} requests per batch" if on.get("avg_batch") else ""
    return (
        f"{most} clients: {on['throughput']:.1f} req/s with dynamic batching{batches} vs "
        f"{off['throughput']:.1f} without ({on['throughput'] / off['throughput']:.2f}x; the "
        f"direct batch sweep's best gain: {report.get('sweep_gain', float('nan')):.2f}x)."
    )


class ServeTestButton(QObject):
    """History's "Serve test…" button: enabled for one run that can be served here, the
    reason as its tooltip otherwise; opens the dialog; refreshes ``serve_view`` when a test
    of the run it shows is stored."""

    def __init__(self, services: Any, serve_view: Any, parent: QWidget) -> None:
        super().__init__(parent)
        self.services = services
        self.serve_view = serve_view
        self.run_id: str | None = None
        self.dialogs: list[ServeTestDialog] = []
        self.button = QPushButton("Serve test…")
        self.button.setObjectName("serveTestButton")
        on_click(self.button.clicked, self.open)
        if hasattr(services, "serveTestFinished"):
            services.serveTestFinished.connect(self._stored)
        self.set_runs([])

    def set_runs(self, run_ids: list[str]) -> None:
        self.run_id = run_ids[0] if len(run_ids) == 1 else None
        repo = getattr(self.services, "repo", None)
        why = unavailable_reason(repo, self.run_id)
        set_available(
            self.button,
            why,
            "serve this run's model with Triton on 127.0.0.1 under concurrent clients",
        )

    def open(self) -> ServeTestDialog | None:
        if self.run_id is None:
            return None
        dlg = ServeTestDialog(self.services, self.run_id, self.parent())
        self.dialogs = [d for d in self.dialogs if d.isVisible() or d.job_id] + [dlg]
        dlg.show()
        return dlg

    def _stored(self, job_id: str, run_id: str, info: Any, error: str) -> None:
        if not error and run_id == self.run_id:
            self.serve_view.show_run(run_id)
