"""Real-architecture corpus (accel.models.corpus): loading, errors, passes on real layouts."""

from __future__ import annotations

import tempfile

import pytest
import torch

from accel.errors import ModelLoadError, NotApplicable
from accel.models import load_model
from accel.models.corpus import CORPUS, torchvision_error

pytest.importorskip("transformers")

TV_SKIP = torchvision_error()


def _bn_count(module: torch.nn.Module) -> int:
    return sum(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules())


def test_unknown_corpus_name_lists_valid_ones():
    with pytest.raises(ModelLoadError) as e:
        load_model("hf:no_such_model")
    assert "hf:roberta_base" in str(e.value) and "hf:mobilenet_v2" in str(e.value)
    with pytest.raises(ModelLoadError) as e:
        load_model("tv:resnet5")
    assert "tv:resnet50" in str(e.value)


@pytest.mark.skipif(TV_SKIP is None, reason="torchvision works here")
def test_torchvision_missing_or_broken_says_what_to_install():
    with pytest.raises(ModelLoadError) as e:
        load_model("tv:resnet50")
    msg = str(e.value)
    assert "torchvision" in msg
    assert "accel-studio[corpus]" in msg or "build made for this torch" in msg


@pytest.mark.skipif(TV_SKIP is not None, reason=f"torchvision unusable: {TV_SKIP}")
def test_torchvision_resnet50_loads_at_small_size():
    lm = load_model("tv:resnet50", CORPUS["tv:resnet50"].small_spec)
    assert 25e6 < lm.num_params < 26e6
    assert lm.forward(lm.example_inputs()).shape == (1, 1000)


def test_hf_image_classifiers_have_imagenet_heads():
    """Parity over a classifier's logits means something only at its real head: 1000 ImageNet
    classes, as the released checkpoints have (the HF configs default to 2 labels)."""
    lm = load_model("hf:resnet50", CORPUS["hf:resnet50"].small_spec)
    assert lm.forward(lm.example_inputs()).logits.shape == (1, 1000)
    assert 25e6 < lm.num_params < 26e6  # ResNet-50's 25.6 M


def test_same_weights_every_time():
    a = load_model("hf:mobilenet_v2", CORPUS["hf:mobilenet_v2"].small_spec)
    b = load_model("hf:mobilenet_v2", CORPUS["hf:mobilenet_v2"].small_spec)
    assert a.content_hash == b.content_hash
    # Warm BatchNorm statistics (not the 0/1 defaults), so folding is a real test.
    bn = next(m for m in a.module.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))


def test_corpus_model_takes_no_arguments():
    with pytest.raises(ModelLoadError, match="takes no arguments"):
        load_model("hf:mobilenet_v2(width=2)")


def test_fold_batchnorm_follows_data_flow_in_untraceable_hf_cnn():
    """torch.fx cannot trace HF models; the export graph finds conv/BN pairs across submodules."""
    from accel.passes._torch_helpers import fold_batchnorm

    lm = load_model("hf:mobilenet_v2", CORPUS["hf:mobilenet_v2"].small_spec)
    with pytest.raises((TypeError, torch.fx.proxy.TraceError)):
        torch.fx.symbolic_trace(lm.module)
    inputs = lm.example_inputs(seed=3)
    before = lm.forward(inputs).logits
    n_bn = _bn_count(lm.module)
    assert n_bn == 52
    folded = fold_batchnorm(lm.module, list(inputs.values()))
    assert len(folded) == n_bn
    assert _bn_count(lm.module) == 0
    after = lm.forward(inputs).logits
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


def test_fold_batchnorm_without_example_inputs_falls_back_to_sequential_neighbours():
    from accel.passes._torch_helpers import fold_batchnorm

    lm = load_model("hf:mobilenet_v2", CORPUS["hf:mobilenet_v2"].small_spec)
    # HF keeps conv and norm as attributes of a block, not in nn.Sequential: nothing found.
    assert fold_batchnorm(lm.module) == []


def test_preflight_says_not_applicable_before_work():
    from accel.passes import get_pass

    lm = load_model("zoo:mlp")
    p = get_pass("fold_batchnorm")()
    with pytest.raises(NotApplicable, match="no BatchNorm"):
        p.preflight(lm, p.parse_config({}))
    p = get_pass("channels_last")()
    with pytest.raises(NotApplicable, match="2-D convolutions"):
        p.preflight(lm, p.parse_config({}))


def test_quantize_static_int8_keeps_batch_dynamic():
    """Calibrated at batch 1, benchmarked at batch 8: the exported graph must take both."""
    from accel.runner import run_recipe

    recipe = {
        "model": {"source": "zoo:resnet"},
        "steps": [{"pass": "quantize_static_int8", "params": {"calibration_batches": 2}}],
        "benchmark": {"dims": {"batch": 8}, "rounds": 1, "iters": 1, "warmup": 0, "min_time_s": 0},
    }
    with tempfile.TemporaryDirectory() as d:
        res = run_recipe(recipe, out_dir=d, save_models=False)
    assert res.status == "succeeded", res.error
    out = res.model.forward(res.model.input_spec.sample(dims={"batch": 3}))
    assert out.shape == (3, 10)


