"""The GUI thread stays responsive while models load and profile in workers.

``StallMeter`` (tests/ui/stall_meter.py) bounds the GUI thread's work between two ticks of a
10 ms timer and the wall time it is kept from its event loop, while the demo model is
opened, laid out and profiled.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings

from tests.ui.stall_meter import StallMeter


def test_loading_and_profiling_the_demo_never_stalls_the_gui(qapp, tmp_path, wait):
    from studio.services import Services
    from studio.state import AppState
    from studio.ui.main_window import MainWindow

    state = AppState()
    services = Services(state, db=str(tmp_path / "studio.db"), warm_worker=True)
    win = MainWindow(
        state, services, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    )
    win.show()
    failures: list[str] = []
    services.jobFailed.connect(lambda kind, msg: failures.append(f"{kind}: {msg}"))
    wait(lambda: True, 1)
    try:
        with StallMeter() as meter:
            win.open_model("zoo:resnet")
            wait(lambda: bool(win.graph_view._items) or failures, 240)
            assert not failures, failures
            win.profile()
            wait(lambda: state.profile is not None or failures, 240)
            assert not failures, failures
            wait(lambda: win.panels["profile"].top_rows != [], 10)
            # Opening one more level of groups lays them out on the layout thread.
            drawn: list[bool] = []
            win.graph_view.layoutReady.connect(lambda: drawn.append(True))
            frames = len(win.graph_view._frames)
            win.graph_view.expand_level()
            wait(lambda: bool(drawn), 30)
            assert len(win.graph_view._frames) > frames
        assert meter.ticks > 100, "the timer did not run: the event loop was blocked"
        meter.check("the demo model was opened, profiled and laid out")
    finally:
        win.close()
        services.shutdown()
