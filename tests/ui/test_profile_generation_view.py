"""The Profile panel for a decoder profiled generating (issue 31, part 4): the prefill /
decode bars per group, the KV cache's growth line, the Generation table, the layer bars by
decode time, and the Generation box (available for a decoder LM only)."""

from __future__ import annotations

import pytest

from accel.profile.generation import GenerationLayers, LayerSplit
from accel.profile.results import LayerProfile, ModelProfile


def _profile(with_generation: bool = True) -> ModelProfile:
    rows = [
        LayerProfile(name="", type="LM", self_ms=0.5, inclusive_ms=9.0),
        LayerProfile(name="layers.0.attn", type="Attention", self_ms=6.0, inclusive_ms=6.0),
        LayerProfile(name="layers.0.mlp", type="MLP", self_ms=2.0, inclusive_ms=2.0),
    ]
    gen = GenerationLayers(
        16, 8, ttft_ms=10.0, tpot_ms=2.0, rounds=3, kv_bytes_per_token=512,
        rows=[
            LayerSplit("", "LM", "other", 0.5, 0.1, 10.0, 2.0, 1),
            LayerSplit("layers.0.attn", "Attention", "attention", 4.0, 0.5, 4.0, 0.5, 1),
            LayerSplit("layers.0.mlp", "MLP", "mlp", 3.0, 1.0, 3.0, 1.0, 1),
            LayerSplit("lm_head", "Linear", "lm_head", 1.0, 0.25, 1.0, 0.25, 1),
        ],
        kv_lengths=list(range(16, 23)), kv_bytes=[n * 512 for n in range(16, 23)],
    )  # fmt: skip
    return ModelProfile(
        kind="torch", device="cpu", rows=rows, total_ms=9.0,
        generation=gen if with_generation else None,
    )  # fmt: skip


@pytest.fixture
def view(qtbot):
    from studio.state import AppState
    from studio.ui.profile_view import ProfileView

    state = AppState()
    v = ProfileView(state, None)
    qtbot.addWidget(v)
    v.resize(1100, 600)
    v.show()
    return v


def test_a_generation_profile_draws_group_bars_and_the_kv_line(view):
    view.state.set_model("tiny:llama", {"kind": "torch", "generation_split": None})
    assert view.generate_box.isEnabled()
    view.state.set_profile(_profile())
    charts = view.gen_charts
    assert view.chart_tabs.isTabEnabled(1) and view.chart_tabs.currentIndex() == 1
    prefill, decode = charts.bars
    # Shares of the headline: attention 4 of 10 ms prefill, 0.5 of 2 ms per token decode.
    groups = [t for _, t in charts.groups_plot.getAxis("bottom")._tickLevels[0]]
    assert groups == ["attention", "mlp", "lm_head", "other", "rest"]
    i = groups.index("attention")
    assert prefill.opts["height"][i] == pytest.approx(40.0)
    assert decode.opts["height"][i] == pytest.approx(25.0)
    assert {"4", "0.5"} <= {label.toPlainText() for label in charts.labels}
    measured, closed = charts.kv_curves
    xs, ys = measured.getData()
    assert list(xs) == list(range(16, 23))
    assert list(ys) == pytest.approx([n * 0.5 for n in range(16, 23)])  # KiB
    assert list(closed.getData()[1]) == pytest.approx(list(ys))
    assert "(KiB)" in charts.kv_plot.getAxis("left").labelText
    # The layer bars and the table follow decode time per token.
    assert [r.name for r in view.top_rows] == ["layers.0.mlp", "layers.0.attn", "lm_head"]
    assert view.gen_model.rowCount() == 4 and view.tabs.isTabEnabled(2)
    assert "TPOT <b>2.000 ms</b>" in view.summary.text()


def test_a_slivers_bar_carries_no_label(view):
    """Labels of bars under 3 % of TTFT / TPOT overlapped their neighbours' ("0.003367"
    over "1.75" at 1366x768); the table gives their milliseconds."""
    profile = _profile()
    rows = profile.generation.rows
    rows[0] = LayerSplit("", "LM", "other", 0.2, 0.04, 10.0, 2.0, 1)  # 2 % of both phases
    view.state.set_model("tiny:llama", {"kind": "torch", "generation_split": None})
    view.state.set_profile(profile)
    texts = [label.toPlainText() for label in view.gen_charts.labels]
    assert "0.2" not in texts and "0.04" not in texts
    assert {"4", "0.5", "3", "1"} <= set(texts)


def test_a_forward_profile_leaves_the_generation_tabs_disabled(view):
    view.state.set_model("zoo:mlp", {"kind": "torch", "generation_split": "not a decoder"})
    assert not view.generate_box.isEnabled()
    assert "not a decoder" in view.generate_box.toolTip()
    view.state.set_profile(_profile(with_generation=False))
    assert not view.chart_tabs.isTabEnabled(1) and not view.chart_tabs.isTabEnabled(2)
    assert view.chart_tabs.currentIndex() == 0 and not view.gen_charts.bars
    assert [r.name for r in view.top_rows] == ["layers.0.attn", "layers.0.mlp"]


def test_the_graph_overlay_paints_decode_time_for_a_generation_profile():
    from accel.graph import overlays
    from accel.graph.model import GROUP_PREFIX
    from tests.accel.test_graph_view_logic import small_graph

    g = small_graph()
    view = g.view({"features"})
    prof = _profile()
    prof.rows.append(LayerProfile(name="fc", type="Linear", inclusive_ms=7.0))
    prof.generation.rows.append(LayerSplit("fc", "Linear", "mlp", 3.0, 0.75, 3.0, 0.75, 1))
    lat = overlays.overlay_values(g, view.nodes, "latency", prof)
    assert lat[GROUP_PREFIX + "fc"] == pytest.approx(0.75)
    prof.generation = None
    assert overlays.overlay_values(g, view.nodes, "latency", prof)[
        GROUP_PREFIX + "fc"
    ] == pytest.approx(7.0)


def test_the_charts_do_not_make_the_panel_outgrow_a_short_dock(view):
    # Plots hint at their current size (480 px); the dock's scroll area follows the panel's
    # height for its width, and on a real display it cut the charts' axes off.
    view.state.set_model("tiny:llama", {"kind": "torch", "generation_split": None})
    view.state.set_profile(_profile())
    assert view.layout().totalHeightForWidth(900) < 300
    assert view.minimumSizeHint().height() < 300
