"""ONNX Runtime quantization passes: parity on zoo models, exclusions, calibration, script export."""

from __future__ import annotations

import onnx
import pytest
import torch
from onnx_export_helpers import SMALL, export_small, recipe, run_script

from accel.errors import PassError
from accel.models import load_model
from accel.passes import PassContext, get_pass
from accel.runner import run_recipe


@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx_models")
    return {name: export_small(name, folder) for name in ("mlp", "resnet", "transformer", "lstm")}


def _run(onnx_models, name, steps, tmp_path, **extra):
    path, spec = onnx_models[name]
    res = run_recipe(recipe(path, spec, steps, **extra), out_dir=tmp_path / "run")
    assert res.ok, res.error
    return res


def _cosine(step):
    return min(o["cosine"] for o in step.parity["outputs"])


def _graph(step):
    path = next(a["path"] for a in step.artifacts if a["kind"] == "onnx")
    return onnx.load(path).graph


def _float_weight_of(graph, node_name):
    """The node named node_name exists and its weight input is a float initializer (not quantized)."""
    node = next(n for n in graph.node if n.name == node_name)
    inits = {i.name: i for i in graph.initializer}
    weight = inits.get(node.input[1])
    return node.op_type, weight is not None and weight.data_type == onnx.TensorProto.FLOAT


@pytest.mark.parametrize(
    ("name", "quant_op", "count"),
    [
        ("mlp", "MatMulInteger", 3),
        ("transformer", "MatMulInteger", 14),
        ("lstm", "DynamicQuantizeLSTM", 1),
    ],
)
def test_dynamic_quantization_parity(onnx_models, tmp_path, name, quant_op, count):
    res = _run(onnx_models, name, [{"pass": "quantize_onnx_dynamic"}], tmp_path)
    step = res.steps[0]
    assert step.status == "succeeded"
    assert _cosine(step) > 0.99
    ops = step.details["quantized_ops"]
    assert ops.get(quant_op) == count, ops
    # int8 weights: the file shrinks (the embeddings of transformer/lstm stay float).
    assert step.metrics["size_bytes_after"] < step.metrics["size_bytes_before"] * (
        0.4 if name == "mlp" else 0.9
    )
    assert (
        res.model.kind == "onnx"
        and res.model.onnx_path.parent == tmp_path / "run" / "step_00_quantize_onnx_dynamic"
    )


def test_static_qdq_resnet_int8_parity(onnx_models, tmp_path):
    res = _run(onnx_models, "resnet", [{"pass": "quantize_onnx_static"}], tmp_path)
    step = res.steps[0]
    assert _cosine(step) > 0.99
    ops = step.details["quantized_ops"]
    assert (
        ops["QuantizeLinear"] >= 9 and ops["DequantizeLinear"] >= 9
    )  # every conv's activation and weight
    assert step.details["calibration_batches"] == 8  # the pass default
    # top-1 agrees with the float model on the reference batch
    ref = torch.load(tmp_path / "run" / "reference_outputs.pt")
    out = torch.load(tmp_path / "run" / "step_00_quantize_onnx_static" / "outputs.pt")
    assert torch.equal(ref.argmax(-1), out.argmax(-1))


@pytest.mark.parametrize(
    ("params", "expected_op"),
    [
        ({"quant_format": "qoperator", "calibration_method": "entropy"}, "QLinearConv"),
        ({"calibration_method": "percentile", "per_channel": False}, "QuantizeLinear"),
    ],
)
def test_static_formats_and_calibration_methods(onnx_models, tmp_path, params, expected_op):
    res = _run(
        onnx_models, "resnet", [{"pass": "quantize_onnx_static", "params": params}], tmp_path
    )
    step = res.steps[0]
    assert step.details["quantized_ops"].get(expected_op, 0) >= 1
    assert _cosine(step) > 0.99


def test_static_transformer_parity(onnx_models, tmp_path):
    res = _run(
        onnx_models,
        "transformer",
        [{"pass": "quantize_onnx_static", "params": {"calibration_batches": 4}}],
        tmp_path,
    )
    step = res.steps[0]
    assert step.details["calibration_batches"] == 4
    assert _cosine(step) > 0.99


