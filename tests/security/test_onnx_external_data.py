"""Issue 15 (11): external data hidden in ONNX subgraphs must stay inside the model folder,
checked by the studio's own walk (not left to ONNX Runtime)."""

from __future__ import annotations

from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from accel.errors import ModelLoadError  # noqa: E402
from accel.runtimes.onnxruntime.onnx_io import all_tensors, check_external_data  # noqa: E402


def _external(name: str, location: str) -> TensorProto:
    t = helper.make_tensor(name, TensorProto.FLOAT, [1], [0.0])
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "4")):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def _branch(tensor: TensorProto, where: str) -> onnx.GraphProto:
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    if where == "initializer":
        return helper.make_graph(
            [helper.make_node("Identity", [tensor.name], ["y"])], "b", [], [out], [tensor]
        )
    node = helper.make_node("Constant", [], ["y"], value=tensor)
    return helper.make_graph([node], "b", [], [out])


def _model(tmp_path: Path, location: str, where: str, nested: bool) -> Path:
    ok = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], value=helper.make_tensor("c", 1, [1], [1.0]))],
        "ok",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    evil = _branch(_external("w", location), where)
    if nested:  # the external tensor two If levels down
        inner = helper.make_node("If", ["cond"], ["y"], then_branch=evil, else_branch=ok)
        evil = helper.make_graph(
            [inner], "mid", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]
        )
    node = helper.make_node("If", ["cond"], ["y"], then_branch=evil, else_branch=ok)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    return path


@pytest.mark.parametrize("where", ["initializer", "attribute"])
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("location", ["../../etc/passwd", "/etc/passwd"])
def test_subgraph_external_data_outside_the_folder_is_refused(tmp_path, where, nested, location):
    path = _model(tmp_path, location, where, nested)
    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        check_external_data(path)


def test_subgraph_external_data_inside_the_folder_is_listed(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\0" * 4)
    path = _model(tmp_path, "w.bin", "initializer", nested=True)
    assert check_external_data(path) == [(tmp_path / "w.bin").resolve()]


def test_walk_reaches_every_level(tmp_path):
    path = _model(tmp_path, "x.bin", "attribute", nested=True)
    model = onnx.load(str(path), load_external_data=False)
    assert "w" in [t.name for t in all_tensors(model)]
