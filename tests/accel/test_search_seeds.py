"""The search's seeds: registered passes only, ordered by the CPU's flags and by what
earlier searches found for similar models."""

from __future__ import annotations

import importlib.util

import pytest

from accel.hardware import CpuFeatures
from accel.passes import pass_names
from accel.search import InProcessExecutor, SearchConfig, build_space, run_search
from accel.search.seeds import (
    INT8_PASSES,
    SEEDS,
    Prior,
    hardware_penalty,
    narrow_to_hardware,
    plan_seeds,
    relevant_priors,
    size_class,
    unknown_seed_passes,
)

AMX = CpuFeatures(
    name="Xeon 8480+",
    avx512f=True,
    avx512_vnni=True,
    avx512_bf16=True,
    amx_bf16=True,
    amx_int8=True,
)
OLD = CpuFeatures(name="Xeon E5-2680 v4", avx2=True)  # AVX2 only: no int8 dot products, no bf16
NO_AVX2 = CpuFeatures(name="Atom C2750")  # SSE4.2: no int8 kernels worth using, no bf16
OV_INT8 = ("fold_batchnorm", "openvino", "quantize_openvino")
needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
    reason="needs openvino and nncf",
)


def _cnn_space():
    return build_space("torch", "cpu", layer_types={"conv2d", "batchnorm", "linear"})


def test_every_seed_names_a_registered_pass():
    assert unknown_seed_passes() == {}
    # and the check sees a seed whose pass is gone (the old `openvino_int8` case)
    known = set(pass_names()) - {"quantize_openvino"}
    missing = unknown_seed_passes(known)
    assert set(missing) == {"quantize_openvino"}
    assert "cnn/cpu: fold_batchnorm+openvino+quantize_openvino" in missing["quantize_openvino"]


def test_every_family_has_cpu_and_cuda_seeds():
    for family in ("cnn", "transformer", "rnn", "mlp"):
        assert SEEDS[(family, "cpu")] and SEEDS[(family, "cuda")]


@needs_openvino
def test_best_known_cpu_recipe_is_among_the_first_three_trials_on_an_amx_cpu():
    seeds = plan_seeds(_cnn_space(), "cnn", features=AMX)
    assert seeds[0].chain == () and seeds[0].why == "original"
    assert OV_INT8 in [s.chain for s in seeds[:3]]
    tr = plan_seeds(
        build_space("torch", "cpu", layer_types={"attention", "linear"}),
        "transformer",
        features=AMX,
    )
    assert ("openvino", "quantize_openvino") in [s.chain for s in tr[:3]]


def _int8_and_float_positions(chains):
    int8 = [i for i, c in enumerate(chains) if set(c) & INT8_PASSES]
    floats = [i for i, c in enumerate(chains) if c and not set(c) & (INT8_PASSES | {"bf16"})]
    return int8, floats


def test_cpu_without_int8_or_bf16_kernels_tries_float_chains_first():
    assert hardware_penalty(OV_INT8, AMX, "cpu") == 0
    assert hardware_penalty(OV_INT8, NO_AVX2, "cpu", "cnn") == 1
    assert hardware_penalty(("bf16", "compile"), OLD, "cpu") == 2
    assert hardware_penalty(("bf16", "compile"), OLD, "cuda") == 0
    chains = [s.chain for s in plan_seeds(_cnn_space(), "cnn", features=NO_AVX2)]
    int8, floats = _int8_and_float_positions(chains)
    assert int8 and floats and max(floats) < min(int8)
    bf16 = [i for i, c in enumerate(chains) if "bf16" in c]
    assert bf16 == [len(chains) - 1]  # emulated bf16 last
    # every seed is a chain of the space, each once
    assert len(set(chains)) == len(chains)
    assert all(c in _cnn_space().chains for c in chains)


