"""What a person does in the window, as input events (tests/display/driver.py plays them).

Every function takes the Driver; each finished action is a ``driver.step``."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QLineEdit, QMessageBox, QPushButton

from tests.display.driver import Driver

CTRL = Qt.KeyboardModifier.ControlModifier
RECIPE = ("prune_unstructured", "quantize_dynamic_int8", "torchscript")


def open_model(d: Driver, source: str = "zoo:mlp") -> None:
    """File ▸ Open (Ctrl+O), the Zoo tab, click the model, Open."""

    def pick(dlg: Any) -> None:
        bar = dlg.tabs.tabBar()
        d.click(bar, bar.tabRect(dlg.tabs.indexOf(dlg.zoo)).center())
        zoo = dlg.zoo
        row = next(
            i for i in range(zoo.count()) if zoo.item(i).data(Qt.ItemDataRole.UserRole) == source
        )
        zoo.scrollToItem(zoo.item(row))
        d.click(zoo.viewport(), zoo.visualItemRect(zoo.item(row)).center())
        d.click(dlg.buttons.button(QDialogButtonBox.StandardButton.Open))

    d.when_modal(pick)
    d.key(Qt.Key.Key_O, CTRL)
    state = d.window.state
    d.wait(lambda: state.model_source == source and state.graph is not None, "open", 120)
    d.step("model-opened", model=state.model_source)


def build_recipe(d: Driver) -> None:
    """Three passes double-clicked in the palette, a parameter and the benchmark typed."""
    rv = d.window.panels["recipe"]
    for name in RECIPE:
        item = rv._palette_items[name]
        rv.palette.scrollToItem(item)
        d.double_click(rv.palette.viewport(), rv.palette.visualItemRect(item).center())
    first = rv.steps.item(0)
    d.click(rv.steps.viewport(), rv.steps.visualItemRect(first).center())
    d.type_text(rv._form.fields["amount"].editor, "0.3")
    bar = rv.tabs.tabBar()
    d.click(bar, bar.tabRect(2).center())  # Benchmark
    for field, value in (("warmup", "1"), ("iters", "3"), ("rounds", "1")):
        d.type_text(rv.bench_form.fields[field].editor, value)
    d.step("recipe-built", steps=len(d.window.state.recipe.steps))


def run_recipe(d: Driver) -> None:
    rv = d.window.panels["recipe"]
    finished: list[Any] = []
    d.window.services.runFinished.connect(lambda _job, outcome: finished.append(outcome))
    d.click(rv.btn_run)
    d.step("run-started")
    d.wait(lambda: finished, "the run", 150)
    d.step("run-finished", ok=bool(getattr(finished[0], "ok", False)))


def _click_row(d: Driver, table: Any, row: int, mod=Qt.KeyboardModifier.NoModifier) -> None:
    rect = table.visualRect(table.model().index(row, 2))
    d.click(table.viewport(), rect.center(), mod)


def delete_run(d: Driver) -> None:
    """History ▸ Runs: click a run, Delete…, confirm with the Delete button."""
    d.dock_tab("History")
    hv = d.window.panels["history"]
    d.wait(lambda: hv.model.total >= 3, "the history", 20)
    before = hv.model.total
    _click_row(d, hv.table, 0)

    def confirm(box: Any) -> None:
        d.step("delete-asked", default=box.defaultButton().text())
        d.click(box.button(QMessageBox.StandardButton.Yes))

    d.when_modal(confirm)
    d.click(hv.btn_delete)
    d.wait(lambda: hv.model.total == before - 1, "the deletion", 20)
    d.step("run-deleted", runs=hv.model.total)


def compare_runs(d: Driver) -> None:
    hv = d.window.panels["history"]
    _click_row(d, hv.table, 0)
    _click_row(d, hv.table, 1, CTRL)
    d.click(hv.btn_compare)
    d.wait(lambda: getattr(hv, "_compare", None) is not None and hv._compare.isVisible(), "cmp")
    d.step("compared", runs=len(hv.selected_ids()))
    d.key(Qt.Key.Key_Escape, widget=hv._compare)
    d.step("compare-closed")


def optimize_and_cancel(d: Driver) -> None:
    d.key(Qt.Key.Key_R, CTRL | Qt.KeyboardModifier.ShiftModifier)
    dlg = d.window._optimize
    d.wait(dlg.isVisible, "the Optimize dialog", 10)
    d.click(dlg.start_btn)
    d.wait(dlg.cancel_btn.isEnabled, "the search start", 30)
    d.step("search-started")
    d.click(dlg.cancel_btn)
    d.wait(dlg.start_btn.isEnabled, "the search to stop", 120)
    d.step("search-cancelled", status=dlg.status_label.text())
    d.click(dlg.close_btn)


def deploy_run(d: Driver) -> None:
    """History ▸ Runs: the run just made, Deploy…, the folder typed into the dialog."""
    d.dock_tab("History")
    hv = d.window.panels["history"]
    _click_row(d, hv.table, 0)  # the newest: the run just made
    d.step("deploy-ready", enabled=hv.btn_deploy.isEnabled(), tip=hv.btn_deploy.toolTip())
    folder = d.out / "triton"
    folder.mkdir()
    done: list[str] = []
    d.window.services.deployFinished.connect(lambda _rid, _res, error: done.append(error))

    def choose(dlg: Any) -> None:
        edit = dlg.findChild(QLineEdit, "fileNameEdit")
        d.type_text(edit, str(folder))  # Enter accepts the folder

    d.when_modal(choose)
    d.click(hv.btn_deploy)
    d.wait(lambda: done, "the deployment", 120)
    d.step("deployed", error=done[0], files=sorted(p.name for p in folder.iterdir()))


def walk(d: Driver) -> None:
    """The issue 28 walk: open, build, run, delete, compare, optimize, close."""
    d.step("started")
    open_model(d)
    build_recipe(d)
    run_recipe(d)
    deploy_run(d)
    delete_run(d)
    compare_runs(d)
    optimize_and_cancel(d)
    d.step("before-close")
    d.key(Qt.Key.Key_Q, CTRL)


def layout(d: Driver) -> None:
    """Where the window and its Recipe panel's actions are on this screen."""
    d.settle(1.0)
    w = d.window
    rv = w.panels["recipe"]
    screen = w.screen().availableGeometry()
    frame = w.frameGeometry()
    run = rv.btn_run
    top_left = run.mapToGlobal(run.rect().topLeft())
    run_rect = [top_left.x(), top_left.y(), run.width(), run.height()]
    visible = run.visibleRegion().boundingRect()
    elided = [
        b.text()
        for b in rv.findChildren(QPushButton)
        if b.isVisible() and b.width() < b.sizeHint().width()
    ]
    d.step(
        "layout",
        screen=[screen.x(), screen.y(), screen.width(), screen.height()],
        frame=[frame.x(), frame.y(), frame.width(), frame.height()],
        run_button=run_rect,
        run_visible=[visible.width(), visible.height()],
        run_shown=run.isVisible(),
        elided=elided,
        palette_rows=_visible_palette_rows(rv),
    )
    d.dock_tab("History")
    d.settle(0.3)
    hv = w.panels["history"]
    shown = [b.text() for b in (hv.btn_compare, hv.btn_tag, hv.btn_delete) if _whole(b)]
    w.set_theme("dark")
    d.step("layout-dark", history_buttons=shown)
    # A long error in the Model panel must not make the window grow (it did by 52 px).
    w.state.modelFailed.emit("cannot read /tmp/x.onnx: " + "not an ONNX protobuf, " * 30)
    frame = w.frameGeometry()
    d.step("after-error", frame=[frame.x(), frame.y(), frame.width(), frame.height()])
    w.set_theme("light")
    w.close()  # saves the geometry, as quitting does


def _visible_palette_rows(rv: Any) -> int:
    view = rv.palette.viewport().rect()
    return sum(
        1 for it in rv._palette_items.values() if view.contains(rv.palette.visualItemRect(it))
    )


def delete(d: Driver) -> None:
    """History ▸ Runs ▸ Delete… confirmed, in a window that has just opened."""
    d.step("started")
    delete_run(d)
    d.step("before-close")
    d.key(Qt.Key.Key_Q, CTRL)


def _whole(widget: Any) -> bool:
    """The widget is shown and not clipped by its scroll area or dock."""
    region = widget.visibleRegion().boundingRect()
    return widget.isVisible() and region.size() == widget.size()
