"""Torch-side passes (precision, fold_batchnorm, channels_last, compile, torchscript, torch_export,
cuda_graphs) run through the real runner on small zoo models, with parity numbers asserted."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path

import pytest
import torch

from accel.errors import PassError
from accel.models import load_model
from accel.passes import PassContext, get_pass
from accel.runner import run_recipe

# Small versions of the zoo models, so a run takes seconds on two cores.
RESNET = "zoo:resnet(widths=(8, 16, 32), blocks=1)"
RESNET_SPEC = "x:float32[batch,3,32,32]; batch=1..16:2"
MLP = "zoo:mlp(in_features=64, hidden=64)"
MLP_SPEC = "x:float32[batch,64]; batch=1..64:4"
TRANSFORMER = "zoo:transformer(vocab_size=100, hidden=32, num_layers=1, num_heads=2, ffn=64)"
TRANSFORMER_SPEC = "input_ids:int64[batch,seq]{0..100}; batch=1..8:2; seq=1..64:16"
LSTM = "zoo:lstm(vocab_size=100, embed=16, hidden=32)"
LSTM_SPEC = "tokens:int64[batch,seq]{0..100}; batch=1..8:2; seq=1..64:16"

BF16_GATES = {"rtol": 0.05, "atol": 0.05, "min_cosine": 0.99, "min_top1": 0.5}

BRANCHY = """
import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 1e9:  # data-dependent branch (never taken here)
            y = y * 0
        if x.shape[0] > 2:  # the traced batch size decides the path
            return y * 2
        return y


def build():
    torch.manual_seed(0)
    return Branchy().eval()