def _run(recipe):
    from accel.runner import run_recipe

    with tempfile.TemporaryDirectory() as d:
        return run_recipe(recipe, out_dir=d, save_models=False)


_FAST = {"rounds": 1, "iters": 1, "warmup": 0, "min_time_s": 0}


def test_on_step_error_stop_reports_preflight_before_any_work():
    events = []
    from accel.runner import run_recipe

    recipe = {
        "model": {"source": "zoo:mlp"},
        "steps": [{"pass": "quantize_dynamic_int8"}, {"pass": "fold_batchnorm"}],
        "benchmark": _FAST,
    }
    with tempfile.TemporaryDirectory() as d:
        res = run_recipe(recipe, events.append, out_dir=d, save_models=False)
    assert res.status == "failed"
    assert "step 2 cannot apply" in res.error and "no BatchNorm" in res.error
    assert "on_step_error: skip" in res.error
    assert not any(type(e).__name__ == "StepStarted" for e in events)  # nothing ran


def test_on_step_error_skip_goes_on_with_the_model_from_before():
    recipe = {
        "model": {"source": "zoo:mlp"},
        "on_step_error": "skip",
        "steps": [
            {"pass": "fold_batchnorm"},  # pre-flight: not applicable
            {"pass": "quantize_static_int8", "params": {"exclude": ["no_such_layer"]}},
            {"pass": "quantize_dynamic_int8"},
        ],
        "benchmark": _FAST,
    }
    res = _run(recipe)
    assert res.status == "succeeded", res.error
    assert [s.status for s in res.steps] == ["skipped", "skipped", "succeeded"]
    assert "no BatchNorm" in res.steps[0].error
    assert "no_such_layer" in res.steps[1].error
    assert res.steps[2].parity is not None


def test_qat_never_returns_worse_than_its_own_ptq():
    """A learning rate far too high ruins QAT; the pass keeps PTQ of the same scheme then."""
    import copy
    import pathlib

    from accel.passes import PassContext, get_pass
    from accel.passes._torch_quant_helpers import heldout_mse

    lm = load_model("zoo:mlp")
    p = get_pass("qat")()
    with tempfile.TemporaryDirectory() as d:
        ctx = PassContext(inputs=lm.example_inputs(), work_dir=pathlib.Path(d), original=lm)
        cfg = p.parse_config({"steps": 8, "lr": 5e-2, "batch_size": 4})
        new = p.apply(lm.replace(module=copy.deepcopy(lm.module)), cfg, ctx)
    assert ctx.details["kept"] == "ptq"
    assert ctx.metrics["qat_heldout_mse"] > ctx.metrics["ptq_heldout_mse"]
    assert any("kept the PTQ model" in w for w in ctx.details["warnings"])
    heldout = [lm.input_spec.sample(seed=30000 + i) for i in range(4)]
    mse = heldout_mse(new.module, lm.module, heldout)
    assert mse == pytest.approx(ctx.metrics["ptq_heldout_mse"], rel=1e-5)


# The CI subset of the corpus matrix: small inputs, the structural and quantization passes.
_CI_PASSES = ["fold_batchnorm", "channels_last", "quantize_static_int8", "torch_export"]


def _matrix(source: str, passes: list[str]) -> dict:
    from accel.corpus_check import check_model

    with tempfile.TemporaryDirectory() as d:
        cells = check_model(source, CORPUS[source].small_spec, passes, work_dir=d, time_it=False)
    return {c.pass_name: c for c in cells}


def test_corpus_ci_subset_hf_cnn():
    cells = _matrix("hf:mobilenet_v2", _CI_PASSES)
    assert not [c for c in cells.values() if c.outcome == "crash"], [
        (c.pass_name, c.traceback) for c in cells.values() if c.outcome == "crash"
    ]
    fold = cells["fold_batchnorm"]
    assert fold.outcome == "ok" and fold.details["folded"] == 52 and fold.parity_passed
    assert cells["channels_last"].outcome == "ok" and cells["channels_last"].parity_passed
    assert cells["quantize_static_int8"].outcome == "ok"
    assert cells["torch_export"].outcome == "ok" and cells["torch_export"].parity_passed


def test_corpus_ci_subset_llama():
    cells = _matrix("hf:llama_small", _CI_PASSES + ["quantize_dynamic_int8"])
    assert cells["fold_batchnorm"].outcome == "n/a"
    assert cells["channels_last"].outcome == "n/a"
    assert not [c for c in cells.values() if c.outcome == "crash"], [
        (c.pass_name, c.reason) for c in cells.values() if c.outcome == "crash"
    ]
    assert cells["quantize_dynamic_int8"].outcome == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("source", ["hf:resnet50", "hf:t5_small_encoder"])