def test_excluded_nodes_stay_float(onnx_models, tmp_path):
    params = {"exclude": ["/fc/*", "/layer3/layer3.0/conv2/Conv"]}
    res = _run(
        onnx_models, "resnet", [{"pass": "quantize_onnx_static", "params": params}], tmp_path
    )
    step = res.steps[0]
    assert sorted(step.details["excluded_nodes"]) == ["/fc/Gemm", "/layer3/layer3.0/conv2/Conv"]
    graph = _graph(step)
    assert _float_weight_of(graph, "/fc/Gemm") == ("Gemm", True)
    assert _float_weight_of(graph, "/layer3/layer3.0/conv2/Conv") == ("Conv", True)
    # a conv that was not excluded reads a dequantized int8 weight
    assert _float_weight_of(graph, "/layer3/layer3.0/conv1/Conv") == ("Conv", False)
    conv1 = next(n for n in graph.node if n.name == "/layer3/layer3.0/conv1/Conv")
    producers = {o: n.op_type for n in graph.node for o in n.output}
    assert producers[conv1.input[1]] == "DequantizeLinear"


def test_excluded_op_types_stay_float(onnx_models, tmp_path):
    params = {"exclude_op_types": ["MatMul"]}
    res = _run(
        onnx_models, "transformer", [{"pass": "quantize_onnx_dynamic", "params": params}], tmp_path
    )
    step = res.steps[0]
    assert "MatMul" not in step.details["op_types"]
    assert step.details["quantized_ops"] == {}


def test_dynamic_exclude_classifier(onnx_models, tmp_path):
    res = _run(
        onnx_models,
        "mlp",
        [{"pass": "quantize_onnx_dynamic", "params": {"exclude": ["/fc3/*"]}}],
        tmp_path,
    )
    step = res.steps[0]
    # quantize_dynamic turns Gemm into MatMul named "<gemm>_MatMul"; both names are excluded
    assert step.details["excluded_nodes"] == ["/fc3/Gemm", "/fc3/Gemm_MatMul"]
    assert step.details["quantized_ops"]["MatMulInteger"] == 2
    graph = _graph(step)
    assert _float_weight_of(graph, "/fc3/Gemm_MatMul") == ("MatMul", True)
    assert any(n.name.startswith("/fc2/") and n.op_type == "MatMulInteger" for n in graph.node)


def test_unmatched_exclude_pattern_is_a_clear_error(onnx_models, tmp_path):
    path, spec = onnx_models["mlp"]
    model = load_model(path, spec)
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path, original=model)
    cls = get_pass("quantize_onnx_dynamic")
    with pytest.raises(PassError, match=r"/classifier/\*.*match no node"):
        cls().apply(model, cls.parse_config({"exclude": ["/classifier/*"]}), ctx)


def test_calibration_reports_progress_per_batch_and_uses_context_batches(onnx_models, tmp_path):
    path, spec = onnx_models["resnet"]
    model = load_model(path, spec)
    messages = []
    ctx = PassContext(
        inputs=model.example_inputs(),
        work_dir=tmp_path,
        original=model,
        progress_cb=lambda f, m: messages.append((f, m)),
    )
    cls = get_pass("quantize_onnx_static")
    out = cls().apply(model, cls.parse_config({"calibration_batches": 3}), ctx)
    calib = [m for _, m in messages if m.startswith("calibration batch")]
    assert calib == ["calibration batch 1/3", "calibration batch 2/3", "calibration batch 3/3"]
    fractions = [f for f, _ in messages]
    assert fractions == sorted(fractions)
    assert out.onnx_path != model.onnx_path and out.content_hash != model.content_hash
    assert out.num_params > 0 and out.size_bytes < model.size_bytes


def test_cancel_during_calibration(onnx_models, tmp_path):
    from accel.errors import Cancelled

    path, spec = onnx_models["resnet"]
    model = load_model(path, spec)
    seen = []

    def progress(f, m):
        seen.append(m)

    ctx = PassContext(
        inputs=model.example_inputs(),
        work_dir=tmp_path,
        original=model,
        progress_cb=progress,
        cancel_cb=lambda: any(m.startswith("calibration batch 2") for m in seen),
    )
    cls = get_pass("quantize_onnx_static")
    with pytest.raises(Cancelled):
        cls().apply(model, cls.parse_config({"calibration_batches": 4}), ctx)


def test_needs_an_onnx_model(tmp_path):
    res = run_recipe(
        recipe(
            "zoo:mlp(in_features=64, hidden=128)",
            "x:float32[batch,64]; batch=1..8:4",
            [{"pass": "quantize_onnx_static"}],
        ),
        out_dir=tmp_path / "run",
    )
    assert not res.ok and "export_onnx" in res.error


def test_configs_describe_every_field():
    for name in ("quantize_onnx_dynamic", "quantize_onnx_static"):
        d = get_pass(name).describe()
        assert all(p["description"] for p in d["params"]), name
    static = {p["name"]: p for p in get_pass("quantize_onnx_static").describe()["params"]}
    assert static["calibration_method"]["choices"] == ["minmax", "percentile", "entropy"]
    assert static["quant_format"]["default"] == "qdq"