"""


def recipe(source: str, spec: str, steps: list[dict], **extra) -> dict:
    return {
        "name": "test",
        "model": {"source": source, "input_spec": spec},
        "steps": steps,
        "benchmark": {"warmup": 1, "iters": 3},
        **extra,
    }


def run(tmp_path_factory, source: str, spec: str, steps: list[dict], **extra):
    out = tmp_path_factory.mktemp("run")
    # The test names its own model files: it trusts them (SECURITY.md).
    return run_recipe(recipe(source, spec, steps, **extra), out_dir=out, trust_recipe_code=True)


def worst(step) -> dict:
    return step.parity["worst"]


@pytest.fixture(scope="module")
def resnet_run(tmp_path_factory):
    """fold_batchnorm -> channels_last -> bf16 -> torchscript on the small ResNet."""
    steps = [
        {"pass": "fold_batchnorm"},
        {"pass": "channels_last"},
        {"pass": "bf16", "gates": BF16_GATES},
        {"pass": "torchscript"},
    ]
    return run(tmp_path_factory, RESNET, RESNET_SPEC, steps, on_gate_fail="stop")


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    """fp16 (last layer kept in fp32) -> torch_export on the small MLP."""
    steps = [{"pass": "fp16", "params": {"keep_last_fp32": True}}, {"pass": "torch_export"}]
    return run(tmp_path_factory, MLP, MLP_SPEC, steps, on_gate_fail="stop")


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory):
    """bf16 (LayerNorms kept in fp32) -> torch_export -> torchscript... on the small transformer."""
    steps = [{"pass": "bf16", "gates": BF16_GATES}, {"pass": "torch_export"}]
    return run(tmp_path_factory, TRANSFORMER, TRANSFORMER_SPEC, steps, on_gate_fail="stop")


@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory):
    steps = [{"pass": "bf16", "gates": BF16_GATES}, {"pass": "torchscript"}]
    return run(tmp_path_factory, LSTM, LSTM_SPEC, steps, on_gate_fail="stop")


@pytest.fixture(scope="module")
def resnet_model():
    return load_model(RESNET, RESNET_SPEC)


def apply_pass(name: str, model, params=None, tmp_path: Path | None = None):
    cls = get_pass(name)
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path or Path("."), original=model)
    p = cls()
    p.check_requirements(model, "cpu")
    return p.apply(model, cls.parse_config(params or {}), ctx), ctx


# -- fold_batchnorm -----------------------------------------------------------------------------


def test_fold_batchnorm_resnet_exact(resnet_run):
    assert resnet_run.ok, resnet_run.error
    fold = resnet_run.steps[0]
    assert fold.pass_name == "fold_batchnorm"
    # stem + 2 convs per block + 2 downsample convs (widths 8, 16, 32, one block per stage)
    assert fold.details["folded"] == 9
    assert fold.metrics["batchnorm_folded"] == 9
    assert worst(fold)["max_abs"] < 1e-4
    assert worst(fold)["min_cosine"] > 0.99999


def test_fold_batchnorm_removes_every_batchnorm(resnet_model, tmp_path):
    model = resnet_model.replace(module=copy.deepcopy(resnet_model.module))
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.module.modules()) == 9
    x = model.example_inputs(seed=3, batch=4)
    want = resnet_model.forward(x)
    new, ctx = apply_pass("fold_batchnorm", model, tmp_path=tmp_path)
    assert (
        sum(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in new.module.modules()) == 0
    )
    assert ctx.details["folded"] == 9
    assert torch.allclose(new.forward(x), want, atol=1e-4)
    # fewer parameters: BN weight/bias gone, conv biases added (same count), running stats gone
    assert new.size_bytes < resnet_model.size_bytes


def test_fold_batchnorm_linear_bn1d(tmp_path):
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU())
    net.train()
    with torch.no_grad():
        for _ in range(3):
            net(torch.randn(16, 6) * 3 + 1)
    net.eval()
    model = LoadedModel(
        "test", "torch", InputSpec.parse("x:float32[batch,6]; batch=1..8:4"), module=net
    )
    x = model.example_inputs(seed=1)
    want = net(x["x"]).detach().clone()
    new, ctx = apply_pass("fold_batchnorm", model, tmp_path=tmp_path)
    assert ctx.details["pairs"] == ["0 + 1"]
    assert isinstance(new.module[1], torch.nn.Identity)
    assert torch.allclose(new.forward(x), want, atol=1e-5)


def test_fold_batchnorm_without_batchnorm_is_an_error(tmp_path):
    model = load_model(MLP, MLP_SPEC)
    with pytest.raises(PassError, match="no BatchNorm"):
        apply_pass("fold_batchnorm", model, tmp_path=tmp_path)


# -- channels_last --------------------------------------------------------------------------------


def test_channels_last_resnet(resnet_run):
    step = resnet_run.steps[1]
    assert step.pass_name == "channels_last" and step.status == "succeeded"
    assert worst(step)["max_abs"] < 1e-4


def test_channels_last_converts_conv_weights_and_inputs(resnet_model, tmp_path):
    model = resnet_model.replace(module=copy.deepcopy(resnet_model.module))
    new, _ = apply_pass("channels_last", model, tmp_path=tmp_path)
    convs = [m for m in new.module.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    prepared = new.prepare_inputs(new.example_inputs(batch=2))
    assert prepared["x"].is_contiguous(memory_format=torch.channels_last)
    assert not prepared["x"].is_contiguous()
    x = model.example_inputs(seed=2, batch=2)
    assert torch.allclose(new.forward(x), resnet_model.forward(x), atol=1e-4)


def test_channels_last_needs_conv(tmp_path):
    with pytest.raises(PassError, match="2-D convolutions"):
        apply_pass("channels_last", load_model(MLP, MLP_SPEC), tmp_path=tmp_path)


# -- fp16 / bf16 / autocast ----------------------------------------------------------------------


def test_bf16_resnet_parity_and_dtype(resnet_run):
    step = resnet_run.steps[2]
    assert step.pass_name == "bf16" and step.status == "succeeded"
    assert worst(step)["min_cosine"] > 0.99
    assert worst(step)["min_top1"] == 1.0
    assert step.details["input_casts"] == {"x": "bfloat16"}
    # BN is folded, so there is no norm layer left to keep in fp32
    assert step.details["kept_fp32"] == []
    # not bit-identical: the step really computes in bf16
    assert worst(step)["max_abs"] > 0


def test_fp16_mlp_keeps_last_layer_and_warns_on_cpu(mlp_run):
    assert mlp_run.ok, mlp_run.error
    step = mlp_run.steps[0]
    assert worst(step)["min_cosine"] > 0.999
    assert step.details["kept_fp32"] == ["fc3"]
    assert step.details["input_casts"] == {"x": "float16"}
    from accel.passes.precision import _cpu_flags

    warned = any("float16" in w and "CPU" in w for w in step.details.get("warnings", []))
    # the warning is for CPUs without native fp16 kernels; some CPUs have them
    assert warned == (not ({"avx512_fp16", "amx_fp16"} & _cpu_flags()))
    # fp16 weights halve the size of fc1/fc2 (fc3 stays fp32)
    assert step.metrics["size_bytes"] < mlp_run.baseline["size_bytes"] * 0.6


def test_bf16_transformer_keeps_norms_and_integer_inputs(transformer_run):
    assert transformer_run.ok, transformer_run.error
    step = transformer_run.steps[0]
    assert worst(step)["min_cosine"] > 0.99
    assert set(step.details["kept_fp32"]) == {"embedding_norm", "layers.0.norm1", "layers.0.norm2"}
    # token ids are integers: nothing to cast
    assert step.details["input_casts"] == {}


def test_bf16_weights_and_wrapped_norms(tmp_path):
    from accel.passes._torch_helpers import KeepFloat32

    model = load_model(TRANSFORMER, TRANSFORMER_SPEC)
    x = model.example_inputs(seed=1)
    want = model.forward(x)
    new, _ = apply_pass("bf16", model, {"keep_last_fp32": True}, tmp_path)
    m = new.module
    assert m.layers[0].ffn_in.weight.dtype == torch.bfloat16
    assert m.token_embedding.weight.dtype == torch.bfloat16
    assert (
        isinstance(m.layers[0].norm1, KeepFloat32)
        and m.layers[0].norm1.module.weight.dtype == torch.float32
    )
    assert (
        isinstance(m.classifier, KeepFloat32) and m.classifier.module.weight.dtype == torch.float32
    )
    got = new.forward(x)
    assert got.dtype == torch.bfloat16  # the head computes in fp32 and casts back
    cos = torch.nn.functional.cosine_similarity(got.float().flatten(), want.flatten(), dim=0)
    assert cos > 0.99


def test_fp16_resnet_keeps_batchnorm_in_fp32(resnet_model, tmp_path):
    from accel.passes._torch_helpers import KeepFloat32

    model = resnet_model.replace(module=copy.deepcopy(resnet_model.module))
    x = model.example_inputs(seed=4, batch=4)
    want = resnet_model.forward(x)
    new, ctx = apply_pass("fp16", model, tmp_path=tmp_path)
    wrapped = [m for m in new.module.modules() if isinstance(m, KeepFloat32)]
    assert len(wrapped) == 9 == len(ctx.details["kept_fp32"])
    assert all(w.module.running_var.dtype == torch.float32 for w in wrapped)
    assert new.module.layer1[0].conv1.weight.dtype == torch.float16
    assert new.input_casts == {"x": "float16"}
    got = new.forward(x)
    assert got.dtype == torch.float16
    cos = torch.nn.functional.cosine_similarity(got.float().flatten(), want.flatten(), dim=0)
    assert cos > 0.999
    assert (got.float().argmax(1) == want.argmax(1)).all()


def test_bf16_lstm(lstm_run):
    assert lstm_run.ok, lstm_run.error
    step = lstm_run.steps[0]
    assert worst(step)["min_cosine"] > 0.99
    assert step.details["input_casts"] == {}


def test_autocast_mlp_and_transformer(tmp_path_factory):
    for source, spec in ((MLP, MLP_SPEC), (TRANSFORMER, TRANSFORMER_SPEC)):
        res = run(tmp_path_factory, source, spec, [{"pass": "autocast", "gates": BF16_GATES}])
        assert res.ok, res.error
        step = res.steps[0]
        assert step.details["autocast"] == {"device_type": "cpu", "dtype": "bfloat16"}
        assert worst(step)["min_cosine"] > 0.99
        assert 0 < worst(step)["max_abs"] < 0.1  # really mixed precision, and close
        # weights untouched
        assert res.model.module.module.state_dict() and all(
            t.dtype == torch.float32
            for t in res.model.module.state_dict().values()
            if t.is_floating_point()
        )


def test_autocast_refuses_a_bf16_model(tmp_path_factory):
    res = run(tmp_path_factory, MLP, MLP_SPEC, [{"pass": "bf16"}, {"pass": "autocast"}])
    assert not res.ok
    assert "already runs in bfloat16" in res.error


# -- compile --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "spec", "backend"),
    [(MLP, MLP_SPEC, "eager"), (TRANSFORMER, TRANSFORMER_SPEC, "aot_eager")],
)
def test_compile_records_compile_time_and_graph(tmp_path_factory, source, spec, backend):
    res = run(tmp_path_factory, source, spec, [{"pass": "compile", "params": {"backend": backend}}])
    assert res.ok, res.error
    step = res.steps[0]
    assert step.metrics["compile_time_s"] > 0
    assert step.details["backend"] == backend
    assert step.details["graph_count"] == 1 and step.details["graph_breaks"] == 0
    assert worst(step)["max_abs"] < 1e-5
    assert type(res.model.module).__name__ == "OptimizedModule"


@pytest.fixture
def branchy_source(tmp_path):
    path = tmp_path / "branchy.py"
    path.write_text(textwrap.dedent(BRANCHY))
    return f"{path}:build", "x:float32[batch,8]; batch=1..8:2"


def test_compile_reports_graph_breaks(tmp_path_factory, branchy_source):
    source, spec = branchy_source
    res = run(tmp_path_factory, source, spec, [{"pass": "compile", "params": {"backend": "eager"}}])
    assert res.ok, res.error
    d = res.steps[0].details
    assert d["graph_breaks"] == 1
    assert "branchy.py:13" in d["graph_break_reasons"][0]["where"]
    assert any("graph break" in w for w in d["warnings"])


def test_compile_fullgraph_fails_naming_the_break(tmp_path_factory, branchy_source):
    source, spec = branchy_source
    steps = [{"pass": "compile", "params": {"backend": "eager", "fullgraph": True}}]
    res = run(tmp_path_factory, source, spec, steps)
    assert not res.ok
    assert (
        "graph break" in res.error
        and "branchy.py:13" in res.error
        and "fullgraph: false" in res.error
    )


def test_compile_rejects_mode_with_other_backend(tmp_path_factory):
    steps = [{"pass": "compile", "params": {"backend": "eager", "mode": "max-autotune"}}]
    res = run(tmp_path_factory, MLP, MLP_SPEC, steps)
    assert not res.ok and "inductor mode" in res.error


@pytest.mark.slow
def test_compile_inductor_mlp(tmp_path_factory):
    res = run(tmp_path_factory, MLP, MLP_SPEC, [{"pass": "compile"}])
    assert res.ok, res.error
    step = res.steps[0]
    assert step.details["backend"] == "inductor"
    assert step.metrics["compile_time_s"] > 0
    # inductor reorders float math: close, not identical
    assert worst(step)["max_abs"] < 1e-4


# -- torchscript ----------------------------------------------------------------------------------


def test_torchscript_artifact_reloads(resnet_run):
    step = resnet_run.steps[3]
    assert step.pass_name == "torchscript" and step.status == "succeeded"
    ts = [a for a in step.artifacts if a["kind"] == "torchscript"]
    assert len(ts) == 1 and Path(ts[0]["path"]).is_file() and ts[0]["sha256"]
    assert step.details["checked_on"] == {"x": [3, 3, 32, 32]}
    # the saved file is what the runner ran: same outputs as the step, bf16 weights inside
    loaded = torch.jit.load(ts[0]["path"])
    assert isinstance(resnet_run.model.module, torch.jit.ScriptModule)
    assert {t.dtype for t in loaded.state_dict().values() if t.is_floating_point()} == {
        torch.bfloat16
    }
    x = load_model(RESNET, RESNET_SPEC).example_inputs(seed=0, batch=2)["x"]
    x = x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        out = loaded(x).float()
    saved = torch.load(Path(resnet_run.run_dir) / "step_03_torchscript" / "outputs.pt")
    assert torch.equal(out, saved)
    assert worst(step)["min_cosine"] > 0.99


def test_torchscript_lstm_warns_about_tracing(lstm_run):
    step = lstm_run.steps[1]
    assert step.status == "succeeded"
    assert step.details["checked_on"] == {"tokens": [3, 17]}
    assert any(w.startswith("tracer:") for w in step.details["warnings"])
    assert worst(step)["min_cosine"] > 0.99


def test_torchscript_trace_check_catches_shape_branch(tmp_path_factory, branchy_source):
    source, spec = branchy_source
    res = run(tmp_path_factory, source, spec, [{"pass": "torchscript"}])
    assert not res.ok
    assert "second input" in res.error and "method: script" in res.error
    warnings = res.steps[0].details["warnings"]
    assert any("branchy.py:13" in w for w in warnings)


DICT_OUT = """
import torch


