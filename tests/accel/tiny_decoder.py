"""Tiny decoder language models (random weights, fixed seed) for the generation tests."""

from __future__ import annotations

import torch

SPEC = "input_ids:int64[batch,seq]{0..256}; batch=1..8:1; seq=1..64:16"


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,  # as the corpus builds them: forward returns logits only
    )
    return LlamaForCausalLM(cfg).eval()


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=False
    )
    return GPT2LMHeadModel(cfg).eval()
