"""``studio profile MODEL --generate``: a decoder LM generating, in a confined worker."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--generate",
        action="store_true",
        help="time generation (decoder LMs): TTFT, TPOT, tokens/s, weights and KV-cache memory",
    )
    p.add_argument("--prompt-tokens", type=int, metavar="N", help="--generate: prompt length (128)")
    p.add_argument("--new-tokens", type=int, metavar="M", help="--generate: tokens generated (64)")
    p.add_argument("--batch", type=int, metavar="B", help="--generate: prompts at once (1)")
    p.add_argument("--rounds", type=int, metavar="R", help="--generate: timed generations (5)")
    p.add_argument(
        "--no-layers",
        action="store_true",
        help="--generate: leave out the per-layer prefill / decode split and the KV growth",
    )


def run_generate(args: argparse.Namespace) -> int:
    from accel.job_specs import GenerateJob
    from studio.errors import UserError

    if args.store or args.trace:
        raise UserError(
            "--generate does not store a profile or write a trace: leave out --store / "
            "--trace, or profile the model in the studio with Generation ticked (it stores "
            "the per-layer split)"
        )
    from studio.commands._table import render_pairs
    from studio.generation_columns import profile_lines
    from studio.usecases import model_job, run_boxed

    spec = model_job(
        GenerateJob,
        args.source,
        args.input,
        trust_pickle=args.trust_pickle,
        device=args.device,
        threads=args.threads,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        batch=args.batch,
        rounds=args.rounds,
        layers=not args.no_layers,
    )
    result = run_boxed(spec)
    w, m = result["workload"], result["metrics"]
    head = [
        ("model", f"{result['model']['source']} ({result['model']['kind']})"),
        (
            "workload",
            f"generate: prompt {w['prompt_tokens']} tokens, {w['new_tokens']} new, batch "
            f"{w['batch']}, greedy; {result['rounds']} rounds, KV cache {result['kv_cache']}",
        ),
    ]
    print(render_pairs(head + profile_lines(m)))
    print("(medians with 95% bootstrap intervals over the rounds)")
    if result.get("layers"):
        from accel.profile.generation import GenerationLayers
        from studio.generation_layers import split_text

        print()
        print(split_text(GenerationLayers.from_dict(result["layers"]), args.top))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"\nJSON: {args.json}")
    return 0


def add_optimize_arguments(p: argparse.ArgumentParser) -> None:
    """The generation workload's settings for ``studio optimize --objective tokens_per_s``."""
    p.add_argument(
        "--prompt-tokens", type=int, metavar="N", help="tokens_per_s / ttft: prompt length (128)"
    )
    p.add_argument(
        "--new-tokens", type=int, metavar="M", help="tokens_per_s / ttft: tokens generated (64)"
    )
    p.add_argument(
        "--batch", type=int, metavar="B", help="tokens_per_s / ttft: prompts at once (1)"
    )


def generate_settings(args: argparse.Namespace) -> dict[str, int]:
    """The set generation settings, for SearchConfig; GenerateError naming the option."""
    from accel.generate.settings import GenerateError, GenerateSettings

    given = {
        k: getattr(args, k, None)
        for k in ("prompt_tokens", "new_tokens", "batch")
        if getattr(args, k, None) is not None
    }
    try:
        GenerateSettings(**given)
    except GenerateError as exc:
        raise GenerateError(str(exc).replace("benchmark.", "--").replace("_", "-")) from None
    return given