@needs_openvino
def test_avx2_cpu_keeps_int8_first_where_its_runtime_gains_without_dot_products():
    """AVX2 without VNNI (measured on an AMD EPYC, 1 thread): a ResNet-50's int8 doubled
    f32 in OpenVINO and ONNX Runtime; a decoder's prefill gained 2.1-2.5x with ONNX Runtime's
    int8 but nothing with OpenVINO's (its MatMuls need dot products)."""
    assert hardware_penalty(OV_INT8, OLD, "cpu", "cnn") == 0
    ov = ("openvino", "quantize_openvino")
    ort = ("export_onnx", "quantize_onnx_dynamic", "onnxruntime")
    assert hardware_penalty(ov, OLD, "cpu", "transformer") == 1
    assert hardware_penalty(ort, OLD, "cpu", "transformer") == 0
    assert hardware_penalty(("quantize_dynamic_int8",), OLD, "cpu", "transformer") == 0
    assert hardware_penalty(ov, AMX, "cpu", "transformer") == 0
    cnn = [s.chain for s in plan_seeds(_cnn_space(), "cnn", features=OLD)]
    assert cnn[1] == OV_INT8  # the CNN order of an AMX CPU: int8 is not demoted
    space = build_space("torch", "cpu", layer_types={"attention", "linear"})
    tr = [s.chain for s in plan_seeds(space, "transformer", features=OLD)]
    assert tr.index(ort) < tr.index(ov)
    assert ort in tr[:3]


def test_bf16_is_left_out_on_a_cpu_without_bf16_kernels_unless_named(monkeypatch):
    from accel import hardware
    from accel.search.engine import _search_space
    from accel.search.seeds import hardware_exclusions

    assert "emulated" in hardware_exclusions("cpu", OLD)["bf16"]
    assert hardware_exclusions("cpu", AMX) == {} and hardware_exclusions("cuda:0", OLD) == {}
    monkeypatch.setattr(hardware, "cpu_features", lambda: OLD)
    layers = frozenset({"conv2d", "batchnorm", "linear"})
    _, _, space = _search_space(SearchConfig(model="zoo:resnet"), ("torch", layers))
    assert "bf16" not in space.passes and "emulated" in space.excluded["bf16"]
    assert not [c for c in space.chains if "bf16" in c]
    named = SearchConfig(model="zoo:resnet", passes=("bf16", "compile"))
    _, _, space = _search_space(named, ("torch", layers))
    assert "bf16" in space.passes
    monkeypatch.setattr(hardware, "cpu_features", lambda: AMX)
    _, _, space = _search_space(SearchConfig(model="zoo:resnet"), ("torch", layers))
    assert "bf16" in space.passes


def test_size_classes():
    assert size_class(None) == "" and size_class(0) == ""
    assert size_class(5_000_000) == "small"
    assert size_class(25_000_000) == "medium"  # ResNet-50
    assert size_class(110_000_000) == "large"  # BERT-base
    assert size_class(7_000_000_000) == "huge"


def _prior(chain_steps, **kw):
    d = {
        "family": "cnn",
        "size_class": "medium",
        "device": "cpu",
        "cpu": AMX.name,
        "objective": "latency",
        "score": 10.0,
        "steps": chain_steps,
    }
    d.update(kw)
    return d


def test_an_earlier_search_for_a_similar_model_goes_first():
    space = _cnn_space()
    steps = [
        {"pass": "fold_batchnorm", "params": {}},
        {"pass": "export_onnx", "params": {}},
        {"pass": "onnxruntime", "params": {}},
    ]
    ort = ("fold_batchnorm", "export_onnx", "onnxruntime")
    priors = [
        _prior(steps[:1], score=30.0, size_class="small"),  # another size class: after
        _prior(steps, score=12.0),
        _prior(steps[:1], family="transformer", score=99.0),  # another family: ignored
        _prior(steps[:1], cpu="AMD EPYC", score=99.0),  # another CPU: ignored
        _prior(steps[:1], device="cuda:0", score=99.0),  # another device: ignored
        {"family": "cnn", "steps": "garbage"},  # not a prior: ignored
    ]
    seeds = plan_seeds(space, "cnn", features=AMX, priors=priors, size="medium")
    assert seeds[1].chain == ort and seeds[1].why.startswith("earlier search")
    assert seeds[2].chain == ("fold_batchnorm",)
    # rules follow, without repeating a prior's chain
    chains = [s.chain for s in seeds]
    assert len(set(chains)) == len(chains)
    relevant = relevant_priors(
        priors, family="cnn", size="medium", device="cpu", objective="latency", cpu=AMX.name
    )
    assert [p.score for p in relevant] == [12.0, 30.0]


