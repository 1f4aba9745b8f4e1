"""ONNX passes: export_onnx, onnxruntime, onnx_fp16 on the zoo models, their errors."""

from __future__ import annotations

import onnx
import pytest
import torch
import torch.nn.functional as F

from accel.errors import PassError
from accel.models import InputSpec, load_model
from accel.models.loaded import LoadedModel
from accel.passes import PassContext, get_pass
from accel.runner import run_recipe

BENCH = {"warmup": 0, "iters": 2}
# Small zoo variants keep export and benchmarks quick; the source string is what the runner loads.
SOURCES = {
    "mlp": "zoo:mlp(hidden=128)",
    "resnet": "zoo:resnet(widths=(8, 16, 32), blocks=1)",
    "transformer": "zoo:transformer(hidden=64, num_layers=2, ffn=128, vocab_size=500)",
    "lstm": "zoo:lstm(vocab_size=500, embed=32, hidden=64)",
}
OTHER_DIMS = {"batch": 3, "seq": 7}


def _run(tmp_path_factory, name, steps, **extra):
    out = tmp_path_factory.mktemp(f"run-{name}")
    recipe = {
        "name": name,
        "model": {"source": SOURCES[name]},
        "benchmark": BENCH,
        "steps": steps,
        **extra,
    }
    if name in ("transformer", "lstm"):
        # token ids must stay inside the small vocabularies
        spec = {"transformer": "input_ids", "lstm": "tokens"}[name]
        recipe["model"]["input_spec"] = (
            f"{spec}:int64[batch,seq]{{0..500}}; batch=1..16:2; seq=1..64:16"
        )
    return run_recipe(recipe, out_dir=out)


PIPELINE = [
    {"pass": "export_onnx", "params": {"exporter": "torchscript"}},
    {"pass": "onnxruntime", "params": {"graph_optimization_level": "all", "intra_op_threads": 1}},
    {"pass": "onnx_fp16"},
]


@pytest.fixture(scope="module")
def pipeline_runs(tmp_path_factory):
    """export_onnx -> onnxruntime -> onnx_fp16 through the runner, once per zoo model."""
    return {name: _run(tmp_path_factory, name, PIPELINE) for name in SOURCES}


def _max_abs(step):
    return max(o["max_abs"] for o in step.parity["outputs"])


def _cosine(step):
    return min(o["cosine"] for o in step.parity["outputs"])


@pytest.mark.parametrize("name", list(SOURCES))
def test_export_then_onnxruntime_keeps_fp32_parity(pipeline_runs, name):
    res = pipeline_runs[name]
    assert res.status == "succeeded", res.error
    export, ort_step, _ = res.steps
    assert export.status == ort_step.status == "succeeded"
    assert _max_abs(export) < 1e-4 and _max_abs(ort_step) < 1e-4
    onnx_file = next(a for a in export.artifacts if a["kind"] == "onnx")
    assert onnx_file["path"].endswith("model.onnx") and onnx_file["sha256"]
    assert export.details["exporter"] == "torchscript" and export.details["opset"] == 17
    assert "warnings" not in export.details  # no tracer warnings: no frozen data-dependent values
    assert export.metrics["export_time_s"] > 0 and export.metrics["onnx_nodes"] > 0
    assert ort_step.details["provider"] == "CPUExecutionProvider"
    assert ort_step.details["graph_optimization_level"] == "all"
    assert ort_step.details["intra_op_threads"] == 1
    assert any(a["kind"] == "onnx_optimized" and a["bytes"] for a in ort_step.artifacts)
    assert ort_step.timing.p50_step_ms > 0 and ort_step.metrics["session_create_s"] > 0


@pytest.mark.parametrize("name", list(SOURCES))
def test_fp16_parity_and_cpu_warning(pipeline_runs, name):
    fp16 = pipeline_runs[name].steps[2]
    assert fp16.status == "succeeded"
    assert _cosine(fp16) > 0.999
    assert any("usually slower" in w for w in fp16.details["warnings"])
    # the default CPU block list keeps the ops ORT has no fp16 CPU kernel for (Gemm at least)
    assert "Gemm" in fp16.details["blocked_for_cpu"]
    assert "Gemm" in fp16.details["op_block_list"] and "Range" in fp16.details["op_block_list"]
    model = onnx.load(next(a["path"] for a in fp16.artifacts if a["kind"] == "onnx"))
    assert (
        model.graph.input[0].type.tensor_type.elem_type != onnx.TensorProto.FLOAT16
    )  # keep_io_types
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    onnx.checker.check_model(model)


