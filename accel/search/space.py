"""The search space, generated from the registered passes.

Every pass with a ``search`` spec (``accel.passes.base.SearchSpec``) takes part: a chain
visits the stages in order with at most one pass per stage, each pass must accept the kind
of model the previous one produced (``Requirements.model_kinds`` / ``output_kind``), run on
the device, have its libraries, and fit the model (``when``); passes that change weights
beyond rounding (pruning, QAT) only with the user's ``allow``. A pass registered later (a
plugin, a new runtime) joins the space by declaring a ``search`` spec, nothing else.

Chains are checked by ``check_chain`` (the pre-flight plan: kinds, device, libraries), so the
optimizer never proposes a chain the runner would reject before running it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from accel.errors import AccelError

# Layer types a SearchSpec.when may name, and the module class names that have them.
LAYER_TYPES: dict[str, tuple[str, ...]] = {
    "conv2d": ("Conv2d",),
    "batchnorm": ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"),
    "linear": ("Linear",),
    "lstm": ("LSTM", "GRU"),
    "attention": ("MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer"),
}
# Not a layer class but where the weights are: Linear layers hold more weights than the
# convolutions (transformers, MLPs, ConvNeXt's pointwise MLPs), not only a classifier head on a
# conv net. What weight-only quantization shrinks; on a ResNet or EfficientNet it would touch
# the head alone (and int4's group of 128 rarely divides a pruned head's width).
LINEAR_HEAVY = "linear_heavy"
# How a layer type reads in "the model has no ..." (default: "<name> layers").
LAYER_TYPE_TEXT = {LINEAR_HEAVY: "Linear layers that hold more weights than its convolutions"}


class SearchError(AccelError):
    """A search that cannot start or cannot meet its constraints; the message says why."""


@dataclass(frozen=True)
class SearchPass:
    """One pass as the search sees it."""

    name: str
    stage: int
    accepts: tuple[str, ...]
    produces: str | None  # None: the kind it received
    params: dict[str, Any]  # name -> Domain
    fixed: dict[str, Any]
    defaults: dict[str, Any]
    exportable: bool = True
    # param -> {searched value: the value the pass gets}: a Choice of labels standing for
    # values Optuna cannot hold (e.g. exclude sets "top3" -> a list of layer names).
    decode: dict[str, dict[Any, Any]] = field(default_factory=dict)
    # decoded params fall back to their first value (e.g. no exclude set) in a chain where one
    # of these passes comes earlier (the values do not hold there, e.g. module names lost)
    decode_lost_after: frozenset[str] = frozenset()
    # only in chains where one of these passes comes earlier (SearchSpec.after)
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchSpace:
    """Valid chains for one model kind and device, and each pass's tunable parameters."""

    model_kind: str
    device: str
    passes: dict[str, SearchPass]
    chains: tuple[tuple[str, ...], ...]
    layer_types: frozenset[str] = frozenset()
    excluded: dict[str, str] = field(default_factory=dict)  # pass -> why it is not in the space

    @staticmethod
    def chain_key(chain: Sequence[str]) -> str:
        return "+".join(chain) if chain else "original"

    def chain_from_key(self, key: str) -> tuple[str, ...]:
        return () if key == "original" else tuple(key.split("+"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_kind": self.model_kind,
            "device": self.device,
            "passes": {
                n: {
                    "stage": p.stage,
                    "params": {k: d.to_dict() for k, d in p.params.items()},
                    "fixed": p.fixed,
                }
                for n, p in self.passes.items()
            },
            "chains": [self.chain_key(c) for c in self.chains],
            "excluded": dict(self.excluded),
        }


def model_layer_types(module: Any) -> frozenset[str]:
    """Which of LAYER_TYPES a torch module contains (empty for non-torch models)."""
    if module is None:
        return frozenset()
    names = {type(m).__name__ for m in module.modules()}
    found = {k for k, classes in LAYER_TYPES.items() if names & set(classes)}
    if any("Attention" in n for n in names):  # custom attention blocks (BERT, ViT, ...)
        found.add("attention")
    if "linear" in found and _linear_weights_dominate(module):
        found.add(LINEAR_HEAVY)
    return frozenset(found)


def _linear_weights_dominate(module: Any) -> bool:
    """Whether the Linear layers' weights outnumber the convolutions' (LINEAR_HEAVY)."""
    linear = conv = 0
    for m in module.modules():
        weight = getattr(m, "weight", None)
        numel = int(weight.numel()) if hasattr(weight, "numel") else 0
        kind = type(m).__name__
        if kind == "Linear":
            linear += numel
        elif kind.startswith("Conv"):
            conv += numel
    return linear > conv


def _device_family(device: str) -> str:
    return "cuda" if str(device).startswith("cuda") else "cpu"


def _have(lib: str) -> bool:
    try:
        return importlib.util.find_spec(lib) is not None
    except (ImportError, ValueError):
        return False


def check_chain(
    chain: Sequence[str], model_kind: str, device: str, start_form: str | None = None
) -> str | None:
    """Pre-flight check of a chain of pass names: None when it can run, else why not.

    The plan's check (accel.plan.step_problem): each pass's accepted model forms against
    what the steps before it produce, the device and the libraries, without loading any
    model. ``start_form``: the model's form (default: eager for torch, else the kind)."""
    from accel.errors import PassError
    from accel.models.forms import default_form
    from accel.passes import get_pass
    from accel.plan import step_problem

    form = start_form or default_form(model_kind)
    for i, name in enumerate(chain):
        try:
            cls = get_pass(name)
        except PassError as exc:
            return f"step {i + 1}: {exc}"
        problem = step_problem(cls, form, device)
        if problem:
            return f"step {i + 1} ({name}): {problem}"
        form = cls.produced_form(form)
    return None


def build_space(
    model_kind: str,
    device: str = "cpu",
    *,
    layer_types: Iterable[str] | None = None,
    allow: Iterable[str] = (),
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    max_steps: int = 4,
) -> SearchSpace:
    """Every valid chain (up to ``max_steps`` steps) of the passes that declare a search spec.

    ``layer_types``: what the model has (``model_layer_types``); None: assume everything.
    ``include``: only these passes (by name); ``exclude``: never these."""
    from accel.passes import list_passes

    allow = {a.strip() for a in allow if a.strip()}
    include_set = None if include is None else set(include)
    exclude_set = set(exclude)
    fam = _device_family(device)
    layers = None if layer_types is None else frozenset(layer_types)
    passes: dict[str, SearchPass] = {}
    excluded: dict[str, str] = {}
    known = set()
    for cls in list_passes(include_test=True):
        known.add(cls.name)
        if cls.search is None:
            continue
        why = _why_not_searched(cls, include_set, exclude_set, fam, allow, layers)
        if why:
            excluded[cls.name] = why
        else:
            passes[cls.name] = _search_pass(cls, layers)
    unknown = sorted((set(include_set or ()) | exclude_set) - known)
    if unknown:
        raise SearchError(
            f"unknown pass(es) {', '.join(unknown)}; see `studio passes` for the names"
        )
    return SearchSpace(
        model_kind=model_kind,
        device=device,
        passes=passes,
        chains=_valid_chains(passes, model_kind, device, max_steps),
        layer_types=layers or frozenset(),
        excluded=excluded,
    )


def _why_not_searched(
    cls: Any,
    include_set: set[str] | None,
    exclude_set: set[str],
    fam: str,
    allow: set[str],
    layers: frozenset[str] | None,
) -> str | None:
    """Why a pass with a search spec stays out of this space (None: it is in)."""
    spec = cls.search
    if include_set is not None and cls.name not in include_set:
        return "not among the passes asked for"
    if cls.name in exclude_set:
        return "excluded"
    if fam not in spec.devices:
        return f"not worth trying on {fam}"
    if spec.opt_in and spec.opt_in not in allow:
        return f"changes the weights; allow it with --allow {spec.opt_in}"
    if cls.requires.cuda and fam != "cuda":
        return "needs CUDA"
    if layers is not None and spec.when and not (layers & set(spec.when)):
        wanted = [LAYER_TYPE_TEXT.get(w, f"{w} layers") for w in spec.when]
        return f"the model has no {' / '.join(wanted)}"
    missing = [lib for lib in cls.requires.libraries if not _have(lib)]
    if missing:
        return f"needs {', '.join(missing)} (not installed)"
    return None


def _search_pass(cls: Any, layers: frozenset[str] | None = None) -> SearchPass:
    """The search's view of a pass: stage, model kinds, parameter ranges and defaults, and
    its fixed values for a model with ``layers`` (SearchSpec.fixed_for)."""
    spec = cls.search
    defaults = {
        k: f.get_default(call_default_factory=True)
        for k, f in cls.Config.model_fields.items()
        if not f.is_required()
    }
    return SearchPass(
        name=cls.name,
        stage=spec.stage,
        accepts=tuple(cls.requires.model_kinds),
        produces=cls.output_kind,
        params=dict(spec.params),
        fixed=spec.fixed_for(layers),
        defaults=defaults,
        exportable=spec.exportable,
        after=tuple(spec.after),
    )


def _valid_chains(
    passes: dict[str, SearchPass], model_kind: str, device: str, max_steps: int
) -> tuple[tuple[str, ...], ...]:
    """Chains in stage order (each pass once), each accepting the model kind the chain
    before it produces and passing the plan's check; the empty chain first."""
    ordered = sorted(passes.values(), key=lambda p: (p.stage, p.name))
    chains: list[tuple[str, ...]] = [()]

    def extend(chain: tuple[str, ...], kind: str, last_stage: int, exportable: bool) -> None:
        if len(chain) >= max_steps:
            return
        for p in ordered:
            if p.stage <= last_stage or kind not in p.accepts:
                continue
            if not exportable and (p.produces or kind) != kind:
                continue
            if p.after and not set(p.after).intersection(chain):
                continue
            new = (*chain, p.name)
            if check_chain(new, model_kind, device) is None:
                chains.append(new)
                extend(new, p.produces or kind, p.stage, exportable and p.exportable)

    extend((), model_kind, -1, True)
    return tuple(chains)


def steps_for(space: SearchSpace, chain: Sequence[str], values: dict[str, Any]) -> list[dict]:
    """Recipe steps for a chain: each pass's fixed params plus its searched values
    (``values`` keyed ``pass.param``; missing ones take the pass default)."""
    steps = []
    for i, name in enumerate(chain):
        p = space.passes[name]
        params = dict(p.fixed)
        lost = bool(p.decode_lost_after.intersection(chain[:i]))
        for k in p.params:
            key = f"{name}.{k}"
            if key in values:
                table = p.decode.get(k, {})
                value = next(iter(table)) if lost and table else values[key]
                params[k] = table.get(value, value)
        steps.append({"pass": name, "params": params})
    return steps


def prefix_key(model_hash: str, context: dict[str, Any], steps: Sequence[dict]) -> str:
    """Cache key of the model built by ``steps`` from the model with ``model_hash``."""
    blob = json.dumps(
        {"model": model_hash, "context": context, "steps": list(steps)},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]
