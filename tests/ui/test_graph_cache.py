"""A model opened before shows its cached graph at once; the live load confirms or replaces it."""

from __future__ import annotations

from studio.graph_cache import GraphCache
from studio.services import Services
from studio.state import AppState


def _services(tmp_path):
    state = AppState()
    return state, Services(state, db=str(tmp_path / "studio.db"), warm_worker=False)


def test_second_open_shows_the_cached_graph_then_keeps_it(qapp, tmp_path, wait):
    state, services = _services(tmp_path)
    opened: list[bool] = []
    services.modelOpened.connect(lambda src: opened.append(bool(state.model_info.get("cached"))))
    try:
        services.open_model("zoo:mlp")
        wait(lambda: opened and not services.busy, 120)
        assert opened == [False]
        cache = GraphCache(services.data_dir() / "graph-cache")
        wait(lambda: cache.get("zoo:mlp", None) is not None, 10)
    finally:
        services.shutdown()

    state, services = _services(tmp_path)  # a new session on the same data folder
    opened.clear()
    services.modelOpened.connect(lambda src: opened.append(bool(state.model_info.get("cached"))))
    try:
        services.open_model("zoo:mlp")
        wait(lambda: bool(opened), 30)
        assert opened == [True], "the cached graph comes before the live load"
        shown = state.graph
        assert shown is not None and len(shown.nodes) > 0
        # The live load confirms it: same content hash and graph, so nothing is redrawn.
        wait(lambda: state.model_info.get("cached") is False, 120)
        assert state.graph is shown, "an identical live graph does not redraw"
        assert opened == [True]
    finally:
        services.shutdown()


def test_a_damaged_cache_file_is_dropped(tmp_path):
    cache = GraphCache(tmp_path)
    cache.put("zoo:mlp", None, {"info": {}, "graph": {"nodes": []}})
    path = next(tmp_path.glob("*.json"))
    path.write_text("{not json")
    assert cache.get("zoo:mlp", None) is None
    assert not path.exists()
