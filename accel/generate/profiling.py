"""What the per-layer generation profile drives: one greedy generation, token by token, and
the KV cache's size, measured at each length and in closed form from the model's config."""

from __future__ import annotations

from typing import Any

from accel.generate.decoders import Decoder

MAX_KV_POINTS = 256  # the KV growth line keeps at most this many lengths


class GreedyWork:
    """One greedy generation of a decoder, one call per token (``accel.models.runtime``'s
    ``GenerationWork``): ``prefill()`` gives the first token, ``step(token)`` the next."""

    def __init__(self, decoder: Decoder, prompt: Any, new_tokens: int) -> None:
        self.decoder = decoder
        self.prompt = prompt
        self.new_tokens = new_tokens

    def _next(self, logits: Any) -> Any:
        token = logits.argmax(dim=-1, keepdim=True)
        if getattr(token, "is_cuda", False):
            import torch

            torch.cuda.synchronize()
        return token

    def prefill(self) -> Any:
        return self._next(self.decoder.prefill(self.prompt))

    def step(self, token: Any) -> Any:
        return self._next(self.decoder.step(token))


def kv_growth(work: GreedyWork) -> tuple[list[int], list[int]]:
    """Cached positions and the cache's bytes after the prefill and after each decode step
    of one generation (at most MAX_KV_POINTS of them, evenly spread, the last kept)."""
    prompt_len = int(work.prompt.shape[1])
    lengths, sizes = [prompt_len], []
    token = work.prefill()
    sizes.append(work.decoder.kv_cache_bytes())
    for i in range(1, work.new_tokens):
        token = work.step(token)
        lengths.append(prompt_len + i)
        sizes.append(work.decoder.kv_cache_bytes())
    stride = max(1, -(-len(lengths) // MAX_KV_POINTS))
    keep = sorted({*range(0, len(lengths), stride), len(lengths) - 1})
    return [lengths[i] for i in keep], [sizes[i] for i in keep]


def kv_bytes_per_token(config: Any, dtype_bytes: int, batch: int = 1) -> int | None:
    """Bytes one more cached position costs: keys and values of every layer,
    2 x layers x kv heads x head size x dtype bytes x batch (None: the config does not say)."""
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    if not (isinstance(layers, int) and isinstance(heads, int) and heads > 0):
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None)
    if not isinstance(head_dim, int) or head_dim <= 0:
        if not isinstance(hidden, int):
            return None
        head_dim = hidden // heads
    return 2 * layers * int(kv_heads) * head_dim * dtype_bytes * batch


def cache_dtype_bytes(module: Any) -> int:
    """Bytes per element of the cache: the model's floating parameters' dtype (fp32: 4)."""
    inner = getattr(module, "_orig_mod", module)
    for p in getattr(inner, "parameters", lambda: ())():
        if p.is_floating_point():
            return int(p.element_size())
    return 4


def layer_split_problem(model: Any) -> str | None:
    """Why ``model``'s generation cannot be split per layer (None: it can): a torch decoder
    LM that generates through its KV cache is what the hooks time token by token; a stateful
    OpenVINO LM (no module, its IR's facts) is split by its performance counters."""
    from accel.generate.decoders import decoder_for
    from accel.generate.settings import GenerateError, lm_config, model_lm_config, vocab_size

    module = getattr(model, "module", None)
    inner = getattr(module, "_orig_mod", module)
    can_generate = getattr(inner, "can_generate", None)
    if module is None:  # a runtime's own LM (a stateful OpenVINO IR) knows its vocabulary
        if vocab_size(model_lm_config(model)) is None:
            return "not a decoder language model (a Hugging Face model that generates)"
    elif not callable(can_generate) or not can_generate():
        return "not a decoder language model (a Hugging Face model that generates)"
    elif vocab_size(lm_config(module)) is None:
        return "the model's config has no vocab_size"
    try:
        decoder = decoder_for(model, 2)
    except GenerateError as exc:
        return str(exc)
    if decoder.kv_cache == "none":
        return "its forward takes no KV cache: every token would recompute the prompt"
    return None
