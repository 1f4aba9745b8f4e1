"""The search's seeds: which chains run first, and in what order.

Three sources, most trusted first:

1. what earlier searches in the same database found for a model of the same family and
   size class on the same device (``Prior``: plain data the studio hands in from its store;
   accel never reads the store),
2. the known-good stacks per model family and device (``SEEDS``),
3. ordered by what this machine's CPU flags predict (``hardware_penalty``: int8 chains
   behind float ones where their runtime's int8 kernels will not beat float on this CPU,
   bf16 ones last where it has no bf16 kernels).

The original model always comes first (every speedup is measured against it), so the best
known recipe for the hardware is trial 1 or 2. Every pass a seed names must be registered:
``unknown_seed_passes`` lists the ones that are not (a test holds it at none), so a renamed
pass cannot silently drop a seed again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accel.hardware import CpuFeatures
from accel.search.space import SearchSpace

log = logging.getLogger(__name__)

# Known-good stacks per family and device, most promising first (on a CPU with int8 dot
# products and bf16 kernels; hardware_penalty reorders them elsewhere). Only those valid in
# the space (passes present, chain accepted by the pre-flight check) are used.
SEEDS: dict[tuple[str, str], list[tuple[str, ...]]] = {
    ("cnn", "cpu"): [
        ("fold_batchnorm", "openvino", "quantize_openvino"),
        ("fold_batchnorm", "export_onnx", "quantize_onnx_static", "onnxruntime"),
        ("fold_batchnorm", "openvino"),
        ("fold_batchnorm", "export_onnx", "onnxruntime"),
        ("fold_batchnorm", "channels_last"),
        ("fold_batchnorm", "channels_last", "bf16", "compile"),
    ],
    ("transformer", "cpu"): [
        ("openvino", "quantize_openvino"),
        ("export_onnx", "quantize_onnx_dynamic", "onnxruntime"),
        ("openvino",),
        ("quantize_dynamic_int8",),
        ("export_onnx", "onnxruntime"),
        ("bf16", "compile"),
    ],
    ("rnn", "cpu"): [
        ("quantize_dynamic_int8",),
        ("export_onnx", "quantize_onnx_dynamic", "onnxruntime"),
        ("openvino",),
        ("export_onnx", "onnxruntime"),
    ],
    ("mlp", "cpu"): [
        ("quantize_dynamic_int8",),
        ("openvino", "quantize_openvino"),
        ("export_onnx", "onnxruntime"),
        ("export_onnx", "quantize_onnx_dynamic", "onnxruntime"),
        ("bf16",),
    ],
    ("cnn", "cuda"): [
        ("fold_batchnorm", "channels_last", "fp16", "compile"),
        ("fold_batchnorm", "export_onnx", "onnx_fp16", "onnxruntime"),
        ("fold_batchnorm", "tensorrt"),
    ],
    ("transformer", "cuda"): [
        ("fp16", "compile"),
        ("bf16", "compile"),
        ("export_onnx", "onnx_fp16", "onnxruntime"),
        ("tensorrt",),
    ],
    ("rnn", "cuda"): [("fp16",), ("export_onnx", "onnxruntime")],
    ("mlp", "cuda"): [("fp16", "compile"), ("export_onnx", "onnx_fp16", "onnxruntime")],
}

# Passes whose kernels are int8 dot products (fast only with VNNI / AMX int8), and those
# whose kernels are bf16 (emulated, slower than f32, without AVX-512 BF16 / AMX).
INT8_PASSES = frozenset(
    {
        "quantize_openvino",
        "quantize_onnx_static",
        "quantize_onnx_dynamic",
        "quantize_dynamic_int8",
        "quantize_static_int8",
    }
)
BF16_PASSES = frozenset({"bf16"})
# Size classes by parameter count: a prior counts most for a model of the same class.
SIZE_CLASSES = ((10_000_000, "small"), (100_000_000, "medium"), (1_000_000_000, "large"))
MAX_PRIORS = 3  # earlier searches' recipes enqueued as seeds
# With --allow prune,distill: the pruned and distilled model under the best chains. The first
# comes right next to the chain it stacks on (the hardware's best-predicted one), the rest
# after every lossless seed: removing work is what the person opted in for, and on a
# ResNet-50 (1 thread, AVX2 EPYC) prune(0.3) + distill + fold + OpenVINO + NNCF int8 ran 1.68x
# the hand-written OpenVINO + NNCF int8 within a 0.01 cosine drop, found at trial 6 (225 s)
# when every stack waited for the lossless seeds. Where pruning fails parity (random-weight
# transformers) the lossless best is still trial 1.
STACK = ("prune_channels", "distill")
STACKED_SEEDS = 2
# Families where the first stack runs before the chain under it (trial 1): on CNNs it won
# every measured search (ResNet-50 and EfficientNet-B0 from the corpus, 1 thread, AVX2 EPYC:
# found at trial 2 after 154 s and 105 s, of which the lossless trial 1 took 41 s and 25 s),
# while on the random-weight transformers pruning misses parity, so there it goes second.
STACK_LEADS = frozenset({"cnn"})


def model_family(layer_types: Iterable[str]) -> str:
    """transformer / cnn / rnn / mlp from the model's layer types (space.model_layer_types)."""
    layers = set(layer_types)
    if "attention" in layers:
        return "transformer"
    if "conv2d" in layers:
        return "cnn"
    if "lstm" in layers:
        return "rnn"
    return "mlp"