@pytest.mark.parametrize(
    ("name", "step"),
    [
        (
            "resnet",
            {
                "pass": "quantize_onnx_static",
                "params": {"exclude": ["/fc/*"], "calibration_method": "percentile"},
            },
        ),
        ("transformer", {"pass": "quantize_onnx_dynamic", "params": {"per_channel": True}}),
    ],
)
def test_exported_script_reproduces_the_runner(onnx_models, tmp_path, name, step):
    path, spec = onnx_models[name]
    r = recipe(path, spec, [step])
    res = run_recipe(r, out_dir=tmp_path / "run")
    assert res.ok, res.error
    out = run_script(r, tmp_path)
    folder = f"step_00_{step['pass']}"
    ours = torch.load(tmp_path / "run" / folder / "outputs.pt")
    theirs = torch.load(out / folder / "outputs.pt")
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)
    assert (out / folder / f"model_int8_{step['pass'].rsplit('_', 1)[1]}.onnx").is_file()


def test_exclude_by_torch_module_name(onnx_models, tmp_path):
    """Module names work for both exporters: TorchScript node names and dynamo node metadata."""
    res = _run(
        onnx_models,
        "resnet",
        [{"pass": "quantize_onnx_static", "params": {"exclude": ["layer3.0.conv2"]}}],
        tmp_path,
    )
    assert res.steps[0].details["excluded_nodes"] == ["/layer3/layer3.0/conv2/Conv"]
    source, spec = SMALL["resnet"]
    steps = [
        {"pass": "export_onnx"},
        {"pass": "quantize_onnx_static", "params": {"exclude": ["fc"]}},
    ]
    res = run_recipe(recipe(source, spec, steps), out_dir=tmp_path / "dynamo")
    assert res.ok, res.error
    step = res.steps[1]
    assert len(step.details["excluded_nodes"]) == 1  # dynamo names it e.g. node_linear
    (name,) = step.details["excluded_nodes"]
    assert _float_weight_of(_graph(step), name) == ("Gemm", True)
    assert _cosine(step) > 0.99


def test_exclude_by_module_name_survives_preprocessing_of_a_dynamo_export(tmp_path):
    """quant_pre_process drops the dynamo exporter's node metadata when it rewrites the graph
    (it does for the transformer); module names are then looked up in the file before it."""
    source, spec = SMALL["transformer"]
    steps = [
        {"pass": "export_onnx"},
        {"pass": "quantize_onnx_static", "params": {"exclude": ["classifier"]}},
    ]
    res = run_recipe(recipe(source, spec, steps), out_dir=tmp_path / "run")
    assert res.ok, res.error
    (name,) = res.steps[1].details["excluded_nodes"]
    op, is_float = _float_weight_of(_graph(res.steps[1]), name)
    assert is_float and op in ("Gemm", "MatMul")


def test_dynamic_on_a_conv_net_says_what_was_quantized(onnx_models, tmp_path):
    res = _run(
        onnx_models,
        "resnet",
        # the classifier (the only Gemm) excluded: a conv net has nothing else dynamic covers
        [{"pass": "quantize_onnx_dynamic", "params": {"exclude": ["fc"]}}],
        tmp_path,
    )
    step = res.steps[0]
    assert step.details["quantized_ops"] == {}
    warning = next(w for w in step.details["warnings"] if "ops quantized" in w)
    assert warning.startswith("0 of ") and "quantize_onnx_static" in warning and "Conv" in warning


def test_preprocessing_leaves_the_current_folder_clean(onnx_models, tmp_path, monkeypatch):
    """ONNX Runtime's shape inference writes sym_shape_infer_temp.onnx (+ a <uuid> data file)
    into the current folder when it gives up on a shape; that must land in the step's scratch
    folder and be removed, never in whatever folder the studio was started from."""
    from onnxruntime.quantization import shape_inference

    real = shape_inference.quant_pre_process

    def littering(src, dst, *a, **k):
        with open("sym_shape_infer_temp.onnx", "wb") as f:  # what ORT does, relative path
            f.write(b"x")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(shape_inference, "quant_pre_process", littering)
    cwd = tmp_path / "started_here"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    _run(onnx_models, "mlp", [{"pass": "quantize_onnx_dynamic"}], tmp_path)
    assert list(cwd.iterdir()) == []
    assert not list((tmp_path / "run").rglob("sym_shape_infer_temp.onnx"))


