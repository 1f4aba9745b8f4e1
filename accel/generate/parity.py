"""Parity of generation: logits compared teacher-forced over the reference's continuation.

The reference generates greedily from the prompt; the candidate is then fed the reference's
tokens (not its own), so both produce logits for the same positions and one early flip does
not make every later position differ. Per position: cosine of the logits, top-1 agreement,
KL(reference || candidate). Free-running greedy agreement (the first position where the
candidate's own tokens differ) is reported but not gated: with random weights the top two
logits are often near-ties, so a tiny change flips a token and everything after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accel.generate.decoders import Decoder
from accel.parity import ParityReport, Tolerances, compare

OUTPUT_NAME = "logits_teacher_forced"


def teacher_forced_logits(decoder: Decoder, prompt: Any, tokens: Any) -> Any:
    """Logits [batch, n, vocab] (float32, CPU) of ``decoder`` fed ``prompt`` then ``tokens``
    [batch, n] one at a time: position i is the prediction of ``tokens[:, i]``."""
    import torch

    steps = [decoder.prefill(prompt)]
    for i in range(tokens.shape[1] - 1):
        steps.append(decoder.step(tokens[:, i : i + 1]))
    return torch.stack([s.detach().float().cpu() for s in steps], dim=1)


def greedy_tokens(logits: Any) -> Any:
    return logits.argmax(dim=-1)


def reference_continuation(decoder: Decoder, prompt: Any, new_tokens: int) -> tuple[Any, Any]:
    """The reference's greedy tokens [batch, new_tokens] and its logits for them."""
    from accel.generate.timing import time_generation

    tokens = time_generation(decoder, prompt, new_tokens).tokens.cpu()
    return tokens, teacher_forced_logits(decoder, prompt, tokens)


@dataclass(frozen=True)
class GenerationParity:
    """Teacher-forced figures (gated) and the free-running first divergence (reported)."""

    cosine_per_position: tuple[float, ...]
    top1_per_position: tuple[float, ...]
    kl_per_position: tuple[float, ...]
    first_divergence: int | None  # None: the candidate's own greedy tokens all agree
    report: ParityReport  # accel.parity on the teacher-forced logits, at the recipe's gates

    @property
    def passed(self) -> bool:
        return self.report.passed

    def metrics(self) -> dict[str, float | None]:
        n = len(self.cosine_per_position)
        return {
            "tf_cosine_mean": sum(self.cosine_per_position) / n,
            "tf_cosine_min": min(self.cosine_per_position),
            "tf_top1": sum(self.top1_per_position) / n,
            "tf_kl_mean": sum(self.kl_per_position) / n,
            "tf_kl_max": max(self.kl_per_position),
            "greedy_agree_tokens": float(
                n if self.first_divergence is None else self.first_divergence
            ),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "teacher_forced": {
                "cosine": list(self.cosine_per_position),
                "top1": list(self.top1_per_position),
                "kl": list(self.kl_per_position),
            },
            "first_divergence": self.first_divergence,
            "summary": self.metrics(),
            "report": self.report.to_dict(),
        }


def position_figures(ref: Any, cand: Any) -> tuple[list[float], list[float], list[float]]:
    """Per position (mean over the batch): cosine, top-1 agreement, KL(ref || cand)."""
    import torch
    import torch.nn.functional as F

    ref64, cand64 = ref.double(), cand.double()
    cos = F.cosine_similarity(ref64, cand64, dim=-1).mean(dim=0)
    top1 = (ref64.argmax(-1) == cand64.argmax(-1)).double().mean(dim=0)
    logp, logq = F.log_softmax(ref64, dim=-1), F.log_softmax(cand64, dim=-1)
    kl = (logp.exp() * (logp - logq)).sum(dim=-1).clamp_min(0).mean(dim=0)
    finite = torch.isfinite(cand64).all(dim=-1).all(dim=0)
    cos = torch.where(finite, cos, torch.full_like(cos, float("nan")))
    return cos.tolist(), top1.tolist(), kl.tolist()


def first_divergence(ref_tokens: Any, cand_tokens: Any) -> int | None:
    """The first position where any row's tokens differ (None when all agree)."""
    differ = (ref_tokens.cpu() != cand_tokens.cpu()).any(dim=0).nonzero()
    return int(differ[0]) if len(differ) else None


def compare_generation_parity(
    ref_tokens: Any,
    ref_logits: Any,
    candidate: Decoder,
    prompt: Any,
    tolerances: Tolerances,
) -> GenerationParity:
    """The candidate teacher-forced on the reference's tokens, and free-running."""
    from accel.generate.timing import time_generation

    cand_logits = teacher_forced_logits(candidate, prompt, ref_tokens)
    cos, top1, kl = position_figures(ref_logits, cand_logits)
    own = time_generation(candidate, prompt, ref_tokens.shape[1]).tokens
    report = compare({OUTPUT_NAME: ref_logits}, {OUTPUT_NAME: cand_logits}, tolerances)
    return GenerationParity(
        tuple(cos), tuple(top1), tuple(kl), first_divergence(ref_tokens, own), report
    )