def test_corpus_subset_slow(source):
    cells = _matrix(source, [*_CI_PASSES, "quantize_dynamic_int8", "export_onnx"])
    assert not [c for c in cells.values() if c.outcome == "crash"], [
        (c.pass_name, c.reason) for c in cells.values() if c.outcome == "crash"
    ]


def _prune(source: str, params: dict):
    from accel.passes import PassContext, get_pass

    model = load_model(source, CORPUS[source].small_spec)
    cls = get_pass("prune_channels")
    with tempfile.TemporaryDirectory() as d:
        ctx = PassContext(inputs=model.example_inputs(), original=model, work_dir=d)
        ref = model.forward(ctx.inputs)
        out = cls().apply(model, cls.parse_config(params), ctx)
    return out, ctx, ref


def test_prune_channels_llama_keeps_gqa_groups_and_rotary_head_size():
    out, ctx, ref = _prune("hf:llama_small", {"ratio": 0.3})
    assert ctx.details["attention_blocks"] == 4
    assert ctx.details["attention_pruning"] == "whole heads"  # rotary: head size stays 64
    for layer in out.module.model.layers:
        att, mlp = layer.self_attn, layer.mlp
        # 8 query heads in 2 kv groups: torch-pruning removes ceil(ceil(0.3 * 8) / 2) = 2 per group
        assert att.q_proj.out_features == att.o_proj.in_features == 4 * 64
        assert att.k_proj.out_features == att.v_proj.out_features == 2 * 64
        assert att.head_dim == 64 and att.num_key_value_groups == 2
        assert mlp.gate_proj.out_features == mlp.up_proj.out_features == mlp.down_proj.in_features
        assert mlp.gate_proj.out_features < 1376
    assert "model.embed_tokens" in ctx.details["ignored_layers"]
    assert "lm_head" in ctx.details["ignored_layers"]
    assert out.forward(ctx.inputs).logits.shape == ref.logits.shape
    other = out.example_inputs(seed=2, batch=2, seq=5)
    assert out.forward(other).logits.shape == (2, 5, 32000)
    assert ctx.metrics["params_ratio"] < 0.95


@pytest.mark.parametrize("prune_heads", [False, True])
def test_prune_channels_albert_prunes_the_shared_layer_once(prune_heads):
    out, ctx, ref = _prune("hf:albert_base", {"ratio": 0.3, "prune_heads": prune_heads})
    (group,) = out.module.encoder.albert_layer_groups
    (layer,) = group.albert_layers  # one layer, run 12 times
    att = layer.attention
    width = att.query.out_features
    assert width == att.key.out_features == att.value.out_features == att.dense.in_features
    assert width == att.num_attention_heads * att.attention_head_size == att.all_head_size
    if prune_heads:  # ceil(0.3 * 12) = 4 heads go, each keeps its 64 dims
        assert (att.num_attention_heads, att.attention_head_size) == (8, 64)
    else:  # every head shrinks: 64 -> 44
        assert (att.num_attention_heads, att.attention_head_size) == (12, 44)
    assert layer.ffn.out_features == layer.ffn_output.in_features < 3072
    # the residual stream (768) is an output of the model: it keeps its width
    assert ctx.details["pruned_channels"].keys() == {
        f"encoder.albert_layer_groups.0.albert_layers.0.{n}"
        for n in ("attention.query", "attention.key", "attention.value", "ffn")
    }
    got = out.forward(ctx.inputs)
    assert got.last_hidden_state.shape == ref.last_hidden_state.shape == (1, 16, 768)
    assert got.pooler_output.shape == ref.pooler_output.shape
    other = out.example_inputs(seed=2, batch=2, seq=5)
    assert out.forward(other).last_hidden_state.shape == (2, 5, 768)


def test_prune_channels_taylor_and_finetune_read_hugging_face_outputs():
    # Taylor gradients and distillation take the first field of a ModelOutput (a dict)
    out, ctx, ref = _prune(
        "hf:albert_base",
        {"ratio": 0.3, "importance": "taylor", "importance_batches": 1, "finetune_steps": 2},
    )
    assert ctx.metrics["finetune_loss"] > 0
    assert out.forward(ctx.inputs).last_hidden_state.shape == ref.last_hidden_state.shape


def test_matrix_converts_the_original_for_passes_that_take_another_kind():
    """quantize_openvino takes an OpenVINO model and quantize_onnx_dynamic an ONNX one: the
    matrix converts the original through the export that produces that kind (made once)."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from accel.corpus_check import check_model

    passes = ["quantize_openvino", "quantize_onnx_dynamic", "onnxruntime"]
    with tempfile.TemporaryDirectory() as d:
        cells = {
            c.pass_name: c for c in check_model("zoo:mlp", None, passes, work_dir=d, time_it=False)
        }
    assert {n: c.outcome for n, c in cells.items()} == dict.fromkeys(passes, "ok"), {
        n: c.reason for n, c in cells.items()
    }
    assert cells["onnxruntime"].parity_passed


_T5_TINY = """
import torch
from transformers import T5Config, T5ForConditionalGeneration