def test_a_prior_brings_its_searched_values_within_their_domains():
    space = build_space(
        "torch", "cpu", layer_types={"linear"}, include=["export_onnx", "onnxruntime", "openvino"]
    )
    if "openvino" not in space.passes:
        pytest.skip("needs openvino")
    good = _prior(
        [{"pass": "openvino", "params": {"precision": "bf16", "device": "CPU"}}], family="mlp"
    )
    bad = _prior([{"pass": "openvino", "params": {"precision": "int3"}}], family="mlp")
    (seed,) = [
        s for s in plan_seeds(space, "mlp", features=AMX, priors=[good]) if s.chain == ("openvino",)
    ]
    assert seed.values == {"openvino.precision": "bf16"}  # device is not searched: not taken
    (seed,) = [
        s for s in plan_seeds(space, "mlp", features=AMX, priors=[bad]) if s.chain == ("openvino",)
    ]
    assert seed.values == {}
    assert (
        Prior.from_dict({"family": "mlp", "device": "cpu", "steps": [{"pass": 3}], "score": "nan"})
        is not None
    )
    assert Prior.from_dict({"family": "mlp", "device": "cpu", "steps": None}) is None


def test_search_runs_the_prior_first(tmp_path):
    cfg = SearchConfig(
        model="zoo:mlp",
        objective="size",
        max_trials=2,
        budget_s=None,
        passes=("quantize_dynamic_int8", "export_onnx", "onnxruntime"),
        out_dir=str(tmp_path),
        bench_iters=2,
        bench_rounds=1,
        bench_min_time_s=0.0,
        bench_warmup=1,
    )
    prior = _prior(
        [{"pass": "export_onnx", "params": {}}, {"pass": "onnxruntime", "params": {}}],
        family="mlp",
        size_class="small",
        cpu="",
    )
    info = ("torch", frozenset({"linear"}), {}, 1000)
    res = run_search(cfg, InProcessExecutor(), model_info=info, priors=[prior])
    assert [t.chain for t in res.trials] == [(), ("export_onnx", "onnxruntime")]
    assert res.space["family"] == "mlp" and res.space["size_class"] == "small"
    assert res.space["seed_origins"][1].startswith("earlier search")


@needs_openvino
def test_allowed_prune_and_distill_stack_first_on_the_best_chain_then_after_the_lossless():
    allow = ["prune", "distill"]
    space = build_space(
        "torch", "cpu", layer_types={"conv2d", "batchnorm", "linear"}, allow=allow, max_steps=6
    )
    seeds = plan_seeds(space, "cnn", features=AMX)
    chains = [s.chain for s in seeds]
    stacked = [i for i, c in enumerate(chains) if c[:2] == ("prune_channels", "distill")]
    # on a CNN, where the stack won every measured search: trial 1 prunes and distills under
    # the hardware's best chain, trial 2 is that chain alone
    assert chains[1] == ("prune_channels", "distill", *OV_INT8) and chains[2] == OV_INT8
    assert seeds[1].why.startswith("prune + distill")
    # the other stacks once every lossless seed has run
    assert len(stacked) > 1 and min(stacked[1:]) > max(
        i for i, c in enumerate(chains) if c and "distill" not in c
    )
    assert ("prune_channels", "distill") in chains
    assert len(chains) == len(set(chains))
    # on a transformer, where pruning random weights missed parity, the lossless chain first
    tf_space = build_space(
        "torch", "cpu", layer_types={"attention", "linear", "linear_heavy"}, allow=allow
    )
    tf = [s.chain for s in plan_seeds(tf_space, "transformer", features=AMX)]
    assert tf[2] == ("prune_channels", "distill", *tf[1]) and "distill" not in tf[1]


@needs_openvino
def test_without_prune_allowed_no_stack_is_seeded():
    space = build_space("torch", "cpu", layer_types={"conv2d", "batchnorm", "linear"})
    chains = [s.chain for s in plan_seeds(space, "cnn", features=AMX)]
    assert not any("distill" in c or "prune_channels" in c for c in chains)


@needs_openvino
def test_bf16_precision_is_not_searched_where_it_falls_back_to_f32():
    """On a CPU without bf16 kernels OpenVINO's bf16 hint runs f32: the same model as f32,
    timed again. The search leaves that value out and says why; a bf16 CPU keeps it."""
    space = _cnn_space()
    assert "bf16" in space.passes["openvino"].params["precision"].values
    assert narrow_to_hardware(space, "cpu", AMX) == {}
    assert "bf16" in space.passes["openvino"].params["precision"].values
    why = narrow_to_hardware(space, "cpu", OLD)
    assert (
        set(why) == {"openvino.precision=bf16"}
        and "falls back to f32" in why["openvino.precision=bf16"]
    )
    assert space.passes["openvino"].params["precision"].values == ("auto", "f32")
    assert narrow_to_hardware(_cnn_space(), "cuda", OLD) == {}