class DictOut(torch.nn.Module):
    # returns a dict, like a Hugging Face ModelOutput
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x)
        return {"logits": h, "hidden": torch.relu(h)}


def build():
    torch.manual_seed(0)
    return DictOut().eval()
"""


def test_torchscript_traces_a_model_with_dict_outputs(tmp_path_factory):
    path = tmp_path_factory.mktemp("dictout") / "dictout.py"
    path.write_text(DICT_OUT)
    res = run(
        tmp_path_factory,
        f"{path}:build",
        "x:float32[batch,8]; batch=1..8:2",
        [{"pass": "torchscript"}],
    )
    assert res.ok, res.error
    assert worst(res.steps[0])["max_abs"] < 1e-6
    out = res.model.module(torch.randn(3, 8))
    assert isinstance(out, dict) and list(out) == ["logits", "hidden"]


def test_torchscript_script_method_frozen(tmp_path_factory):
    steps = [{"pass": "torchscript", "params": {"method": "script", "freeze": True}}]
    res = run(tmp_path_factory, MLP, MLP_SPEC, steps)
    assert res.ok, res.error
    assert worst(res.steps[0])["max_abs"] < 1e-5
    module = res.model.module
    assert isinstance(module, torch.jit.ScriptModule)
    # frozen: the weights are constants of the graph, no parameters left
    assert not list(module.parameters())


# -- torch_export ----------------------------------------------------------------------------------


def test_torch_export_mlp_dynamic_batch(mlp_run):
    step = mlp_run.steps[1]
    assert step.status == "succeeded"
    assert step.details["dynamic_dims"] == {"batch": [1, 64]}
    pt2 = [a for a in step.artifacts if a["kind"] == "exported_program"]
    assert len(pt2) == 1 and pt2[0]["path"].endswith(".pt2")
    # same numbers as the fp16 step it exported
    assert worst(step)["max_abs"] == pytest.approx(worst(mlp_run.steps[0])["max_abs"], abs=1e-6)
    # the saved program runs other batch sizes, including 1
    ep = torch.export.load(pt2[0]["path"]).module()
    ref = load_model(MLP, MLP_SPEC)
    for batch in (1, 7):
        x = ref.example_inputs(seed=5, batch=batch)
        with torch.inference_mode():
            got = ep(x["x"].half()).float()
        assert got.shape == (batch, 10)
        cos = torch.nn.functional.cosine_similarity(got.flatten(), ref.forward(x).flatten(), dim=0)
        assert cos > 0.999


def test_torch_export_transformer_batch_and_seq(transformer_run):
    step = transformer_run.steps[1]
    assert step.status == "succeeded", step.error
    assert step.details["dynamic_dims"] == {"batch": [1, 8], "seq": [1, 64]}
    assert worst(step)["min_cosine"] > 0.99
    pt2 = next(a["path"] for a in step.artifacts if a["kind"] == "exported_program")
    loaded = load_model(pt2)
    assert loaded.format == "exported_program"
    out = loaded.forward({"input_ids": torch.randint(0, 100, (3, 40))})
    assert out.shape == (3, 4)


def test_torch_export_lstm_names_the_static_dim(tmp_path_factory):
    res = run(tmp_path_factory, LSTM, LSTM_SPEC, [{"pass": "torch_export"}])
    assert not res.ok
    assert "static_dims: [seq]" in res.error


def test_torch_export_data_dependent_branch(tmp_path_factory, branchy_source):
    source, spec = branchy_source
    res = run(tmp_path_factory, source, spec, [{"pass": "torch_export"}])
    assert not res.ok
    assert "data-dependent control flow" in res.error
    assert "torch.cond" in res.error and "branchy.py:13" in res.error


# -- cuda_graphs ---------------------------------------------------------------------------------


def test_cuda_graphs_needs_cuda(tmp_path_factory):
    res = run(tmp_path_factory, MLP, MLP_SPEC, [{"pass": "cuda_graphs"}])
    assert not res.ok
    assert "cuda_graphs needs a CUDA GPU" in res.error
    assert res.steps == []  # the pre-flight plan rejects it before any work (accel.plan)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graphs_on_gpu(tmp_path_factory):
    steps = [{"pass": "bf16", "gates": BF16_GATES}, {"pass": "cuda_graphs", "gates": BF16_GATES}]
    res = run(tmp_path_factory, RESNET, RESNET_SPEC, steps, device="cuda:0")
    assert res.ok, res.error
    step = res.steps[1]
    assert worst(step)["max_abs"] == pytest.approx(worst(res.steps[0])["max_abs"], abs=1e-3)
    assert step.details["captured_shapes"] == {"x": [2, 3, 32, 32]}
    # other shapes run eagerly instead of replaying a wrong graph
    m = res.model
    x = m.example_inputs(seed=1, batch=5)
    assert m.forward(x).shape == (5, 10)


# -- sample recipes --------------------------------------------------------------------------------

RECIPES_DIR = Path(__file__).resolve().parents[2] / "resources" / "recipes"


@pytest.mark.parametrize("model", ["mlp", "resnet", "transformer", "lstm"])
def test_sample_recipes_cover_the_core_passes(model):
    from accel.recipe import load_recipe

    torch_path = load_recipe(RECIPES_DIR / f"{model}.yaml")
    onnx_path = load_recipe(RECIPES_DIR / f"{model}_onnx.yaml")
    for r in (torch_path, onnx_path):
        assert r.model.source == f"zoo:{model}"
    torch_steps = [s.pass_name for s in torch_path.steps]
    assert torch_steps[-2:] == ["bf16", "compile"]
    assert [s.pass_name for s in onnx_path.steps][-3:] == [
        "export_onnx",
        "onnxruntime",
        "onnx_fp16",
    ]
    # low-precision steps carry loose, cosine/top-1 based gates; exact steps keep the strict default
    for r in (torch_path, onnx_path):
        for s in r.steps:
            g = r.gates_for(s)
            if s.pass_name in ("bf16", "compile", "onnx_fp16"):
                assert s.gates is not None and g.min_cosine >= 0.99 and g.min_top1 is not None
            else:
                assert s.gates is None and g.atol <= 1e-4


def test_low_precision_says_when_an_op_has_no_kernel_for_the_dtype(tmp_path):
    """torchvision's nms has no half-type CPU kernel (SSDlite crashed in bf16 and fp16): the
    pass runs one forward and says what to use instead."""
    (tmp_path / "nokernel.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn


            class Det(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(8, 4)

                def forward(self, x):
                    boxes = self.fc(x)
                    if boxes.dtype != torch.float32:  # as a float32-only kernel does
                        raise RuntimeError(f'"nms_kernel" not implemented for {boxes.dtype}')
                    return boxes


            def make():
                torch.manual_seed(0)
                return Det().eval()
            """
        )
    )
    model = load_model(f"{tmp_path / 'nokernel.py'}:make", "x:float32[batch,8]; batch=1..4:1")
    for name in ("bf16", "fp16"):
        with pytest.raises(PassError, match="has no .* kernel here.*use autocast"):
            apply_pass(name, copy.deepcopy(model), tmp_path=tmp_path)