def make():
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=100, d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=1,
                   num_decoder_layers=1, decoder_start_token_id=0, use_cache=False)
    return T5ForConditionalGeneration(cfg).eval()
"""


def test_prune_channels_t5_shrinks_the_head_size_its_attention_reshapes_with(tmp_path):
    """T5's attention (q/k/v/o, n_heads, key_value_proj_dim) is recognised: the head size
    shrinks and the attributes its forward reshapes with follow (the full T5 no longer ran)."""
    from accel.passes import PassContext, get_pass

    (tmp_path / "t5tiny.py").write_text(_T5_TINY)
    spec = (
        "input_ids:int64[batch,seq]{0..100}; attention_mask:int64[batch,seq]{1..2}; "
        "decoder_input_ids:int64[batch,dec]{0..100}; batch=1..4:1; seq=1..32:8; dec=1..32:4"
    )
    model = load_model(f"{tmp_path / 't5tiny.py'}:make", spec)
    ref = model.forward(model.example_inputs())
    cls = get_pass("prune_channels")
    ctx = PassContext(inputs=model.example_inputs(), original=model, work_dir=tmp_path)
    out = cls().apply(model, cls.parse_config({"ratio": 0.5}), ctx)
    assert ctx.details["attention_blocks"] == 3  # encoder self, decoder self and cross
    # The cross-attention shrinks (self-attention is coupled to the kept relative-position
    # bias); its reshape attributes follow.
    att = out.module.decoder.block[0].layer[1].EncDecAttention
    assert att.q.out_features == att.inner_dim == att.n_heads * att.key_value_proj_dim == 16
    assert att.n_heads == 4 and att.o.in_features == 16
    got = out.forward(out.example_inputs(seed=1, batch=2, seq=5, dec=3))
    assert got.logits.shape == (2, 3, 100) and ref.logits.shape[-1] == 100


# -- the widened corpus (issue 32) -----------------------------------------------------------


def test_corpus_prefixes_are_built_in_sources_not_code():
    """timm:convnext_tiny reads like pkg:function; the trust check must know it is built in."""
    from accel.models.corpus import CORPUS_PREFIXES
    from accel.trust import BUILT_IN_PREFIXES, is_code_ref

    assert set(CORPUS_PREFIXES) <= set(BUILT_IN_PREFIXES)
    for name in CORPUS:
        assert name.startswith(CORPUS_PREFIXES)
        assert not is_code_ref(name), name


def test_every_entry_names_an_input_its_padding_check_can_pad():
    from accel.models.inputs import InputSpec

    for entry in CORPUS.values():
        if entry.padding_mask:
            spec = InputSpec.parse(entry.small_spec)
            mask = next(t for t in spec.inputs if t.name == entry.padding_mask)
            assert len(mask.shape) == 2 and all(isinstance(d, str) for d in mask.shape)


def test_padded_inputs_pad_rows_like_a_tokenizer():
    from accel.corpus_check import padded_inputs
    from accel.models.inputs import InputSpec

    spec = InputSpec.parse(CORPUS["hf:bert_base_padded"].small_spec)
    x = padded_inputs(spec, "attention_mask", seed=1)
    mask, ids = x["attention_mask"], x["input_ids"]
    assert mask.shape == ids.shape == (3, 16 + 7)  # 3 rows, another length than the default 16
    assert mask.sum(1).tolist() == [23, 15, 5]  # full, two thirds, a quarter
    assert mask[1, :15].all() and not mask[1, 15:].any()  # padding at the end of each row
    assert (ids[mask == 0] == 0).all() and (ids[mask == 1] > 0).all()


def test_padded_check_fails_a_model_that_only_runs_at_the_example_length(tmp_path):
    """The matrix's padded-rows check is real: a model whose shapes were frozen at the example
    length (torch_export with seq static) cannot run the padded batch, and its cell says so."""
    from accel.corpus_check import _ModelCheck

    check = _ModelCheck(
        "hf:bert_base_padded",
        CORPUS["hf:bert_base_padded"].small_spec,
        tmp_path,
        None,
        "cpu",
        False,
    )
    cell = check.cell("torch_export", {"static_dims": ["seq"]})
    assert cell.outcome == "crash"
    assert "runs on the example's shape but not on padded rows" in cell.reason
    cell = check.cell("torch_export", {})
    assert cell.outcome == "ok" and cell.parity_passed, cell.parity
    assert cell.details["padded_dims"] == {"batch": 3, "seq": 23}


@pytest.mark.parametrize(
    "name",
    [
        "diffusers:vae_decoder",
        "diffusers:unet2d_condition",
        pytest.param("hf:wav2vec2_base", marks=pytest.mark.slow),
        pytest.param("hf:detr_resnet50", marks=pytest.mark.slow),
    ],
)
def test_new_families_load_from_configs_with_the_same_weights(name):
    pytest.importorskip("diffusers" if name.startswith("diffusers:") else "transformers")
    a = load_model(name, CORPUS[name].small_spec)
    b = load_model(name, CORPUS[name].small_spec)
    assert a.content_hash == b.content_hash
    out = a.forward(a.example_inputs())
    assert out is not None


def test_vae_decoder_makes_an_image_eight_times_the_latent():
    pytest.importorskip("diffusers")
    lm = load_model("diffusers:vae_decoder", CORPUS["diffusers:vae_decoder"].small_spec)
    out = lm.forward(lm.example_inputs(batch=2))
    assert out.shape == (2, 3, 64, 64)


TIMM_SKIP = None
try:
    from accel.models.corpus import package_error

    TIMM_SKIP = package_error("timm:")
except ImportError:  # pragma: no cover
    TIMM_SKIP = "no package_error"


@pytest.mark.skipif(TIMM_SKIP is None, reason="timm imports here")
def test_timm_missing_or_broken_says_why_and_what_to_install():
    with pytest.raises(ModelLoadError) as e:
        load_model("timm:convnext_tiny", CORPUS["timm:convnext_tiny"].small_spec)
    msg = str(e.value)
    assert msg.startswith("timm: models need timm")
    assert "accel-studio[corpus]" in msg or "torchvision build made for this torch" in msg


@pytest.mark.skipif(TIMM_SKIP is not None, reason=f"timm unusable: {TIMM_SKIP}")
def test_timm_efficientnet_loads_with_warm_batchnorm():
    lm = load_model("timm:efficientnet_b0", CORPUS["timm:efficientnet_b0"].small_spec)
    assert 5e6 < lm.num_params < 6e6
    bn = next(m for m in lm.module.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))


_BN_ACT = """
import torch
from torch import nn