@pytest.mark.parametrize("name", ["mlp", "transformer"])
@pytest.mark.parametrize("pass_name", ["quantize_onnx_dynamic", "quantize_onnx_static"])
def test_leaves_no_files_in_the_working_directory(
    onnx_models, tmp_path, monkeypatch, name, pass_name
):
    path, spec = onnx_models[name]
    model = load_model(path, spec)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    work = tmp_path / "work"
    ctx = PassContext(inputs=model.example_inputs(), work_dir=work, original=model)
    cls = get_pass(pass_name)
    config = {"calibration_batches": 2} if pass_name.endswith("static") else {}
    out = cls().apply(model, cls.parse_config(config), ctx)
    assert list(cwd.iterdir()) == []
    assert not [p for p in work.iterdir() if p.name.startswith("ort_tmp_")]
    assert out.onnx_path.parent == work.resolve()


def _model_with_an_op_unknown_to_symbolic_shape_inference(path):
    """Relu -> a custom-domain op: ORT's symbolic shape inference stops there (incomplete)."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(torch.randn(64, 64).numpy(), "w")  # > 1 KB: external data
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Foo", ["h"], ["y"], name="foo", domain="com.example"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w],
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
        ir_version=8,
    )
    onnx.save(proto, str(path))
    return path


def test_incomplete_symbolic_shape_inference_writes_nothing_to_the_working_directory(
    tmp_path, monkeypatch
):
    """ORT saves sym_shape_infer_temp.onnx + <uuid>.data to the cwd before raising; the pass
    keeps them in a scratch folder and retries without symbolic shape inference."""
    from types import SimpleNamespace

    from accel.passes.quantize_onnx import _preprocess

    src = _model_with_an_op_unknown_to_symbolic_shape_inference(tmp_path / "m.onnx")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    work = tmp_path / "work"
    work.mkdir()
    ctx = SimpleNamespace(details={}, progress=lambda *a: None)
    pre = _preprocess(src.resolve(), work.resolve(), ctx)
    assert "symbolic shape inference incomplete" in ctx.details["preprocess"]
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in work.iterdir()) == [pre.name]


def test_static_quantization_keeps_index_computations_in_float(tmp_path):
    """T5's relative-position buckets: float ops (a log that is -inf at 0) compute a Gather's
    indices; quantizing them gave NaN -> INT64_MIN indices and an ORT crash. Those nodes are
    found from the Gather's indices back to the inputs and kept in float."""
    from onnx import TensorProto, helper, numpy_helper

    from accel.passes._onnx_quant_helpers import index_computing_nodes

    table = numpy_helper.from_array(torch.randn(32, 8).numpy(), "table")
    w = numpy_helper.from_array(torch.randn(8, 8).numpy(), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Abs", ["pos"], ["a"], name="abs"),
            helper.make_node("Log", ["a"], ["l"], name="log"),
            helper.make_node("Relu", ["l"], ["r"], name="relu"),
            helper.make_node("Cast", ["r"], ["idx"], name="cast", to=TensorProto.INT64),
            helper.make_node("Gather", ["table", "idx"], ["g"], name="gather"),
            helper.make_node("MatMul", ["g", "w"], ["y"], name="mm"),
        ],
        "g",
        [helper.make_tensor_value_info("pos", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
        initializer=[table, w],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert sorted(index_computing_nodes(path)) == ["abs", "cast", "log", "relu"]


def _qgemm_with_uint8_bias(path):
    """The node issue 32 met after ORT's MatMulAddFusion on a quantized BERT: a QGemm whose
    bias is uint8 (QGemm takes int32), which ONNX Runtime rejects when it loads the graph."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    values = {
        "a_scale": np.float32(0.1),
        "a_zp": np.uint8(128),
        "B": np.ones((4, 3), np.int8),
        "b_scale": np.float32(0.05),
        "b_zp": np.int8(0),
        "ln.bias_quantized": np.zeros(3, np.uint8),
        "y_scale": np.float32(0.2),
        "y_zp": np.uint8(128),
    }
    node = helper.make_node(
        "QGemm", ["A", *values], ["Y"], domain="com.microsoft", name="MatMulAddFusion_quant"
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [2, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.UINT8, [2, 3])],
        [numpy_helper.from_array(v, n) for n, v in values.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    onnx.save(model, str(path))


def test_quantized_graph_onnx_runtime_rejects_is_refused_where_it_is_made(tmp_path):
    from accel.passes import PassContext
    from accel.passes.quantize_onnx import _check_loads

    bad = tmp_path / "bad.onnx"
    _qgemm_with_uint8_bias(bad)
    with pytest.raises(PassError) as e:
        _check_loads(bad, ["all"], PassContext(inputs={}, work_dir=tmp_path))
    msg = str(e.value)
    assert "does not load in ONNX Runtime at graph_optimization_level all" in msg
    assert "INVALID_GRAPH" in msg and "QGemm" in msg and "tensor(uint8)" in msg
    assert "quantize_onnx_dynamic" in msg and "quantize_openvino" in msg


def test_load_check_uses_the_levels_of_later_onnxruntime_steps():
    from accel.passes import PassContext
    from accel.passes.quantize_onnx import _levels_used_later
    from accel.recipe import Recipe

    recipe = Recipe.model_validate(
        {
            "model": {"source": "zoo:mlp"},
            "steps": [
                {"pass": "export_onnx"},
                {"pass": "quantize_onnx_static"},
                {"pass": "onnxruntime", "params": {"graph_optimization_level": "extended"}},
                {"pass": "onnxruntime", "params": {"graph_optimization_level": "disabled"}},
            ],
        }
    )
    ctx = PassContext(inputs={}, step_index=1, recipe=recipe)
    assert _levels_used_later(ctx) == ["all", "extended"]
    assert _levels_used_later(PassContext(inputs={})) == ["all", "extended"]


def test_without_value_info_only_answers_a_shape_inference_error(onnx_models, tmp_path):
    from onnx.shape_inference import InferenceError

    from accel.passes._onnx_quant_helpers import without_value_info

    path, _ = onnx_models["mlp"]
    annotated = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    assert annotated.graph.value_info
    src = tmp_path / "annotated.onnx"
    onnx.save(annotated, str(src))
    assert without_value_info(src, tmp_path / "bare.onnx", ValueError("other")) is None
    err = InferenceError("[ShapeInferenceError] Inferred shape and existing shape differ")
    bare = without_value_info(src, tmp_path / "bare.onnx", err)
    proto = onnx.load(str(bare))
    assert not proto.graph.value_info
    assert len(proto.graph.node) == len(annotated.graph.node)
    assert without_value_info(bare, tmp_path / "again.onnx", err) is None  # nothing to drop


def _fail_on_annotations(monkeypatch, module, name):
    """ORT's quantizer raising ONNX's shape-inference error while its input carries
    value_info (what diffusers' UNet export did: 'differ in dimension 0: (64) vs (256)')."""
    from onnx.shape_inference import InferenceError

    real = getattr(module, name)
    seen = []

    def quantize(src, *args, **kwargs):
        seen.append(onnx.load(str(src), load_external_data=False).graph.value_info)
        if seen[-1]:
            raise InferenceError("[ShapeInferenceError] Inferred shape and existing shape differ")
        return real(src, *args, **kwargs)

    monkeypatch.setattr(module, name, quantize)
    return seen


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_stale_shape_annotations_are_dropped_and_the_quantizer_retried(
    onnx_models, tmp_path, monkeypatch, mode
):
    import onnxruntime.quantization as ortq

    path, spec = onnx_models["mlp"]
    annotated = tmp_path / "annotated.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(onnx.load(str(path))), str(annotated))
    seen = _fail_on_annotations(monkeypatch, ortq, f"quantize_{mode}")
    step = {"pass": f"quantize_onnx_{mode}", "params": {"preprocess": False}}
    res = run_recipe(recipe(str(annotated), spec, [step]), out_dir=tmp_path / "run")
    assert res.ok, res.error
    assert [bool(v) for v in seen] == [True, False]
    assert "ShapeInferenceError" in res.steps[0].details["value_info_dropped"]
    assert _cosine(res.steps[0]) > 0.99
    # the exported script takes the same way out (its quantizer failing the same way)
    line = f"from onnxruntime.quantization import quantize_{mode}\n"
    fails = line + _SCRIPT_FAILS_ON_ANNOTATIONS.format(name=f"quantize_{mode}")

    def edit(text: str) -> str:
        assert line in text
        return text.replace(line, fails)

    out = run_script(recipe(str(annotated), spec, [step]), tmp_path, edit=edit)
    folder = f"step_00_quantize_onnx_{mode}"
    assert (out / folder / "model_without_value_info.onnx").is_file()
    assert (out / folder / f"model_int8_{mode}.onnx").is_file()


_SCRIPT_FAILS_ON_ANNOTATIONS = """
_real = {name}


def {name}(src, *args, **kwargs):
    import onnx
    from onnx.shape_inference import InferenceError

    if onnx.load(str(src), load_external_data=False).graph.value_info:
        raise InferenceError("[ShapeInferenceError] Inferred shape and existing shape differ")
    return _real(src, *args, **kwargs)
"""