def size_class(num_params: int | None) -> str:
    """small / medium / large / huge by parameter count; "" when unknown (not torch)."""
    if not num_params or num_params < 0:
        return ""
    return next((name for limit, name in SIZE_CLASSES if num_params < limit), "huge")


def device_family(device: str) -> str:
    return "cuda" if str(device).startswith("cuda") else "cpu"


def unknown_seed_passes(known: Iterable[str] | None = None) -> dict[str, list[str]]:
    """Seed passes the registry does not know: pass name -> the seeds naming it (empty when
    every seed is runnable). ``known``: the registered names (default: the registry)."""
    if known is None:
        from accel.passes import pass_names

        known = pass_names()
    names = set(known)
    out: dict[str, list[str]] = {}
    for (family, dev), chains in SEEDS.items():
        for chain in chains:
            for name in chain:
                if name not in names:
                    out.setdefault(name, []).append(f"{family}/{dev}: {'+'.join(chain)}")
    return out


def hardware_penalty(
    chain: Sequence[str], features: CpuFeatures, device: str, family: str = ""
) -> int:
    """0 when the CPU has fast kernels for every precision the chain uses; 1 for int8 that
    will not beat float here: a CPU without int8 dot products (VNNI / AMX) nor AVX2's u8 x s8
    multiply-adds, or one with AVX2 only where the int8 pass's runtime needs dot products for
    its MatMuls (``Runtime.int8_matmul_needs_dot_products``) and the model is not a CNN
    (convolutions gain from AVX2 int8 in every runtime); 2 for bf16 without bf16 kernels
    (emulated bf16 is slower than f32). GPUs: 0 (their seeds are ordered by hand)."""
    if device_family(device) != "cpu":
        return 0
    penalty = 0
    int8 = INT8_PASSES.intersection(chain)
    if int8 and not features.int8:
        if not features.avx2 or (family != "cnn" and any(_needs_dot_products(p) for p in int8)):
            penalty = 1
    if BF16_PASSES.intersection(chain) and not features.bf16:
        penalty = max(penalty, 2)
    return penalty


def _needs_dot_products(pass_name: str) -> bool:
    """Whether the runtime an int8 pass quantizes for needs int8 dot products to gain."""
    from accel.errors import PassError
    from accel.models.runtime import get_runtime, kinds
    from accel.passes import get_pass

    try:
        model_kinds = get_pass(pass_name).requires.model_kinds
    except PassError:  # not registered here (a plugin's seed): no knowledge, no demotion
        return False
    return any(
        getattr(get_runtime(k), "int8_matmul_needs_dot_products", False)
        for k in model_kinds
        if k in kinds()
    )