class BatchNormAct2d(nn.BatchNorm2d):
    # As timm's: the norm, then drop and act, in one module (its own forward).

    def __init__(self, n):
        super().__init__(n)
        self.drop = nn.Identity()
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.drop(super().forward(x)))


class ScaledNorm(nn.BatchNorm2d):
    # A BatchNorm subclass whose forward adds work the fold cannot keep.

    def forward(self, x):
        return super().forward(x) * 2


def _warm(m):
    m.train()
    m(torch.randn(4, 3, 16, 16))
    return m.eval()


def norm_act():
    torch.manual_seed(0)
    return _warm(nn.Sequential(nn.Conv2d(3, 8, 3), BatchNormAct2d(8), nn.Conv2d(8, 4, 1),
                               BatchNormAct2d(4)))


def scaled():
    torch.manual_seed(0)
    return _warm(nn.Sequential(nn.Conv2d(3, 8, 3), ScaledNorm(8)))
"""


def _fold(tmp_path, factory):
    from accel.passes import PassContext, get_pass

    (tmp_path / "bnact.py").write_text(_BN_ACT)
    spec = "x:float32[batch,3,16,16]; batch=1..4:1"
    model = load_model(f"{tmp_path / 'bnact.py'}:{factory}", spec)
    ref = model.forward(model.example_inputs())
    cls = get_pass("fold_batchnorm")
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path, original=model)
    return model, ref, cls, ctx


def test_fold_batchnorm_folds_timm_norm_act_layers_and_keeps_their_activation(tmp_path):
    """timm:efficientnet_b0 was refused: its BatchNormAct2d layers (norm, drop, act) were not
    plain BatchNorms, and fx traces through them; now the norm folds, drop and act stay."""
    model, ref, cls, ctx = _fold(tmp_path, "norm_act")
    new = cls().apply(model, cls.parse_config({}), ctx)
    assert ctx.details["folded"] == 2
    assert _bn_count(new.module) == 0
    assert isinstance(new.module[1], torch.nn.Sequential)
    assert isinstance(new.module[1][1], torch.nn.SiLU)
    torch.testing.assert_close(new.forward(ctx.inputs), ref, rtol=1e-4, atol=1e-5)


def test_fold_batchnorm_names_the_check_other_norm_subclasses_fail(tmp_path):
    from accel.errors import PassError

    model, ref, cls, ctx = _fold(tmp_path, "scaled")
    with pytest.raises(PassError) as e:
        cls().apply(model, cls.parse_config({}), ctx)
    assert "all of type ScaledNorm" in str(e.value) and "would drop" in str(e.value)
    torch.testing.assert_close(model.forward(model.example_inputs()), ref)  # untouched


_TIMM_ATTENTION = """
import torch
from torch import nn


class Attention(nn.Module):
    # As timm's vision_transformer.Attention: fused qkv, output reshaped with self.attn_dim.

    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.attn_dim = dim
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, self.attn_dim))


class Block(nn.Module):
    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(torch.relu(self.fc1(self.norm2(x))))


