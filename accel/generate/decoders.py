"""Running a loaded model one token at a time: ``prefill(prompt)`` then ``step(token)``.

``CacheDecoder`` drives a Hugging Face causal LM through its KV cache (a DynamicCache, or a
StaticCache of the whole generation's length when the module's generation config says
``cache_implementation: static``, which is what a compiled decode step wants: fixed shapes).
A runtime that keeps the cache itself gives its own decoder (``Runtime.lm_decoder``: a
stateful OpenVINO LM's prefill resets the request's state, each step feeds one token).
``RecomputeDecoder`` runs any other loaded model (an ONNX or OpenVINO export, a TorchScript
module) on the whole sequence for every token: no KV cache, so each step costs a prefill; it
is what such a model does, and its figures say so (``kv_cache`` is ``none``).
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

from accel.generate.settings import GenerateError, lm_config


class Decoder(Protocol):
    """One generation at a time: prefill returns the last position's logits [batch, vocab].

    A decoder may also have ``generate_timed(prompt, new_tokens, clock)`` -> (clock before,
    clock at each new token, tokens): a runtime that generates in one call (OpenVINO GenAI's
    LLMPipeline); ``time_generation`` then uses it, and prefill / step serve parity only."""

    kv_cache: str  # "dynamic", "static", "stateful" (held by the runtime) or "none"

    def prefill(self, ids: Any) -> Any: ...

    def step(self, ids: Any) -> Any: ...

    def kv_cache_bytes(self) -> int: ...


def _forward_params(module: Any) -> set[str]:
    inner = getattr(module, "_orig_mod", module)
    try:
        return set(inspect.signature(inner.forward).parameters)
    except (TypeError, ValueError):
        return set()


def cache_implementation(module: Any) -> str:
    """``static`` when the module's generation config asks for a static cache."""
    inner = getattr(module, "_orig_mod", module)
    gen = getattr(inner, "generation_config", None)
    return "static" if getattr(gen, "cache_implementation", None) == "static" else "dynamic"


def _logits(out: Any) -> Any:
    logits = getattr(out, "logits", None)
    if logits is None and isinstance(out, (tuple, list)) and out:
        logits = out[0]
    if logits is None or getattr(logits, "ndim", 0) != 3:
        raise GenerateError(
            "benchmark.workload: generate needs a model whose first output is logits "
            "[batch, sequence, vocab]; this one returns "
            f"{type(out).__name__}"
        )
    return logits


class CacheDecoder:
    """A Hugging Face causal LM run through its own KV cache."""

    def __init__(self, module: Any, max_len: int, device: str = "cpu") -> None:
        params = _forward_params(module)
        self._cache_arg = cache_argument(params)
        if self._cache_arg is None:
            raise GenerateError("the model's forward takes no KV cache argument")
        self.module = module
        self.config = lm_config(module)
        self.max_len = max_len
        self.device = device
        self.kv_cache = cache_implementation(module)
        self._keep = "logits_to_keep" in params
        self._positions = "cache_position" in params
        self._cache: Any = None
        self._pos = 0

    def _new_cache(self) -> Any:
        from transformers import DynamicCache, StaticCache

        if self.kv_cache == "static":
            if self._cache is not None:  # same tensors again: a compiled step keeps its graph
                self._cache.reset()
                return self._cache
            return StaticCache(config=self.config, max_cache_len=self.max_len)
        return DynamicCache(config=self.config)

    def _run(self, ids: Any) -> Any:
        import torch

        n = ids.shape[1]
        kwargs: dict[str, Any] = {"input_ids": ids, self._cache_arg: self._cache, "use_cache": True}
        if self._positions:
            kwargs["cache_position"] = torch.arange(self._pos, self._pos + n, device=ids.device)
        if self._keep:
            kwargs["logits_to_keep"] = 1
        with torch.no_grad():
            out = self.module(**kwargs)
        self._pos += n
        return _logits(out)[:, -1, :]

    def prefill(self, ids: Any) -> Any:
        self._cache = self._new_cache()
        self._pos = 0
        return self._run(ids.to(self.device))

    def step(self, ids: Any) -> Any:
        if self._pos + ids.shape[1] > self.max_len:
            raise GenerateError(f"generation longer than the {self.max_len} tokens planned")
        return self._run(ids.to(self.device))

    def kv_cache_bytes(self) -> int:
        return cache_bytes(self._cache)


def cache_argument(params: set[str]) -> str | None:
    """The forward's KV-cache argument: ``cache`` (transformers 5) or ``past_key_values``."""
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None


def cache_bytes(cache: Any) -> int:
    """Bytes held by a transformers cache's key and value tensors."""
    if cache is None:
        return 0
    total = 0
    for layer in getattr(cache, "layers", ()) or ():
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if t is not None and hasattr(t, "nbytes"):
                total += int(t.nbytes)
    return total


class RecomputeDecoder:
    """Any loaded model fed the whole sequence each step (no KV cache)."""

    kv_cache = "none"

    def __init__(self, model: Any) -> None:
        names = [t.name for t in model.input_spec.inputs]
        if not names or names[0] != "input_ids" or not set(names[1:]) <= {"attention_mask"}:
            raise GenerateError(
                "benchmark.workload: generate needs a model fed input_ids (and optionally "
                f"attention_mask); this one takes {', '.join(names) or 'no inputs'}"
            )
        self.model = model
        self.names = names
        self._ids: Any = None

    def _run(self) -> Any:
        import torch

        feed = {"input_ids": self._ids}
        if "attention_mask" in self.names:
            feed["attention_mask"] = torch.ones_like(self._ids)
        with torch.no_grad():
            out = self.model.forward(feed)
        return _logits(out)[:, -1, :].float()

    def prefill(self, ids: Any) -> Any:
        self._ids = ids
        return self._run()

    def step(self, ids: Any) -> Any:
        import torch

        self._ids = torch.cat([self._ids, ids.to(self._ids.device)], dim=1)
        return self._run()

    def kv_cache_bytes(self) -> int:
        return 0


def decoder_for(model: Any, max_len: int) -> Decoder:
    """The decoder of a loaded model: its KV cache when it has one (a torch LM's cache
    object, or the runtime's own state: a stateful OpenVINO LM), else recompute."""
    from accel.models.runtime import runtime_of

    if getattr(model, "kind", None) is not None:
        held = runtime_of(model).lm_decoder(model, max_len)
        if held is not None:
            return held
    module = getattr(model, "module", None)
    if module is not None and lm_config(module) is not None:
        if cache_argument(_forward_params(module)) is not None:
            return CacheDecoder(module, max_len, device=str(getattr(model, "device", "cpu")))
    return RecomputeDecoder(model)
