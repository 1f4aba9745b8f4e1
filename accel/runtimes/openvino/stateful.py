"""Stateful OpenVINO language models: an IR whose KV cache lives in the infer request's state
(ReadValue/Assign variables) and whose inputs are ``input_ids``, ``attention_mask``,
optionally ``position_ids``, and ``beam_idx`` (the layout optimum-intel and OpenVINO GenAI
use; ``accel.passes.openvino_stateful`` makes one).

``lm_feed`` builds one call's inputs for tokens at positions ``past .. past + n``; a forward
call (``full_forward``) resets the state and feeds the whole sequence, so parity and the
forward workload see the plain model; ``StatefulDecoder`` generates: its prefill resets the
state and feeds the prompt, each step feeds one token, and the cache never leaves the request.
"""

from __future__ import annotations

from typing import Any

LM_INPUTS = frozenset({"input_ids", "attention_mask", "beam_idx"})
# The model form of a stateful LM (accel.models.forms; OpenVinoRuntime.form_info): passes that
# need whole-sequence inputs without state (quantize_openvino) refuse it before anything runs.
STATEFUL_FORM = "openvino_stateful"
# Bytes per cached value for the CPU plugin's KV_CACHE_PRECISION (u8/u4 also keep a scale
# and a zero point per token and head, which these figures leave out).
KV_BYTES = {"u8": 1.0, "u4": 0.5, "u3": 0.375, "f16": 2.0, "bf16": 2.0, "f32": 4.0}
# What generation needs of the LM's config, kept in the IR's rt_info by the studio's export
# (``tag_lm_facts``), so a stored stateful IR generates without its torch model.
RT_KEY = "accel_lm"
LM_FACTS = ("vocab_size", "max_position_embeddings")


def input_names(ports: Any) -> set[str]:
    return {n for p in ports for n in p.get_names()}


def has_lm_inputs(ports: Any) -> bool:
    """Whether a model's inputs are a stateful LM's (``beam_idx`` is the mark)."""
    return LM_INPUTS <= input_names(ports)


def is_stateful_lm(ov_model: Any) -> bool:
    """An IR (``ov.Model``) with state variables and the stateful-LM inputs."""
    return has_lm_inputs(ov_model.inputs) and len(ov_model.get_sinks()) > 0


def tag_lm_facts(ov_model: Any, config: Any) -> None:
    """Write the config's vocabulary size and context length into the IR's rt_info."""
    for name in LM_FACTS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            ov_model.set_rt_info(str(value), [RT_KEY, name])


def lm_facts(ov_model: Any) -> dict[str, int]:
    """The generation facts of a stateful LM IR: those ``tag_lm_facts`` wrote (positive
    integers only: the file is data), else the vocabulary from the logits' static last
    dimension (an IR exported elsewhere, e.g. by optimum-intel); {} when neither says."""
    facts: dict[str, int] = {}
    for name in LM_FACTS:
        if ov_model.has_rt_info([RT_KEY, name]):
            text = str(ov_model.get_rt_info([RT_KEY, name]).astype(str)).strip()
            if text.isdigit() and 0 < int(text) < 2**31:
                facts[name] = int(text)
    if "vocab_size" not in facts:
        for out in ov_model.outputs:
            shape = out.get_partial_shape()
            if "logits" in out.get_names() and shape.rank.is_static and shape[-1].is_static:
                facts["vocab_size"] = int(shape[-1].get_length())
    return facts


def lm_feed(names: set[str], ids: Any, past: int) -> dict[str, Any]:
    """Inputs of one call: ``ids`` [batch, n] (int64) at positions past .. past + n."""
    import numpy as np

    batch, n = ids.shape
    feed = {
        "input_ids": np.ascontiguousarray(ids, dtype=np.int64),
        "attention_mask": np.ones((batch, past + n), dtype=np.int64),
        "beam_idx": np.arange(batch, dtype=np.int32),
    }
    if "position_ids" in names:
        feed["position_ids"] = np.tile(np.arange(past, past + n, dtype=np.int64), (batch, 1))
    return feed


def _ids(x: Any) -> Any:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


def lm_sequence_feed(compiled: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """One call's inputs for the whole sequence of ``inputs``' token ids from an empty cache
    (the mask, positions and ``beam_idx`` made to match; whatever else ``inputs`` holds for
    them is not used)."""
    ids = inputs.get("input_ids", next(iter(inputs.values())))
    return lm_feed(input_names(compiled.inputs), _ids(ids), 0)


def full_forward(compiled: Any, request: Any, inputs: dict[str, Any]) -> tuple:
    """The LM on the whole sequence from an empty cache: (logits,) as torch tensors."""
    import numpy as np
    import torch

    request.reset_state()
    request.infer(lm_sequence_feed(compiled, inputs))
    return (torch.from_numpy(np.array(request.get_tensor("logits").data)),)


def kv_bytes_per_token(ov_model: Any, precision: str) -> float:
    """Bytes the state holds per token and batch row: the variables' fixed dims (heads x
    head_dim) summed, times the bytes of the KV-cache precision."""
    total = 0
    for op in ov_model.get_ops():
        if op.get_type_name() == "ReadValue":
            dims = [d.get_length() for d in op.get_output_partial_shape(0) if d.is_static]
            size = 1
            for d in dims:
                size *= d
            total += size
    return total * KV_BYTES.get(precision, 4.0)


def kv_precision_of(compiled: Any) -> str:
    """The KV-cache precision the CPU plugin runs (``f32`` where it does not say)."""
    try:
        t = compiled.get_property("KV_CACHE_PRECISION")
    except Exception:  # noqa: BLE001 - a device without the property
        return "f32"
    name = t.get_type_name() if hasattr(t, "get_type_name") else str(t)
    return {"u8": "u8", "u4": "u4", "u3": "u3", "f16": "f16", "bf16": "bf16"}.get(name, "f32")


class StatefulDecoder:
    """Generation through the request's own KV cache (accel.generate's Decoder protocol)."""

    kv_cache = "stateful"

    def __init__(self, compiled: Any, request: Any, per_token_bytes: float, max_len: int) -> None:
        self.compiled, self.request, self.max_len = compiled, request, max_len
        self.names = input_names(compiled.inputs)
        self.per_token_bytes = per_token_bytes
        self._pos = 0
        self._batch = 0

    def _run(self, ids: Any) -> Any:
        import numpy as np
        import torch

        ids = _ids(ids)
        self.request.infer(lm_feed(self.names, ids, self._pos))
        self._pos += ids.shape[1]
        logits = self.request.get_tensor("logits").data
        return torch.from_numpy(np.array(logits[:, -1, :], dtype=np.float32))

    def prefill(self, ids: Any) -> Any:
        self.request.reset_state()
        self._pos, self._batch = 0, int(ids.shape[0])
        return self._run(ids)

    def step(self, ids: Any) -> Any:
        if self._pos + ids.shape[1] > self.max_len:
            from accel.errors import AccelError

            raise AccelError(f"generation longer than the {self.max_len} tokens planned")
        return self._run(ids)

    def kv_cache_bytes(self) -> int:
        """The state's size after the tokens fed so far (from its shapes and precision)."""
        return int(self.per_token_bytes * self._pos * self._batch)