def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), Block(), Block(), nn.LayerNorm(64), nn.Linear(64, 10)).eval()
"""


def test_prune_channels_keeps_timm_attention_reshape_in_line(tmp_path):
    """timm:deit_small_patch16_224 was refused ('shape [1, 197, 384] is invalid'): timm's
    Attention reshapes its output with self.attn_dim, which pruning left at the old width."""
    from accel.passes import PassContext, get_pass

    (tmp_path / "vit.py").write_text(_TIMM_ATTENTION)
    model = load_model(f"{tmp_path / 'vit.py'}:build", "x:float32[batch,8,16]; batch=1..4:1")
    cls = get_pass("prune_channels")
    ctx = PassContext(inputs=model.example_inputs(), original=model, work_dir=tmp_path)
    out = cls().apply(model, cls.parse_config({"ratio": 0.25}), ctx)
    attn = out.module[1].attn
    assert ctx.details["attention_pruning"] == "head size"
    assert attn.attn_dim == attn.num_heads * attn.head_dim == attn.proj.in_features < 64
    assert attn.qkv.out_features == 3 * attn.attn_dim
    assert out.forward(out.example_inputs(seed=1, batch=3)).shape == (3, 8, 10)


_CHANNEL_ASSERT = """
import torch
from torch import nn


class Upsample2D(nn.Module):
    # As diffusers': keeps its channel count and asserts the input has it.

    def __init__(self, channels):
        super().__init__()
        self.channels = channels
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        assert x.shape[1] == self.channels
        return self.conv(nn.functional.interpolate(x, scale_factor=2.0))


def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(4, 32, 3, padding=1), Upsample2D(32), nn.Conv2d(32, 3, 1)).eval()
"""


def test_prune_channels_updates_the_channel_count_a_block_asserts(tmp_path):
    """diffusers:vae_decoder was refused ('the pruned model no longer runs (AssertionError)'):
    Upsample2D asserts the input width against its own ``channels``, which pruning left."""
    from accel.passes import PassContext, get_pass

    (tmp_path / "up.py").write_text(_CHANNEL_ASSERT)
    model = load_model(f"{tmp_path / 'up.py'}:build", "z:float32[batch,4,8,8]; batch=1..4:1")
    cls = get_pass("prune_channels")
    ctx = PassContext(inputs=model.example_inputs(), original=model, work_dir=tmp_path)
    out = cls().apply(model, cls.parse_config({"ratio": 0.5}), ctx)
    up = out.module[1]
    assert up.channels == up.conv.in_channels == out.module[0].out_channels < 32
    assert out.forward(out.example_inputs(seed=1, batch=2)).shape == (2, 3, 16, 16)


def test_vae_decoder_cells_that_were_refused(tmp_path):
    """diffusers:vae_decoder's refusals: onnx_fp16 ('two nodes with same node name': the
    converter's duplicate Casts reached ORT's probe) and prune_channels (Upsample2D's assert,
    and the image conv lost output channels)."""
    pytest.importorskip("diffusers")
    from accel.corpus_check import check_model

    name = "diffusers:vae_decoder"
    cells = check_model(
        name,
        CORPUS[name].small_spec,
        ["onnx_fp16", "prune_channels"],
        work_dir=tmp_path,
        time_it=False,
    )
    assert {c.pass_name: c.outcome for c in cells} == {"onnx_fp16": "ok", "prune_channels": "ok"}, [
        c.reason for c in cells
    ]
    assert "shape" not in cells[1].parity  # same output shape: 3 image channels kept


@pytest.mark.slow
def test_vae_decoder_static_onnx_int8_is_refused_where_it_is_made(tmp_path):
    """ONNX Runtime's static quantizer writes a QDQ pair for the mid-block attention's MatMul
    output as if it were a 32-element initializer; ORT's own load then fails its shape
    inference. The load check refuses it in the quantization step, with ORT's message."""
    pytest.importorskip("diffusers")
    from accel.corpus_check import check_model

    name = "diffusers:vae_decoder"
    (cell,) = check_model(
        name, CORPUS[name].small_spec, ["quantize_onnx_static"], work_dir=tmp_path, time_it=False
    )
    assert cell.outcome == "refused"
    assert "does not load in ONNX Runtime" in cell.reason and "ShapeInferenceError" in cell.reason


def test_matrix_checks_distill_after_the_pruning_it_recovers_from(tmp_path):
    """distill on the original has nothing to recover and refuses (every corpus model was
    'refused' so): the matrix checks it where it acts, on the original after prune_channels,
    with the original as teacher."""
    from accel.corpus_check import check_model
    from accel.errors import PassError
    from accel.passes import PassContext, get_pass

    cells = check_model("zoo:mlp", None, ["distill"], work_dir=tmp_path, time_it=False)
    assert cells[0].outcome == "ok", cells[0].reason
    assert cells[0].parity  # compared with the original's outputs
    # The refusal the matrix no longer meets, and its stated cause: the model is the original.
    original = load_model("zoo:mlp")
    p = get_pass("distill")()
    ctx = PassContext(
        inputs=original.input_spec.sample(seed=0), work_dir=tmp_path, original=original
    )
    with pytest.raises(PassError, match="nothing to recover: the model is still the original"):
        p.apply(original.runtime.copy(original), p.parse_config({}), ctx)


