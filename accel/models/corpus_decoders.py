"""Decoder language models of real shape for the corpus (``hf:`` prefix), random weights
built from configs: a Llama-style ~1.1B (TinyLlama's config), a Qwen2-style ~0.5B (Qwen2.5-0.5B's
config) and GPT-2 small (124M). Plain data: accel.models.corpus turns each into a CorpusEntry,
so nothing here imports transformers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DecoderConfig:
    name: str
    description: str
    config_cls: str
    model_cls: str
    vocab: int
    config: dict[str, Any] = field(default_factory=dict)


DECODERS = (
    DecoderConfig(
        "hf:tinyllama_1b",
        "Llama-style 1.1 B decoder, TinyLlama-1.1B's config (22 layers, hidden 2048, "
        "grouped-query attention 32/4 heads, 2048 context)",
        "LlamaConfig",
        "LlamaForCausalLM",
        32000,
        {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 22,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5,
        },
    ),
    DecoderConfig(
        "hf:qwen2_0_5b",
        "Qwen2-style 0.5 B decoder, Qwen2.5-0.5B's config (24 layers, hidden 896, 14/2 heads, "
        "q/k/v biases, tied embeddings)",
        "Qwen2Config",
        "Qwen2ForCausalLM",
        151936,
        {
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "tie_word_embeddings": True,
        },
    ),
    DecoderConfig(
        "hf:gpt2_small",
        "GPT-2 small decoder (124 M params, 12 layers, hidden 768, learned positions, 1024 "
        "context)",
        "GPT2Config",
        "GPT2LMHeadModel",
        50257,
        {"n_positions": 1024},
    ),
)