EMULATED_BF16 = (
    "this CPU has no bf16 kernels (AVX-512 BF16 or AMX): bf16 is emulated there and slower "
    "than fp32 (fold_batchnorm+bf16+compile ran 0.14x eager on a ResNet-50, AMD EPYC with "
    "AVX2); name it in --passes to try it anyway"
)


def hardware_exclusions(device: str, features: CpuFeatures | None = None) -> dict[str, str]:
    """Pass name -> why the search leaves it out on this machine: the bf16 passes on a CPU
    without bf16 kernels (their chains only ever lost there)."""
    if device_family(device) != "cpu":
        return {}
    if features is None:
        from accel.hardware import cpu_features

        features = cpu_features()
    return {} if features.bf16 else dict.fromkeys(sorted(BF16_PASSES), EMULATED_BF16)


FALLBACK_BF16 = (
    "this CPU has no bf16 kernels (AVX-512 BF16 or AMX): a bf16 precision falls back to f32 "
    "there, the same model as f32 timed again; name bf16 in --passes to try it anyway"
)


def narrow_to_hardware(
    space: SearchSpace, device: str, features: CpuFeatures | None = None
) -> dict[str, str]:
    """Drop the searched values this machine turns into another one: a ``precision`` of bf16
    on a CPU without bf16 kernels (OpenVINO's hint falls back to f32 there). Changes
    ``space`` in place; returns ``pass.param=value`` -> why, for the space's excluded list."""
    from accel.passes.base import Choice

    if device_family(device) != "cpu":
        return {}
    if features is None:
        from accel.hardware import cpu_features

        features = cpu_features()
    if features.bf16:
        return {}
    out: dict[str, str] = {}
    for name, p in space.passes.items():
        dom = p.params.get("precision")
        if isinstance(dom, Choice) and "bf16" in dom.values and len(dom.values) > 1:
            p.params["precision"] = Choice(tuple(v for v in dom.values if v != "bf16"))
            out[f"{name}.precision=bf16"] = FALLBACK_BF16
    return out


