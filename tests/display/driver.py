"""Drives the real studio window on an X display with real input events (QTest mouse and
key events on the widgets), one scenario per process:

    python -m tests.display.driver walk|layout OUT_DIR

It builds the window as ``studio gui`` does (studio.app.make_qapp / create_window) and ends
it the same way (os._exit after the event loop). After each action it appends a line to
OUT_DIR/steps.jsonl (the action, the recipe's steps, what it measured) and saves a
screenshot of the whole screen, OUT_DIR/NN-action.png. The test reads those: a step
missing from the log is where the process died."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QPoint, QSettings, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QTabBar, QWidget

LEFT = Qt.MouseButton.LeftButton
NO_MOD = Qt.KeyboardModifier.NoModifier


class Driver:
    """Input helpers and the step log of one scenario."""

    def __init__(self, out: Path, window: Any) -> None:
        self.out, self.window = out, window
        self.app = QApplication.instance()
        self.n = 0
        self.failed = ""  # what went wrong inside a dialog
        self.log = (out / "steps.jsonl").open("a", encoding="utf-8")

    # -- recording ------------------------------------------------------------------------
    def step(self, name: str, **facts: Any) -> None:
        """Record that ``name`` happened (and the process is alive) with a screenshot."""
        self.settle(0.3)
        self.n += 1
        shot = self.out / f"{self.n:02d}-{name}.png"
        self.app.primaryScreen().grabWindow(0).save(str(shot))
        steps = [s.pass_name for s in self.window.state.recipe.steps]
        line = {"step": name, "recipe": steps, "screenshot": shot.name, **facts}
        self.log.write(json.dumps(line) + "\n")
        self.log.flush()

    # -- waiting --------------------------------------------------------------------------
    def settle(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.app.processEvents()
            time.sleep(0.01)

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while not predicate():
            if self.failed:
                raise RuntimeError(f"{what}: {self.failed}")
            if time.monotonic() > end:
                raise TimeoutError(f"{what}: not within {timeout:g} s")
            self.app.processEvents()
            time.sleep(0.02)

    def when_modal(self, act: Callable[[QWidget], None], timeout: float = 20.0) -> None:
        """Call ``act(dialog)`` once a modal dialog is up (the click that opens it blocks)."""
        end = time.monotonic() + timeout

        def act_or_close() -> None:
            # No reference to the dialog outlives this call, as with a person's click (a
            # kept wrapper hid the crash of issue 28 point 1).
            try:
                act(QApplication.activeModalWidget())
            except BaseException:  # noqa: BLE001 - the scenario fails with this
                self.failed = traceback.format_exc()
                QApplication.activeModalWidget().close()

        def poll() -> None:
            box = QApplication.activeModalWidget()
            if box is not None and box.isVisible():
                QTimer.singleShot(200, act_or_close)
            elif time.monotonic() < end:
                QTimer.singleShot(50, poll)
            else:
                self.failed = "no dialog came up"

        QTimer.singleShot(50, poll)

    # -- input ----------------------------------------------------------------------------
    def click(self, widget: QWidget, pos: QPoint | None = None, mod=NO_MOD) -> None:
        assert widget.isVisible() and widget.isEnabled(), f"{widget} cannot be clicked"
        QTest.mouseClick(widget, LEFT, mod, pos if pos is not None else widget.rect().center())
        self.app.processEvents()

    def double_click(self, widget: QWidget, pos: QPoint) -> None:
        # A click, then the second press that makes it a double click (QTest's model).
        QTest.mouseClick(widget, LEFT, NO_MOD, pos)
        QTest.mouseDClick(widget, LEFT, NO_MOD, pos)
        self.app.processEvents()

    def type_text(self, editor: QWidget, text: str) -> None:
        """Click into ``editor``, select what is there, type ``text`` and press Enter."""
        self.click(editor)
        QTest.keyClick(editor, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
        QTest.keyClicks(editor, text)
        QTest.keyClick(editor, Qt.Key.Key_Return)
        self.app.processEvents()

    def key(self, key: Qt.Key, mod=NO_MOD, widget: QWidget | None = None) -> None:
        if widget is None and not self.window.isActiveWindow():
            # A dialog closed: with no window manager nobody hands the keyboard back.
            self.window.activateWindow()
            self.wait(self.window.isActiveWindow, "the window to take the keyboard", 10)
        QTest.keyClick(widget or self.window, key, mod)
        self.app.processEvents()

    def dock_tab(self, title: str) -> None:
        """Click the tab of a tabbed dock panel (Profile / Runs / History)."""
        for bar in self.window.findChildren(QTabBar):
            for i in range(bar.count()):
                if bar.tabText(i) == title and bar.isVisible():
                    self.click(bar, bar.tabRect(i).center())
                    return
        raise LookupError(f"no visible tab {title!r}")


def main(argv: list[str]) -> None:
    scenario, out = argv[1], Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    from studio.app import create_window, make_qapp, settle_garbage_collector

    app = make_qapp()
    settings = QSettings(str(out / "studio.ini"), QSettings.Format.IniFormat)
    window = create_window(os.environ.get("STUDIO_DB"), settings=settings)
    window.show()
    settle_garbage_collector()
    driver = Driver(out, window)
    from tests.display import scenarios

    def play() -> None:
        try:
            window.activateWindow()  # no window manager on Xvfb gives it the keyboard
            driver.wait(window.isActiveWindow, "the window to take the keyboard", 10)
            getattr(scenarios, scenario)(driver)
        except BaseException:  # noqa: BLE001 - written where the test reads it
            (out / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
            app.exit(3)

    QTimer.singleShot(300, play)
    code = app.exec()
    driver.step("closed", exit_code=code)
    window.services.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv)