def test_prune_channels_keeps_diffusers_cross_attention_heads_in_line():
    """diffusers:unet2d_condition was refused ('shape [1, -1, 8, 5] is invalid for input of
    size 11264'): diffusers' Attention (to_q/to_k/to_v, ``heads``) was not taken for an
    attention block, so its query and its cross-attention key were pruned to other widths."""
    pytest.importorskip("diffusers")
    from diffusers.models.attention_processor import Attention

    from accel.passes._prune_helpers import attention_heads, prune_channels_tp

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Attention(query_dim=32, cross_attention_dim=24, heads=4, dim_head=8)
            self.head = torch.nn.Linear(32, 32)

        def forward(self, x, context):
            return self.head(self.attn(x, encoder_hidden_states=context))

    torch.manual_seed(0)
    model = Block().eval()
    inputs = {"x": torch.randn(1, 16, 32), "context": torch.randn(1, 7, 24)}
    _, blocks = attention_heads(model)
    assert [(b["block"], b["n_q"], b["head_dim"]) for b in blocks] == [(model.attn, 4, 8)]
    prune_channels_tp(model, inputs, ratio=0.5)
    attn = model.attn
    assert attn.to_q.out_features == attn.to_k.out_features < 32
    assert attn.to_q.out_features % attn.heads == 0
    assert model(**inputs).shape == (1, 16, 32)


@pytest.mark.slow
def test_unet_cells_that_were_refused(tmp_path):
    """diffusers:unet2d_condition's refusals: prune_channels (cross-attention query and key
    pruned to other widths) and compress_weights_openvino (group size 128 does not divide
    every layer's input size)."""
    pytest.importorskip("diffusers")
    pytest.importorskip("nncf")
    from accel.corpus_check import check_model

    name = "diffusers:unet2d_condition"
    passes = ["prune_channels", "compress_weights_openvino"]
    cells = check_model(name, CORPUS[name].small_spec, passes, work_dir=tmp_path, time_it=False)
    assert {c.pass_name: c.outcome for c in cells} == dict.fromkeys(passes, "ok"), [
        c.reason for c in cells
    ]
    assert "shape" not in cells[0].parity


@pytest.mark.slow
def test_unet_onnx_int8_dynamic_drops_stale_shapes_and_static_names_the_quantizer_check(tmp_path):
    """diffusers:unet2d_condition's ONNX int8 cells, with or without pre-processing: dynamic
    failed in ORT's shape inference of the quantized graph (dimension 64 vs 256, against the
    exporter's value_info); without those annotations it quantizes (cosine 0.99996). Static is
    refused by ORT's quantizer itself ('shared mode' for a weight); the refusal keeps ORT's
    check and does not offer preprocess: false where it was already off."""
    pytest.importorskip("diffusers")
    from accel.corpus_check import check_model

    name = "diffusers:unet2d_condition"
    off = {"preprocess": False}
    cells = check_model(
        name,
        CORPUS[name].small_spec,
        ["quantize_onnx_dynamic", "quantize_onnx_static"],
        work_dir=tmp_path,
        time_it=False,
        params={"quantize_onnx_dynamic": off, "quantize_onnx_static": off},
    )
    dynamic, static = cells
    assert dynamic.outcome == "ok", dynamic.reason
    assert "ShapeInferenceError" in dynamic.details["value_info_dropped"]
    assert static.outcome == "refused"
    assert "shared mode is not supported for weight" in static.reason
    assert "preprocess: false" not in static.reason


_GPT2_TINY = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def make():
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64, use_cache=False)
    return GPT2LMHeadModel(cfg).eval()