def test_torchscript_trace_check_names_the_dimension_the_trace_fixed(tmp_path):
    """hf:llama_small and hf:gpt2_small: the trace's second-input check was refused as 'fixed
    a shape' (GPT-2's was written up as the sequence length). Tried one dimension at a time it
    is the batch: transformers' decoders trace the batch size as a constant (batch 2 fails with
    'index 1 is out of bounds'), while another sequence length gives the same outputs."""
    spec = "input_ids:int64[batch,seq]{0..256}; batch=1..8:1; seq=1..64:16"
    for factory in ("llama", "gpt2"):
        model = load_model(f"{Path(__file__).parent / 'tiny_decoder.py'}:{factory}", spec)
        p = get_pass("torchscript")()
        (tmp_path / factory).mkdir()
        ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path / factory)
        with pytest.raises(PassError) as err:
            p.apply(model.runtime.copy(model), p.parse_config({}), ctx)
        assert ctx.details["trace_fixed_dims"] == ["batch (made at 1; wrong at 2)"], factory
        assert "index 1 is out of bounds for dimension 0 with size 1" in str(err.value)
        assert "torch_export" in str(err.value)


LIST_IN = """
from typing import List

import torch


class ListIn(torch.nn.Module):
    # takes its images as List[Tensor], as torchvision's detectors do; eager Python also
    # iterates a batched tensor, TorchScript's argument check does not take one
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, images: List[torch.Tensor]):
        return torch.stack([self.fc(img) for img in images])


def build():
    torch.manual_seed(0)
    return ListIn().eval()
"""


def test_torchscript_check_says_when_the_saved_model_fails_on_its_own_example(tmp_path):
    """tv:ssdlite320_mobilenet_v3_large with method: script: the scripted detector takes
    List[Tensor] and fails on the batched tensor it was made for ('Unable to cast Python
    instance of type <class 'torch.Tensor'>'); the second-input check had blamed the batch."""
    (tmp_path / "listin.py").write_text(LIST_IN)
    model = load_model(f"{tmp_path / 'listin.py'}:build", "x:float32[batch,8]; batch=1..4:1")
    p = get_pass("torchscript")()
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path)
    with pytest.raises(PassError) as err:
        p.apply(model.runtime.copy(model), p.parse_config({"method": "script"}), ctx)
    assert "on the example inputs it was made from (method: script)" in str(err.value)
    assert "Unable to cast Python instance of type <class 'torch.Tensor'>" in str(err.value)
    assert "trace_fixed_dims" not in ctx.details
