"""Per-layer generation profile of a stateful OpenVINO LM, from its performance counters.

A twin of the compiled model with PERF_COUNT generates beside the plain one (which gives the
TTFT and TPOT the rows are compared with, as for torch); after the prefill and after each
decode step the twin's request reports the real time of every executed (fused) op. Ops are
named after the torch module they came from (``__module.model.layers.0.mlp/...``), so their
times sum into module rows (self: the module's own ops; inclusive: with its children), which
group into attention / MLP / lm_head / ... as a torch profile's do. Ops no module claims
(state reads and writes, shape arithmetic) are the root row's self time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accel.errors import Cancelled
from accel.profile.generation import GenerationLayers, LayerSplit, layer_group, plain_round
from accel.profile.results import median, middle_half
from accel.runtimes.openvino.ir import module_path_of


@dataclass
class _Phase:
    """Op time per module path (self) in one prefill or per decode step, and its total."""

    self: dict[str, float] = field(default_factory=dict)
    op_types: dict[str, dict[str, float]] = field(default_factory=dict)  # path -> type -> ms
    top: float = 0.0

    def add_counters(self, infos: Any, weight: float = 1.0) -> None:
        for info in infos:
            if info.status != info.Status.EXECUTED:
                continue
            ms = info.real_time.total_seconds() * 1e3 * weight
            path = module_path_of(info.node_name)
            self.self[path] = self.self.get(path, 0.0) + ms
            types = self.op_types.setdefault(path, {})
            types[info.node_type] = types.get(info.node_type, 0.0) + ms
            self.top += ms


def _mean(phases: list[_Phase]) -> _Phase:
    """The mean of the middle half of ``phases`` (by their op total)."""
    keep = [phases[i] for i in middle_half([p.top for p in phases])]
    out = _Phase()
    scale = 1.0 / len(keep) if keep else 0.0
    for p in keep:
        for path, ms in p.self.items():
            out.self[path] = out.self.get(path, 0.0) + ms * scale
        for path, types in p.op_types.items():
            dst = out.op_types.setdefault(path, {})
            for t, ms in types.items():
                dst[t] = dst.get(t, 0.0) + ms * scale
        out.top += p.top * scale
    return out


def _counted_round(decoder: Any, prompt: Any, new_tokens: int) -> tuple[_Phase, _Phase]:
    """One greedy generation on the counting request: the prefill's op times and the decode
    steps' (their mean per step)."""
    token = decoder.prefill(prompt).argmax(dim=-1, keepdim=True)
    prefill = _Phase()
    prefill.add_counters(decoder.request.get_profiling_info())
    decode = _Phase()
    steps = new_tokens - 1
    for _ in range(steps):
        token = decoder.step(token).argmax(dim=-1, keepdim=True)
        decode.add_counters(decoder.request.get_profiling_info(), 1.0 / steps)
    return prefill, decode


def _inclusive(self_ms: dict[str, float]) -> dict[str, float]:
    """Each module path's time with all of its descendants' (every ancestor gets a row)."""
    out: dict[str, float] = {}
    for path, ms in self_ms.items():
        parts = path.split(".") if path else []
        for i in range(len(parts) + 1):
            key = ".".join(parts[:i])
            out[key] = out.get(key, 0.0) + ms
    return out


def _rows(prefill: _Phase, decode: _Phase) -> list[LayerSplit]:
    pre_inc, dec_inc = _inclusive(prefill.self), _inclusive(decode.self)
    # execution order of each module's first op, every module after its ancestors
    paths = list(dict.fromkeys([*pre_inc, *dec_inc]))
    types: dict[str, str] = {}
    for path in paths:  # a module's type: the op kind that takes most of its own time
        by_type = {**prefill.op_types.get(path, {})}
        for t, ms in decode.op_types.get(path, {}).items():
            by_type[t] = by_type.get(t, 0.0) + ms
        types[path] = max(by_type, key=by_type.__getitem__) if by_type else "Module"
    types[""] = "Model"
    return [
        LayerSplit(
            name=path,
            type=types[path],
            group=layer_group(path, {}),
            prefill_ms=prefill.self.get(path, 0.0),
            decode_ms=decode.self.get(path, 0.0),
            prefill_inclusive_ms=pre_inc.get(path, 0.0),
            decode_inclusive_ms=dec_inc.get(path, 0.0),
            calls=1 if path in decode.self else 0,
        )
        for path in paths
    ]


def profile_generation_ov(
    work: Any,
    counting_decoder: Any,
    *,
    rounds: int = 3,
    warmup: int = 1,
    clock_ns: Callable[[], int] = time.perf_counter_ns,
    progress: Callable[[float, str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> GenerationLayers:
    """Rows per module while ``work`` (a greedy generation through the plain compiled
    model's state) and ``counting_decoder`` (a StatefulDecoder on the PERF_COUNT twin)
    generate the same prompt alternately (``prompt_tokens`` and the KV fields are the
    caller's to fill)."""
    rounds, warmup = max(1, rounds), max(1, warmup)
    plain: list[tuple[float, float | None]] = []
    counted: list[tuple[_Phase, _Phase]] = []
    for i in range(warmup + rounds):
        if cancel is not None and cancel():
            raise Cancelled("profiling cancelled")
        p = plain_round(work, clock_ns)
        c = _counted_round(counting_decoder, work.prompt, work.new_tokens)
        if i >= warmup:
            plain.append(p)
            counted.append(c)
        if progress is not None:
            progress((i + 1) / (warmup + rounds), "per-layer generation profile")
    prefill, decode = _mean([c[0] for c in counted]), _mean([c[1] for c in counted])
    tpots = [t for _, t in plain if t is not None]
    return GenerationLayers(
        prompt_tokens=0,
        new_tokens=work.new_tokens,
        ttft_ms=median([t for t, _ in plain]),
        tpot_ms=median(tpots) if tpots else None,
        hooked_ttft_ms=prefill.top,
        hooked_tpot_ms=decode.top if tpots else None,
        rounds=rounds,
        rows=_rows(prefill, decode),
        notes=[
            "OpenVINO performance counters of a PERF_COUNT twin of the compiled model; rows "
            "are the torch modules the compiled (fused) ops came from, ops no module claims "
            "(state reads and writes, shape arithmetic) are the root row's"
        ],
    )
