"""`studio profile SRC`: latency summary, and with --layers where the time goes per layer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="latency and throughput of a model; --layers adds the per-layer profile",
        description="Benchmark a model (parameters, size, latency p50/p90, throughput). "
        "With --layers, also profile it layer by layer (torch: per module, ONNX: per node).",
    )
    p.add_argument(
        "source", metavar="SRC", help="model source: zoo:resnet, model.onnx, pkg.mod:factory, ..."
    )
    p.add_argument(
        "--input", metavar="SPEC", help="input spec, e.g. 'x:float32[batch,3,224,224]; batch=8'"
    )
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda:0")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (torch / ONNX Runtime)")
    p.add_argument(
        "--layers", action="store_true", help="per-layer profile: top layers by self time"
    )
    p.add_argument("--ops", action="store_true", help="with --layers: also the top operators")
    p.add_argument(
        "--top", type=int, default=15, metavar="N", help="layers / operators to show (15)"
    )
    p.add_argument(
        "--trace", metavar="OUT.json", help="write a Chrome/Perfetto trace (implies --layers)"
    )
    p.add_argument("--iters", type=int, default=30, metavar="N", help="timed iterations (30)")
    p.add_argument("--warmup", type=int, default=5, metavar="N", help="warm-up iterations (5)")
    p.add_argument("--json", metavar="OUT.json", help="write the benchmark and profile as JSON")
    p.add_argument(
        "--store",
        action="store_true",
        help="save the per-layer profile in the studio database (--db), as the studio's "
        "Profile action does (implies --layers)",
    )
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow full unpickling of .pt files (runs code from the file: only for files you trust)",
    )
    p.set_defaults(func=run)


def layer_table(prof, top: int) -> str:
    """The ``top`` layers by self time, with the Profile panel's columns (studio.tables)."""
    from studio.tables import cli_table, layer_columns

    return cli_table(layer_columns(), prof.top(top))


def op_table(prof, top: int) -> str:
    """The ``top`` operators by self time, with the Profile panel's columns."""
    from studio.tables import cli_table, op_columns

    return cli_table(op_columns(cuda=prof.device.startswith("cuda")), prof.ops[:top])


def _check(args: argparse.Namespace) -> None:
    from studio.errors import UserError

    if args.iters < 1 or args.warmup < 0 or args.top < 1:
        raise UserError("--iters and --top must be >= 1, --warmup >= 0")
    if args.threads is not None and args.threads < 1:
        raise UserError("--threads must be >= 1")
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UserError(
                f"--device {args.device}: CUDA is not available on this machine; use --device cpu"
            )
    elif args.device != "cpu":
        raise UserError(f"unknown --device {args.device!r}: use cpu, cuda or cuda:N")


def summary_text(result) -> str:
    """The model and benchmark lines of a ``accel.job_results.ProfileResult``."""
    from studio.commands._table import fmt_bytes, fmt_count, fmt_ms, render_pairs

    m, res = result.model, result.benchmark
    threads = f", {res.threads} thread(s)" if res.threads else ""
    return render_pairs(
        [
            ("model", f"{m['source']} ({m['kind']})"),
            ("parameters", fmt_count(m["num_params"])),
            ("size", fmt_bytes(m["size_bytes"])),
            ("device", f"{res.device}{threads}"),
            ("inputs", result.inputs),
            ("latency p50", f"{fmt_ms(res.p50_ms)} ms"),
            ("latency p90", f"{fmt_ms(res.p90_ms)} ms"),
            ("throughput", f"{res.throughput:,.1f} samples/s"),
            ("first call", f"{fmt_ms(res.first_call_ms)} ms"),
        ]
    )


def profile_head(prof) -> str:
    """The two lines above the layer table: what was profiled and how much it covers."""
    from accel.models.runtime import get_runtime
    from studio.commands._table import fmt_count, fmt_ms

    what = get_runtime(prof.kind).profile_rows
    return (
        f"per-layer profile ({prof.timing}, {prof.iters} iterations): "
        f"{sum(1 for r in prof.rows if r.calls)} {what}, total {fmt_ms(prof.total_ms)} ms, "
        f"{fmt_count(prof.total_flops)} FLOPs\n"
        f"profiler overhead {prof.overhead_ratio:.2f}x; layer self times add up to "
        f"{100 * prof.coverage:.1f}% of the plain forward ({fmt_ms(prof.plain_forward_ms)} ms), "
        f"(unattributed) {fmt_ms(prof.unattributed_ms)} ms; {prof.threads} threads"
    )


def run(args: argparse.Namespace) -> int:
    from accel.job_specs import ProfileJob
    from studio.usecases import model_job, run_boxed

    _check(args)
    # The same spec and use case as the studio's Profile action (accel.jobs.profile), plus
    # the benchmark; storing needs the per-layer profile, as the studio stores it.
    spec = model_job(
        ProfileJob,
        args.source,
        args.input,
        trust_pickle=args.trust_pickle,
        device=args.device,
        threads=args.threads,
        benchmark=True,
        bench_iters=args.iters,
        warmup=args.warmup,
        layers=bool(args.layers or args.trace or args.ops or args.store),
        iters=min(args.iters, 20),
        ops=args.ops,
        trace_path=args.trace,
    )
    result = run_boxed(spec)
    print(summary_text(result))
    out: dict = {"benchmark": result.benchmark.to_dict()}
    prof = result.profile
    if prof is not None:
        out["profile"] = prof.to_dict()
        print()
        print(profile_head(prof))
        print()
        print(layer_table(prof, args.top))
        if args.ops and prof.ops:
            print()
            print(op_table(prof, args.top))
        if prof.trace_path:
            print(
                f"\ntrace: {prof.trace_path} (open in https://ui.perfetto.dev or chrome://tracing)"
            )
    if args.store:
        _store(args, result)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"\nJSON: {args.json}")
    return 0


def _store(args: argparse.Namespace, result) -> None:
    """Save the profile in the experiment store as the studio saves its profiles."""
    from studio.commands._common import open_repo
    from studio.usecases import store_profile

    repo = open_repo(args)
    try:
        record = store_profile(repo, result)
        where = repo.url
    finally:
        repo.close()
    print(f"\nstored: profile {record.id} of {result.model['source']} in {where}")