@pytest.mark.parametrize("name", ["mlp", "resnet", "transformer", "lstm"])
def test_exported_model_has_dynamic_axes(pipeline_runs, name):
    """The exported file runs at another batch size / sequence length, same outputs as eager."""
    res = pipeline_runs[name]
    path = next(a["path"] for a in res.steps[0].artifacts if a["kind"] == "onnx")
    spec = res.model.input_spec
    onnx_model = load_model(path, spec)
    proto = onnx.load(path)
    for t, inp in zip(spec.inputs, proto.graph.input):
        dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
        assert dims == list(t.shape)  # symbolic dims keep the spec's names
    plain = load_model(path)  # no spec given: inferred from the file, dims by name
    assert [t.dtype for t in plain.input_spec.inputs] == [t.dtype for t in spec.inputs]
    assert set(plain.input_spec.dims) == set(spec.dims)
    assert (
        plain.forward(plain.example_inputs(seed=1))[0].shape[0]
        == plain.input_spec.dims["batch"].default
    )
    eager = load_model(SOURCES[name], spec)
    dims = {k: v for k, v in OTHER_DIMS.items() if k in spec.dims}
    x = spec.sample(seed=5, dims=dims)
    (got,) = onnx_model.forward(x)
    want = eager.forward(x)
    assert got.shape == want.shape and got.shape[0] == 3
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_dynamo_exporter_and_simplify(tmp_path_factory):
    res = _run(
        tmp_path_factory,
        "transformer",
        [{"pass": "export_onnx", "params": {"exporter": "dynamo", "simplify": True}}],
    )
    assert res.status == "succeeded", res.error
    (step,) = res.steps
    assert _max_abs(step) < 1e-4
    assert step.details["exporter"] == "dynamo" and step.details["opset"] == 18
    assert step.details["onnx_nodes"] <= step.details["nodes_before_simplify"]
    proto = onnx.load(res.model.onnx_path)
    dims = [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq"]  # dynamo's s0/s1 renamed to the spec's dims
    x = res.model.input_spec.sample(seed=3, dims={"batch": 3, "seq": 5})
    (got,) = res.model.forward(x)
    want = load_model(SOURCES["transformer"], res.model.input_spec).forward(x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


# -- errors ---------------------------------------------------------------------------------


@torch.library.custom_op("accel_test::scale2", mutates_args=())
def _scale2(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_scale2.register_fake
def _(x):
    return torch.empty_like(x)


class _CustomOpNet(torch.nn.Module):
    def forward(self, x):
        return _scale2(x) + 1


class _GridSampleNet(torch.nn.Module):
    """grid_sample has an ONNX mapping from opset 16 (GridSample) only."""

    def forward(self, x):
        grid = torch.zeros(x.shape[0], 4, 4, 2)
        return F.grid_sample(x, grid, align_corners=False)


def _apply(pass_name, module, params, tmp_path, spec="x:float32[batch,3,8,8]"):
    spec = InputSpec.parse(spec)
    lm = LoadedModel(source="test", kind="torch", input_spec=spec, module=module.eval())
    cls = get_pass(pass_name)
    ctx = PassContext(inputs=spec.sample(), work_dir=tmp_path)
    return cls().apply(lm, cls.parse_config(params), ctx), ctx


def test_op_without_onnx_mapping_names_op_and_ways_out(tmp_path):
    with pytest.raises(PassError) as err:
        _apply("export_onnx", _CustomOpNet(), {"exporter": "torchscript"}, tmp_path)
    msg = str(err.value)
    assert "accel_test::scale2" in msg and "exporter: dynamo" in msg and "opset" in msg


def test_op_needing_a_higher_opset_says_which(tmp_path):
    with pytest.raises(PassError) as err:
        _apply("export_onnx", _GridSampleNet(), {"exporter": "torchscript", "opset": 15}, tmp_path)
    msg = str(err.value)
    assert "aten::grid_sampler" in msg and "opset: 16" in msg and "exporter: dynamo" in msg
    # ... and at that opset it exports and matches eager
    model, _ = _apply(
        "export_onnx", _GridSampleNet(), {"exporter": "torchscript", "opset": 16}, tmp_path
    )
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(
        model.forward({"x": x})[0], _GridSampleNet()(x), atol=1e-5, rtol=1e-5
    )


def test_dynamo_op_without_mapping(tmp_path):
    with pytest.raises(PassError) as err:
        _apply("export_onnx", _CustomOpNet(), {"exporter": "dynamo"}, tmp_path)
    msg = str(err.value)
    assert "accel_test.scale2" in msg and "exporter: torchscript" in msg


class _BranchNet(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow
            return x * 2
        return x - 1


def test_data_dependent_control_flow(tmp_path):
    with pytest.raises(PassError) as err:
        _apply("export_onnx", _BranchNet(), {"exporter": "dynamo"}, tmp_path / "d")
    msg = str(err.value)
    assert "data-dependent control flow" in msg and "if x.sum() > 0:" in msg
    assert "torch.cond" in msg and "exporter: torchscript" in msg
    _, ctx = _apply("export_onnx", _BranchNet(), {"exporter": "torchscript"}, tmp_path / "t")
    (warning,) = ctx.details["warnings"]
    assert "test_passes_onnx.py" in warning and "example inputs' path" in warning


@pytest.mark.parametrize(
    ("exporter", "opset"), [("torchscript", 99), ("torchscript", 3), ("dynamo", 99), ("dynamo", 12)]
)
def test_impossible_opset_is_a_clear_error(tmp_path, exporter, opset):
    """Refused when the parameters are read (a recipe, the GUI's form), before any export;
    a config built without validation still fails at the step with the same words."""
    from pydantic import ValidationError

    from accel.passes.onnx_export import ExportOnnxConfig

    words = rf"opset {opset} is not possible with the {exporter} exporter.*Set opset"
    with pytest.raises(ValidationError, match=words):
        get_pass("export_onnx").parse_config({"exporter": exporter, "opset": opset})
    config = ExportOnnxConfig.model_construct(exporter=exporter, opset=opset)
    cls = get_pass("export_onnx")
    spec = InputSpec.parse("x:float32[batch,3,8,8]")
    lm = LoadedModel(source="t", kind="torch", input_spec=spec, module=torch.nn.Conv2d(3, 4, 3))
    with pytest.raises(PassError, match=words):
        cls().apply(lm, config, PassContext(inputs=spec.sample(), work_dir=tmp_path))


def test_onnxruntime_on_a_torch_model_says_export_first(tmp_path):
    res = run_recipe(
        {
            "model": {"source": SOURCES["mlp"]},
            "benchmark": BENCH,
            "steps": [{"pass": "onnxruntime"}],
        },
        out_dir=tmp_path,
    )
    assert res.status == "failed" and "Add an export_onnx step before it" in res.error
    res = run_recipe(
        {"model": {"source": SOURCES["mlp"]}, "benchmark": BENCH, "steps": [{"pass": "onnx_fp16"}]},
        out_dir=tmp_path / "b",
    )
    assert res.status == "failed" and "export_onnx" in res.error


def _exported(tmp_path):
    model, _ = _apply(
        "export_onnx", torch.nn.Conv2d(3, 64, 5), {"exporter": "torchscript"}, tmp_path / "e"
    )
    return model


def test_onnxruntime_provider_fallback_and_options(tmp_path):
    model = _exported(tmp_path)
    cls = get_pass("onnxruntime")
    ctx = PassContext(inputs=model.input_spec.sample(), work_dir=tmp_path / "o")
    cfg = cls.parse_config(
        {
            "providers": ["cuda", "cpu"],
            "graph_optimization_level": "basic",
            "intra_op_threads": 1,
            "inter_op_threads": 2,
            "execution_mode": "parallel",
            "save_optimized": False,
        }
    )
    out = cls().apply(model, cfg, ctx)
    assert ctx.details["providers_active"] == ["CPUExecutionProvider"]  # no GPU here: CPU runs it
    assert any("CUDAExecutionProvider" in w for w in ctx.details["warnings"])
    assert out.session_options["graph_optimization_level"] == "basic"
    so = out.session().get_session_options()
    assert so.intra_op_num_threads == 1 and so.inter_op_num_threads == 2
    assert not ctx.artifacts  # save_optimized off
    x = model.input_spec.sample(seed=1)
    torch.testing.assert_close(out.forward(x)[0], model.forward(x)[0])


def test_external_data_stays_in_the_step_folder(tmp_path):
    module = torch.nn.Conv2d(3, 64, 5)
    model, ctx = _apply(
        "export_onnx", module, {"exporter": "torchscript", "external_data": True}, tmp_path
    )
    kinds = {a["kind"]: a["path"] for a in ctx.artifacts}
    assert set(kinds) == {"onnx", "onnx_external_data"}
    data = tmp_path / "model.onnx.data"
    assert kinds["onnx_external_data"] == str(data) and data.stat().st_size >= 64 * 3 * 5 * 5 * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert ctx.details["external_data"] is True
    x = model.input_spec.sample(seed=4)
    torch.testing.assert_close(model.forward(x)[0], module(x["x"]).detach(), atol=1e-5, rtol=1e-5)
    reloaded = load_model(str(tmp_path / "model.onnx"))  # external data checked and found
    assert reloaded.num_params == model.num_params == 64 * 3 * 5 * 5 + 64


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_big_models_get_external_data_by_default(tmp_path, monkeypatch, exporter):
    import accel.passes.onnx_export as onnx_export

    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_THRESHOLD", 10_000)  # "big" = over 10 kB here
    model, ctx = _apply("export_onnx", torch.nn.Conv2d(3, 64, 5), {"exporter": exporter}, tmp_path)
    assert ctx.details["external_data"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert load_model(str(tmp_path / "model.onnx")).num_params == 64 * 3 * 5 * 5 + 64


def test_fp16_full_conversion_halves_the_size(tmp_path):
    model = _exported(tmp_path)
    cls = get_pass("onnx_fp16")
    ctx = PassContext(inputs=model.input_spec.sample(), work_dir=tmp_path / "f")
    out = cls().apply(model, cls.parse_config({"op_block_list": []}), ctx)
    assert ctx.details["fp16_initializers"] == 2 and ctx.details["fp32_initializers"] == 0
    assert ctx.metrics["size_ratio"] < 0.75
    x = model.input_spec.sample(seed=2)
    got, want = out.forward(x)[0], model.forward(x)[0]
    assert got.dtype == torch.float32
    assert F.cosine_similarity(got.flatten(), want.flatten(), dim=0) > 0.999
    with pytest.raises(PassError, match="already float16"):
        cls().apply(
            out,
            cls.parse_config({"op_block_list": []}),
            PassContext(inputs=x, work_dir=tmp_path / "g"),
        )


def _ort_has(provider: str) -> bool:
    import onnxruntime as ort

    return provider in ort.get_available_providers()


@pytest.mark.gpu
@pytest.mark.skipif(
    not _ort_has("CUDAExecutionProvider"), reason="needs onnxruntime-gpu (the CUDA provider)"
)
def test_onnxruntime_cuda_io_binding(tmp_path):
    model = _exported(tmp_path).replace(device="cuda")
    cls = get_pass("onnxruntime")
    ctx = PassContext(inputs=model.input_spec.sample(), work_dir=tmp_path / "o", device="cuda")
    out = cls().apply(model, cls.parse_config({"providers": ["cuda", "cpu"]}), ctx)
    assert ctx.details["provider"] == "CUDAExecutionProvider" and ctx.details["io_binding"]
    x = model.input_spec.sample(seed=1)
    ref = model.replace(device="cpu").forward(x)[0]
    torch.testing.assert_close(out.forward(x)[0], ref, atol=1e-4, rtol=1e-4)
    from accel.timing.single import benchmark

    assert benchmark(out, x, device="cuda", warmup=1, iters=3).median_ms > 0  # the IOBinding path


def test_onnx_file_as_the_source(pipeline_runs, tmp_path):
    """A user opens an .onnx file: onnxruntime and onnx_fp16 apply to it directly."""
    path = next(
        a["path"] for a in pipeline_runs["resnet"].steps[0].artifacts if a["kind"] == "onnx"
    )
    res = run_recipe(
        {
            "model": {"source": path},
            "benchmark": BENCH,
            "steps": [
                {"pass": "onnx_fp16", "params": {"op_block_list": []}},
                {"pass": "onnxruntime", "params": {"graph_optimization_level": "extended"}},
            ],
        },
        out_dir=tmp_path,
    )
    assert res.status == "succeeded", res.error
    fp16, ort_step = res.steps
    assert fp16.details["fp16_initializers"] > 0 and fp16.metrics["size_ratio"] < 0.6
    assert _cosine(fp16) > 0.999 and _cosine(ort_step) > 0.999
    assert ort_step.details["graph_optimization_level"] == "extended"


def test_gpu_providers_that_cannot_run_here_are_an_error_not_a_silent_cpu_run(tmp_path):
    """Asked for the CUDA provider where it cannot run (no GPU here; on the H200 check,
    onnxruntime without the GPU build), the step fails saying why, instead of timing the CPU."""
    from accel.errors import PassError

    model = _exported(tmp_path)
    cls = get_pass("onnxruntime")
    ctx = PassContext(inputs=model.input_spec.sample(), work_dir=tmp_path / "o", device="cpu")
    with pytest.raises(PassError, match="none of the execution providers asked for"):
        cls().apply(model, cls.parse_config({"providers": ["cuda"]}), ctx)
    out = cls().apply(model, cls.parse_config({"providers": ["cuda", "cpu"]}), ctx)
    assert ctx.details["provider"] == "CPUExecutionProvider" and out.session() is not None