"""


def test_gpt2_conv1d_layers_prune_unstructured_and_prune_channels(tmp_path):
    """hf:gpt2_small: prune_unstructured was refused ('every one is ignored') and
    prune_channels found nothing it takes: transformers' Conv1D (a Linear with a transposed
    weight). prune_unstructured prunes it; prune_channels takes it as the Linear it computes
    and prunes the MLP width (the fused q|k|v layer keeps its outputs)."""
    from accel.passes import PassContext, get_pass
    from accel.passes._prune_helpers import prune_unstructured_magnitude, unhandled_weight_layers

    (tmp_path / "gpt2tiny.py").write_text(_GPT2_TINY)
    spec = "input_ids:int64[batch,seq]{0..100}; batch=1..2:1; seq=1..32:8"
    model = load_model(f"{tmp_path / 'gpt2tiny.py'}:make", spec)
    assert unhandled_weight_layers(model.module) == {"Conv1D": 4}
    module = model.runtime.copy(model).module
    sparsity, layers = prune_unstructured_magnitude(module, amount=0.5)
    assert "transformer.h.0.attn.c_attn" in layers and abs(sparsity - 0.5) < 0.01
    p = get_pass("prune_channels")()
    ctx = PassContext(inputs=model.example_inputs(), work_dir=tmp_path, original=model)
    pruned = p.apply(model.runtime.copy(model), p.parse_config({"ratio": 0.25}), ctx)
    assert ctx.details["conv1d_as_linear"] == 4
    assert ctx.details["pruned_channels"] == {"transformer.h.0.mlp.c_fc": [128, 96]}
    assert "transformer.h.0.attn.c_attn" in ctx.details["ignored_layers"]
    assert pruned.module.transformer.h[0].mlp.c_proj.in_features == 96
    assert unhandled_weight_layers(pruned.module) == {}
    inputs = model.input_spec.sample(seed=3, dims={"batch": 2, "seq": 13})
    with torch.no_grad():
        assert pruned.forward(inputs).logits.shape == (2, 13, 100)


def test_conv1d_as_linear_computes_the_same():
    """The Linear that replaces a transformers Conv1D gives its outputs (weight transposed)."""
    from transformers.pytorch_utils import Conv1D

    from accel.passes._prune_helpers import conv1d_as_linear

    torch.manual_seed(0)
    model = torch.nn.Sequential(Conv1D(12, 8), torch.nn.ReLU(), Conv1D(5, 12))
    x = torch.randn(3, 4, 8)
    with torch.no_grad():
        before = model(x)
        assert conv1d_as_linear(model) == ["0", "2"]
        assert isinstance(model[0], torch.nn.Linear) and model[0].weight.shape == (12, 8)
        assert torch.allclose(model(x), before, atol=1e-6)


def test_gpt2_fused_qkv_split_is_what_torch_pruning_mis_indexes():
    """The cause split_qkv_layers guards against, reproduced: without keeping GPT-2's fused
    c_attn, torch-pruning maps the attention output back through scaled_dot_product_attention
    onto all 3 x 32 outputs of the q|k|v split and indexes c_proj's 32 inputs with them."""
    import torch_pruning as tp
    from transformers import GPT2Config, GPT2LMHeadModel

    from accel.passes._prune_helpers import attention_heads, conv1d_as_linear, split_qkv_layers

    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64, use_cache=False
    )
    model = GPT2LMHeadModel(cfg).eval()
    conv1d_as_linear(model)
    assert split_qkv_layers(model) == [model.transformer.h[0].attn.c_attn]
    heads, _ = attention_heads(model)
    pruner = tp.pruner.MetaPruner(
        model,
        (torch.randint(0, 100, (1, 8)),),
        importance=tp.importance.MagnitudeImportance(p=2),
        pruning_ratio=0.25,
        ignored_layers=[model.lm_head, model.transformer.wte, model.transformer.wpe],
        num_heads=heads,
        prune_head_dims=True,
    )
    with pytest.raises(IndexError, match="index 32 is out of bounds for dimension 0 with size 32"):
        pruner.step()


@pytest.mark.slow
@pytest.mark.skipif(TV_SKIP is not None, reason=f"torchvision unusable: {TV_SKIP}")
def test_ssdlite_refusals_name_the_check_that_failed(tmp_path):
    """tv:ssdlite320_mobilenet_v3_large's refused cells, each with its cause: torchvision's
    nms has no half-type CPU kernel (bf16, fp16); its post-processing keeps as many boxes as
    pass a score threshold, a count read from the data (torch.export, PT2E's export, the dynamo
    ONNX exporter, and OpenVINO's torch.export route); it returns a list of dicts, which
    torch.jit.trace (and so OpenVINO's traced route) cannot output."""
    from accel.corpus_check import check_model

    name = "tv:ssdlite320_mobilenet_v3_large"
    want = {
        "bf16": ["\"nms_kernel\" not implemented for 'BFloat16'", "use autocast"],
        "fp16": ["\"nms_kernel\" not implemented for 'Half'", "use autocast"],
        "export_onnx": ["cannot capture data-dependent control flow"],
        "torch_export": ["data-dependent control flow", "GuardOnDataDependentSymNode"],
        "quantize_static_int8": ["while exporting the model with torch.export", "data-dependent"],
        "torchscript": ["Only tensors, lists, tuples of tensors, or dictionary of tensors"],
        "openvino": [
            "Couldn't get TorchScript module by tracing",
            "The torch.export route failed too: GuardOnDataDependentSymNode",
        ],
    }
    cells = check_model(name, CORPUS[name].small_spec, list(want), work_dir=tmp_path, time_it=False)
    for c in cells:
        assert c.outcome == "refused", (c.pass_name, c.outcome, c.reason)
        for text in want[c.pass_name]:
            assert text in c.reason, (c.pass_name, c.reason)
