"""Building an ONNX Runtime GenAI model folder from a Hugging Face causal LM, offline.

1. ``save_hf_folder`` writes the LM with ``save_pretrained`` and a tokenizer next to it: the
   model builder insists on one (it loads it with ``AutoTokenizer``), so ``train_tokenizer``
   trains a small byte-level BPE on the Python standard library's own sources (no download).
   The studio never uses this tokenizer: prompts are token ids, and every figure (parity,
   tokens/s) is computed from ids and logits.
2. ``build_genai`` runs ONNX Runtime GenAI's model builder (what ``python -m
   onnxruntime_genai.models.builder`` runs) on that folder: precision int4 / int8 /
   fp32 for the CPU execution provider, int4/int8 block size and accuracy level as the
   builder's extra options. It writes ``genai_config.json`` and ``model.onnx`` (+ ``.data``)
   whose attention keeps the KV cache as past/present inputs and outputs (GroupQueryAttention)
   and whose int4/int8 weights are MatMulNBits.

These functions use only the standard library, transformers and tokenizers (imported inside
them), so the exported script carries their source unchanged (``OrtGenaiPass.to_script``).
"""

from __future__ import annotations

from typing import Any

# The builder's model classes, by the Hugging Face architecture names it knows (the decoder
# LMs of onnxruntime_genai.models.builder.create_model that run as text-only models).
BUILDER_ARCHITECTURES = (
    "ChatGLMModel",
    "Ernie4_5ForCausalLM",
    "GemmaForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "GraniteForCausalLM",
    "InternLM2ForCausalLM",
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "NemotronForCausalLM",
    "OlmoForCausalLM",
    "PhiForCausalLM",
    "Phi3ForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "SmolLM3ForCausalLM",
)


def train_tokenizer(folder: Any, vocab_size: int = 400) -> None:
    """A byte-level BPE trained on the standard library's sources, saved into ``folder``."""
    import pathlib
    import sysconfig

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = sorted(str(p) for p in stdlib.glob("*.py"))[:20]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<unk>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special, show_progress=False
    )
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(str(folder))


def save_hf_folder(lm: Any, folder: Any) -> None:
    """The LM (float32, its config with a KV cache) and a tokenizer, saved into ``folder``."""
    import copy

    import torch

    lm = copy.deepcopy(lm).to(torch.float32)
    lm.config.use_cache = True
    with torch.no_grad():
        lm.save_pretrained(str(folder))
    train_tokenizer(folder)


def builder_options(
    precision: str, block_size: int, accuracy_level: int, embedding: bool = False
) -> list[str]:
    """The builder's KEY=VALUE extra options (weight-only int4/int8: MatMulNBits; with
    ``embedding`` the token embedding too, as GatherBlockQuantized)."""
    if precision not in ("int4", "int8"):
        return []
    options = [f"block_size={int(block_size)}", f"accuracy_level={int(accuracy_level)}"]
    if embedding:
        options.append("op_types_to_quantize=MatMul/Gather")
    return options


def build_genai(
    hf_dir: str, out_dir: str, cache_dir: str, precision: str, options: list[str]
) -> None:
    """ONNX Runtime GenAI's model builder on ``hf_dir`` for the CPU execution provider, in this
    process (what ``python -m onnxruntime_genai.models.builder -m D -i D -o OUT -p P -e cpu``
    does); its prints and progress bars go to a buffer, shown only when it fails."""
    import contextlib
    import io

    from onnxruntime_genai.models import builder

    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            kv = builder.parse_extra_options(
                hf_dir, hf_dir, out_dir, precision, "cpu", cache_dir, list(options)
            )
            builder.create_model(hf_dir, hf_dir, out_dir, precision, "cpu", cache_dir, **kv)
    except Exception as exc:
        tail = log.getvalue().strip().splitlines()[-3:]
        raise RuntimeError(f"{type(exc).__name__}: {exc} ({' | '.join(tail)})") from exc