@dataclass(frozen=True)
class Prior:
    """The best recipe of one earlier search, as plain data: the model's family and size
    class, the device and CPU it ran on, its steps and its primary objective value."""

    family: str
    size_class: str
    device: str
    steps: tuple[Mapping[str, Any], ...]
    objective: str = "latency"
    score: float | None = None  # speedup (latency) / throughput; higher is better
    cpu: str = ""

    @property
    def chain(self) -> tuple[str, ...]:
        return tuple(str(s["pass"]) for s in self.steps)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Prior | None:
        """A Prior from stored JSON; None when it is not one (an older summary, a hand edit)."""
        try:
            steps = tuple(
                {"pass": str(s["pass"]), "params": dict(s.get("params") or {})} for s in d["steps"]
            )
            score = d.get("score")
            score = float(score) if score is not None else None
            if score is not None and not math.isfinite(score):
                score = None
            return cls(
                family=str(d["family"]),
                size_class=str(d.get("size_class") or ""),
                device=str(d["device"]),
                steps=steps,
                objective=str(d.get("objective") or "latency"),
                score=score,
                cpu=str(d.get("cpu") or ""),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


@dataclass(frozen=True)
class Seed:
    """One enqueued trial: its chain, searched values taken from an earlier search's recipe
    (``pass.param`` -> value, the rest at the pass defaults) and why it is a seed."""

    chain: tuple[str, ...]
    values: dict[str, Any] = field(default_factory=dict)
    why: str = "rule"


def _in_domain(dom: Any, value: Any) -> bool:
    from accel.passes.base import Choice

    if isinstance(dom, Choice):
        return value in dom.values
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return dom.low <= value <= dom.high


def prior_values(space: SearchSpace, prior: Prior) -> dict[str, Any]:
    """The prior's values of the space's searched parameters (those inside their domain)."""
    out: dict[str, Any] = {}
    for step in prior.steps:
        p = space.passes.get(step["pass"])
        if p is None:
            continue
        for param, dom in p.params.items():
            value = step["params"].get(param)
            if param in step["params"] and not p.decode.get(param) and _in_domain(dom, value):
                out[f"{p.name}.{param}"] = value
    return out


def relevant_priors(
    priors: Iterable[Prior | Mapping[str, Any]],
    *,
    family: str,
    size: str,
    device: str,
    objective: str,
    cpu: str = "",
) -> list[Prior]:
    """Earlier searches of the same family on the same device family (and the same CPU where
    both are known), the same size class and objective first, then by score."""
    out: list[Prior] = []
    for p in priors:
        prior = p if isinstance(p, Prior) else Prior.from_dict(p)
        if prior is None or not prior.steps or prior.family != family:
            continue
        if device_family(prior.device) != device_family(device):
            continue
        if cpu and prior.cpu and prior.cpu != cpu:
            continue
        out.append(prior)
    return sorted(
        out,
        key=lambda p: (
            p.size_class != size,
            p.objective != objective,
            -(p.score if p.score is not None else -math.inf),
        ),
    )


def plan_seeds(
    space: SearchSpace,
    family: str,
    *,
    features: CpuFeatures | None = None,
    priors: Iterable[Prior | Mapping[str, Any]] = (),
    size: str = "",
    objective: str = "latency",
) -> list[Seed]:
    """The original model, the best recipes of earlier searches for similar models (at most
    MAX_PRIORS), then the family's known-good stacks ordered by hardware_penalty; each chain
    once, only chains of the space."""
    if features is None:
        from accel.hardware import cpu_features

        features = cpu_features()
    valid = set(space.chains)
    seeds = [Seed((), {}, "original")]
    seen: set[tuple[str, ...]] = {()}
    relevant = relevant_priors(
        priors,
        family=family,
        size=size,
        device=space.device,
        objective=objective,
        cpu=features.name,
    )
    for prior in relevant:
        if len(seeds) > MAX_PRIORS:
            break
        if prior.chain in valid and prior.chain not in seen:
            seen.add(prior.chain)
            score = f" ({prior.score:.3g})" if prior.score is not None else ""
            why = f"earlier search: {family} {prior.size_class or '?'} {prior.objective}{score}"
            seeds.append(Seed(prior.chain, prior_values(space, prior), why))
    rules = SEEDS.get((family, device_family(space.device)), [])
    ranked = sorted(
        range(len(rules)),
        key=lambda i: (hardware_penalty(rules[i], features, space.device, family), i),
    )
    for i in ranked:
        chain = rules[i]
        if chain in valid and chain not in seen:
            seen.add(chain)
            pen = hardware_penalty(chain, features, space.device, family)
            seeds.append(Seed(chain, {}, "rule" if not pen else f"rule (demoted: {pen})"))
    stacked = _stacked(seeds, valid, seen)
    if not stacked or not stacked[0].chain[len(STACK) :]:
        return seeds + stacked
    # the first stack right after the chain under it (right before it on STACK_LEADS)
    at = next(i for i, s in enumerate(seeds) if s.chain == stacked[0].chain[len(STACK) :])
    at += 0 if family in STACK_LEADS else 1
    return [*seeds[:at], stacked[0], *seeds[at:], *stacked[1:]]


def _stacked(
    seeds: list[Seed], valid: set[tuple[str, ...]], seen: set[tuple[str, ...]]
) -> list[Seed]:
    """Prune + distill under the first STACKED_SEEDS seeds with steps (and alone)."""
    out: list[Seed] = []
    for seed in [s for s in seeds if s.chain][:STACKED_SEEDS] + [Seed(())]:
        chain = (*STACK, *seed.chain)
        if chain in valid and chain not in seen:
            seen.add(chain)
            out.append(Seed(chain, dict(seed.values), "prune + distill + " + seed.why))
    return out
