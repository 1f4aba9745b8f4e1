"""The Graph panel's Diff control: colour the original graph by what a run's step did.

A mixin of ``GraphView`` (it uses the panel's state, services, legend and fills); what a
diff means per node is ``accel.graph.overlays.diff_status``/``diff_of``.
"""

from __future__ import annotations

import html

from accel.graph import overlays


class DiffMixin:
    def _setup_diff(self) -> None:
        self._diff = None  # accel.graph.diff.GraphDiff of the original vs a run's step
        self._diff_status: dict[str, str] = {}  # original node id -> removed|fused|changed
        self._diff_label = ""
        self.diff_box.setToolTip(
            "Compare the original graph with the model saved by a step of the current run "
            "(picked next to it): nodes removed (red), fused (orange), changed dtype/op (blue)"
        )
        self.diff_step_box.setToolTip("The step of the current run that Diff compares with")
        self.diff_box.toggled.connect(self._on_diff_toggled)
        self.diff_step_box.activated.connect(self._on_diff_step_picked)
        if self.services is not None:
            self.services.diffReady.connect(self.set_diff)
            self.services.jobFailed.connect(self._on_diff_failed)
            # Bound methods, not lambdas: Qt drops them when this view is deleted.
            self.services.runFinished.connect(self._on_run_finished)
            self.state.currentRunChanged.connect(self._on_current_run_changed)
        self.refresh_diff_steps()

    def _set_checked_quietly(self, on: bool) -> None:
        self.diff_box.blockSignals(True)
        self.diff_box.setChecked(on)
        self.diff_box.blockSignals(False)

    def refresh_diff_steps(self) -> None:
        """List the current run's steps that saved a model ("2. bf16"); keep the pick if it
        is still there, else pick the last one."""
        steps = self.services.diff_steps() if self.services is not None else []
        box = self.diff_step_box
        picked = box.currentData()
        box.blockSignals(True)
        box.clear()
        for index, label in steps:
            box.addItem(label, index)
        at = box.findData(picked) if picked is not None else -1
        box.setCurrentIndex(at if at >= 0 else box.count() - 1)
        box.blockSignals(False)
        box.setEnabled(bool(steps))
        if not steps:
            box.setToolTip("Run a recipe: its steps that saved a model can be compared here")
        else:
            box.setToolTip("The step of the current run that Diff compares with")

    def diff_step(self) -> int | None:
        """Index of the step picked for the diff (None: the run's last saved model)."""
        return self.diff_step_box.currentData()

    def _on_run_finished(self, _job_id: str, _outcome: object) -> None:
        self.refresh_diff_steps()

    def _on_current_run_changed(self, _run_id: str = "") -> None:
        self.diff_step_box.clear()  # another run: pick its last saved model
        self.refresh_diff_steps()
        self._diff, self._diff_status = None, {}  # the diff was of another run
        if self.diff_box.isChecked():
            self._on_diff_toggled(True)

    def _on_diff_step_picked(self, _i: int) -> None:
        self._diff, self._diff_status = None, {}
        if self.diff_box.isChecked():
            self._on_diff_toggled(True)
        else:
            self.diff_box.setChecked(True)  # picking a step asks for its diff

    def _on_diff_toggled(self, on: bool) -> None:
        if on and self._diff is None and self.services is not None:
            label = self.diff_step_box.currentText() or "the run's last saved model"
            self.legend.setText(f"comparing with {html.escape(label)}…")
            self.legend.show()
            if self.services.diff_run(step_index=self.diff_step()) is None:
                return
        self._refresh_overlay()

    def _on_diff_failed(self, kind: str, message: str) -> None:
        if kind == "diff":
            self._set_checked_quietly(False)
            self._refresh_overlay()
            self.legend.setText(f"<span style='color:#e03131'>diff: {html.escape(message)}</span>")
            self.legend.show()

    def set_diff(self, result: dict) -> None:
        """Show ``graph_diff`` job output: colours original nodes by what the step did."""
        from accel.graph.diff import GraphDiff

        diff = GraphDiff.from_dict(result["diff"])
        self._diff = diff
        self._diff_status = overlays.diff_status(diff)
        at = self.diff_step_box.findData(result.get("step_index"))
        if at >= 0 and at != self.diff_step_box.currentIndex():
            self.diff_step_box.blockSignals(True)
            self.diff_step_box.setCurrentIndex(at)
            self.diff_step_box.blockSignals(False)
        self._diff_label = overlays.diff_summary(result.get("step", ""), diff)
        if not self.diff_box.isChecked():
            self._set_checked_quietly(True)
        self._refresh_overlay()

    def diff_on(self) -> bool:
        return self.diff_box.isChecked() and self._diff is not None

    def diff_of(self, unit: str) -> str | None:
        """removed | fused | changed | None for a visible node or group box."""
        return overlays.diff_of(self.graph, self._view_nodes.get(unit), self._diff_status)
