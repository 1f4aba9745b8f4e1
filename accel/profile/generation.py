"""Where a decoder's generation time goes: per layer, split into prefill and decode.

A ``GenerationLayers`` holds, for one greedy generation of ``new_tokens`` after a prompt of
``prompt_tokens``: each module's self and inclusive time in one prefill and per decode step
(the mean over the steps), the headline TTFT and TPOT of the same generation run without
hooks, and the KV cache's bytes at each length (measured) with its closed-form size per
token. ``groups()`` sums the rows into embedding / attention / MLP / norm / lm_head / other;
what the rows do not explain (the decoder's own Python, argmax) is ``(unattributed)``.
Plain dataclasses that round-trip through JSON, as ``accel.profile.results``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from accel.jsonable import jsonable

GROUPS = ("embedding", "attention", "mlp", "norm", "lm_head", "other")
UNATTRIBUTED_GROUP = "(unattributed)"

# A module that is one of these blocks puts everything under it in the block's group
# (the projections of an attention, the activation of an MLP, a norm inside attention).
_BLOCK_NAMES = {
    "attention": ("attn", "attention", "self_attn", "self_attention", "cross_attn"),
    "mlp": ("mlp", "ffn", "feed_forward", "feedforward", "block_sparse_moe", "fc1", "fc2"),
    "lm_head": ("lm_head", "embed_out"),
}
_BLOCK_TYPES = {"attention": ("Attention",), "mlp": ("MLP", "FeedForward", "SparseMoe")}
_EMBEDDING_NAMES = ("wte", "wpe", "embed_tokens", "embed_positions", "word_embeddings")


def _block(name: str, type_name: str) -> str | None:
    for group, names in _BLOCK_NAMES.items():
        if name.lower() in names or any(t in type_name for t in _BLOCK_TYPES.get(group, ())):
            return group
    return None


def layer_group(path: str, types: Mapping[str, str]) -> str:
    """The group of module ``path`` (``types``: every module path -> its class name).

    The outermost attention, MLP or lm_head block on the path wins; else the module's own
    kind (an embedding, a norm); else ``other`` (residual adds, a decoder layer's or the
    model's own code, dropout)."""
    parts = path.split(".") if path else []
    for i in range(1, len(parts) + 1):
        group = _block(parts[i - 1], types.get(".".join(parts[:i]), ""))
        if group:
            return group
    if not parts:
        return "other"
    name, type_name = parts[-1], types.get(path, "")
    if "Embedding" in type_name or name in _EMBEDDING_NAMES:
        return "embedding"
    if "Norm" in type_name or name.startswith(("ln_", "norm")) or name.endswith("norm"):
        return "norm"
    return "other"


@dataclass
class LayerSplit:
    """One module's time in one prefill and per decode step (ms; self excludes children)."""

    name: str
    type: str
    group: str = "other"
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    prefill_inclusive_ms: float = 0.0
    decode_inclusive_ms: float = 0.0
    calls: int = 0  # calls per decode step

    def to_dict(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self), nonfinite="null")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LayerSplit:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class GroupSplit:
    """One group's prefill time and decode time per token (ms)."""

    group: str
    prefill_ms: float
    decode_ms: float


@dataclass
class GenerationLayers:
    """The per-layer generation profile (see the module docstring)."""

    prompt_tokens: int
    new_tokens: int
    batch: int = 1
    kv_cache: str = "dynamic"
    ttft_ms: float = 0.0  # plain (no hooks) prefill, median over the rounds
    tpot_ms: float | None = None  # plain decode per token, median (None: one new token)
    hooked_ttft_ms: float = 0.0  # the root module's prefill time under the hooks
    hooked_tpot_ms: float | None = None  # ... and its decode time per token
    rounds: int = 0
    rows: list[LayerSplit] = field(default_factory=list)
    kv_lengths: list[int] = field(default_factory=list)  # cached positions ...
    kv_bytes: list[int] = field(default_factory=list)  # ... and the cache's bytes there
    kv_bytes_per_token: int | None = None  # closed form from the config (all rows of the batch)
    notes: list[str] = field(default_factory=list)

    @property
    def prefill_sum_ms(self) -> float:
        return sum(r.prefill_ms for r in self.rows)

    @property
    def decode_sum_ms(self) -> float:
        return sum(r.decode_ms for r in self.rows)

    @property
    def prefill_coverage(self) -> float | None:
        """The rows' prefill self times over the measured TTFT (1.0: they explain it all)."""
        return self.prefill_sum_ms / self.ttft_ms if self.ttft_ms > 0 else None

    @property
    def decode_coverage(self) -> float | None:
        """The rows' decode self times per token over the measured TPOT."""
        return self.decode_sum_ms / self.tpot_ms if self.tpot_ms else None

    def groups(self) -> list[GroupSplit]:
        """Time per group in GROUPS order, then ``(unattributed)``: the headline (TTFT,
        TPOT) minus the rows, so the groups add up to the headline."""
        sums = {g: [0.0, 0.0] for g in GROUPS}
        for r in self.rows:
            acc = sums.setdefault(r.group, [0.0, 0.0])
            acc[0] += r.prefill_ms
            acc[1] += r.decode_ms
        out = [GroupSplit(g, p, d) for g, (p, d) in sums.items()]
        rest_p = self.ttft_ms - self.prefill_sum_ms
        rest_d = (self.tpot_ms - self.decode_sum_ms) if self.tpot_ms is not None else 0.0
        out.append(GroupSplit(UNATTRIBUTED_GROUP, rest_p, rest_d))
        return out

    def top(self, n: int = 10, phase: str = "decode") -> list[LayerSplit]:
        """The ``n`` rows with the most self time in ``phase`` (prefill or decode)."""
        key = f"{phase}_ms"
        return sorted(self.rows, key=lambda r: getattr(r, key), reverse=True)[:n]

    def decode_inclusive(self) -> dict[str, float]:
        """Module path -> inclusive decode time per token (what the graph overlay paints)."""
        return {r.name: r.decode_inclusive_ms for r in self.rows}

    def to_dict(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self), nonfinite="null")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GenerationLayers:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in names}
        values["rows"] = [LayerSplit.from_dict(r) for r in d.get("rows", [])]
        return cls(**values)


def plain_round(work: Any, clock_ns: Callable[[], int]) -> tuple[float, float | None]:
    """TTFT and TPOT (ms) of one generation of ``work`` (``accel.models.runtime``'s
    ``GenerationWork``) with nothing watching it: what per-layer rows are compared with."""
    t0 = clock_ns()
    token = work.prefill()
    t1 = clock_ns()
    steps = work.new_tokens - 1
    for _ in range(steps):
        token = work.step(token)
    t2 = clock_ns()
    return (t1 - t0) / 1e6, ((t2 - t1) / 1e6 / steps if steps else None)
