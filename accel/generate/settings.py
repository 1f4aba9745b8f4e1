"""The generation workload's settings (a recipe's ``benchmark`` block) and their checks.

The recipe's pydantic model bounds each number; what needs the model (its context length,
its vocabulary) is checked here, once the model is loaded, with an error naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from accel.errors import AccelError

DEFAULT_PROMPT_TOKENS = 128
DEFAULT_NEW_TOKENS = 64
DEFAULT_BATCH = 1
PROMPT_SEED_OFFSET = 7919  # prompts differ from the forward workload's sample of the same seed


class GenerateError(AccelError, ValueError):
    """A generation setting that cannot work with this model; the message names the setting."""


@dataclass(frozen=True)
class GenerateSettings:
    """How long a prompt, how many new tokens, how many prompts at once."""

    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    new_tokens: int = DEFAULT_NEW_TOKENS
    batch: int = DEFAULT_BATCH

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "new_tokens", "batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise GenerateError(f"benchmark.{name} must be a whole number, got {value!r}")
            if value < 1:
                raise GenerateError(f"benchmark.{name} must be at least 1, got {value}")

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.new_tokens

    @classmethod
    def from_bench(cls, bench: Any) -> GenerateSettings:
        """From a recipe's BenchSettings (or a mapping); unset values take the defaults."""
        values = {k: setting(bench, k) for k in ("prompt_tokens", "new_tokens", "batch")}
        return cls(**{k: v for k, v in values.items() if v is not None})

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "batch": self.batch,
        }


def setting(bench: Any, name: str) -> Any:
    """One value of a benchmark block (a recipe's BenchSettings or a mapping); None if unset."""
    if isinstance(bench, dict):
        return bench.get(name)
    return getattr(bench, name, None)


def is_generate(bench: Any) -> bool:
    """Whether a recipe's benchmark block asks for the generation workload."""
    return setting(bench, "workload") == "generate"


def lm_config(module: Any) -> Any:
    """The Hugging Face config of a causal LM module (through torch.compile's wrapper)."""
    inner = getattr(module, "_orig_mod", module)
    return getattr(inner, "config", None)


def model_lm_config(model: Any) -> Any:
    """The LM config of a loaded model: its torch module's Hugging Face config, else what
    its runtime read from the model file (a stateful OpenVINO IR keeps the vocabulary size
    and context length: ``metadata["lm_config"]``); None when neither says."""
    config = lm_config(getattr(model, "module", None))
    if config is not None:
        return config
    facts = (getattr(model, "metadata", None) or {}).get("lm_config")
    return SimpleNamespace(**facts) if facts else None


def context_length(config: Any) -> int | None:
    """The longest sequence the model's positions cover (None when its config does not say)."""
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def vocab_size(config: Any) -> int | None:
    value = getattr(config, "vocab_size", None)
    return value if isinstance(value, int) and value > 0 else None


def check_fits(settings: GenerateSettings, config: Any) -> None:
    """Raise GenerateError when prompt plus new tokens do not fit the model's context."""
    if config is None:
        raise GenerateError(
            "benchmark.workload: generate needs a decoder language model with a Hugging Face "
            "config (vocab_size, context length); this model has none"
        )
    if vocab_size(config) is None:
        raise GenerateError("benchmark.workload: generate: the model's config has no vocab_size")
    limit = context_length(config)
    if limit is None:
        return
    if settings.prompt_tokens >= limit:
        raise GenerateError(
            f"benchmark.prompt_tokens is {settings.prompt_tokens}, longer than the model's "
            f"context of {limit} tokens (leave room for new_tokens); lower prompt_tokens"
        )
    if settings.total_tokens > limit:
        raise GenerateError(
            f"benchmark.prompt_tokens + new_tokens is {settings.total_tokens}, more than the "
            f"model's context of {limit} tokens; lower new_tokens to at most "
            f"{limit - settings.prompt_tokens}"
        )


def prompt_ids(settings: GenerateSettings, vocab: int, seed: int = 0) -> Any:
    """Seeded random token ids, shape [batch, prompt_tokens] (no tokenizer needed)."""
    import torch

    gen = torch.Generator().manual_seed(seed + PROMPT_SEED_OFFSET)
    return torch.randint(0, vocab, (settings.batch, settings.prompt_tokens), generator=gen)


# What a caller may set on a generation recipe's benchmark block for one run (a prompt-length
# sweep): nothing else of the recipe changes.
OVERRIDABLE = ("prompt_tokens", "new_tokens")


def with_generate_settings(recipe: Any, overrides: dict[str, Any]) -> Any:
    """``recipe`` with its benchmark block's generation settings replaced by ``overrides``
    (checked as the recipe's own values are); a GenerateError names what is wrong."""
    from pydantic import ValidationError

    unknown = set(overrides) - set(OVERRIDABLE)
    if unknown:
        raise GenerateError(
            f"only {', '.join(OVERRIDABLE)} of a generation recipe can be set for one run; "
            f"got {', '.join(sorted(unknown))}"
        )
    if not is_generate(recipe.benchmark):
        raise GenerateError(
            f"{', '.join(sorted(overrides))}: only for generation recipes (benchmark.workload: "
            "generate); this recipe times one forward call"
        )
    bench = recipe.benchmark.model_dump(exclude_unset=True)
    try:
        new = type(recipe.benchmark).model_validate({**bench, **overrides})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise GenerateError(f"benchmark.{where}: {err['msg']} (got {err.get('input')!r})") from None
    return recipe.model_copy(update={"benchmark": new})
