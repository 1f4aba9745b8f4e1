"""`studio analyze SRC --pass NAME`: per-layer quantization sensitivity, most sensitive first,
and with a gate (--max-error / --min-cosine / --max-accuracy-drop) the smallest set of
layers to keep in float."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze", help="per-layer quantization sensitivity (which layers to keep in float)"
    )
    p.add_argument("source", help="model source (zoo:NAME, file.py:factory, ...)")
    p.add_argument(
        "--pass",
        dest="pass_name",
        default="quantize_static_int8",
        help="quantization pass to analyse",
    )
    p.add_argument("--input", dest="input_spec", help="input spec, e.g. 'x:float32[batch,64]'")
    p.add_argument(
        "--data", help="data: synthetic, synthetic-labelled[:SOURCE], file.npz, pkg.mod:function"
    )
    p.add_argument("--params", default="{}", help="the pass's other parameters as JSON")
    p.add_argument(
        "--max-error", type=float, help="propose layers to keep in float so max abs error <= this"
    )
    p.add_argument("--min-cosine", type=float, help="... so output cosine similarity >= this")
    p.add_argument(
        "--max-accuracy-drop", type=float, help="... so accuracy drops at most this (labelled data)"
    )
    p.add_argument(
        "--max-layers",
        type=int,
        help="analyse only N layers (every kind of layer, spread through the depth); "
        "the others are listed as skipped",
    )
    p.add_argument(
        "--method",
        choices=("auto", "full", "local"),
        default="auto",
        help="local: quantize each layer alone in one working copy (dynamic int8, weight-only; "
        "same numbers, much faster); full: the pass on a model copy per layer; auto: local "
        "when the pass allows it",
    )
    p.add_argument("--top", type=int, default=0, help="show only the N most sensitive layers")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow full unpickling of .pt files (runs code from the file: only for files you trust)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from accel.events import Progress
    from accel.job_specs import AnalyzeJob
    from studio.errors import UserError
    from studio.usecases import model_job, run_boxed, typed_event

    try:
        params = json.loads(args.params)
    except json.JSONDecodeError as exc:
        raise UserError(f"--params is not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise UserError(f"--params must be a JSON object, got {args.params!r}")
    if args.max_layers is not None and args.max_layers < 1:
        raise UserError(f"--max-layers must be at least 1, got {args.max_layers}")
    # The same spec and use case (accel.jobs.analyze) as the studio's analyze job.
    spec = model_job(
        AnalyzeJob,
        args.source,
        args.input_spec,
        trust_pickle=args.trust_pickle,
        pass_name=args.pass_name,
        data=args.data,
        params=params,
        max_layers=args.max_layers,
        method=args.method,
        max_error=args.max_error,
        min_cosine=args.min_cosine,
        max_accuracy_drop=args.max_accuracy_drop,
    )

    def emit(event: dict) -> None:
        progress = typed_event(event)
        if isinstance(progress, Progress) and not args.json:
            f, msg = progress.fraction, progress.message
            print(f"\r[{f * 100:3.0f}%] {msg[:70]:<70}", end="", file=sys.stderr, flush=True)

    result = run_boxed(spec, emit)
    return _print(args, result.report, result.auto)


def _print(args: argparse.Namespace, report, auto) -> int:
    """The ranking table and the verdict of the gate; the exit code (1: gate not met)."""
    import sys

    from studio.commands._table import fmt_num
    from studio.tables import cli_table, gate_verdict, sensitivity_columns

    if not args.json:
        print("\r" + " " * 80 + "\r", end="", file=sys.stderr)
    if args.json:
        from accel.job_results import AnalyzeResult

        print(json.dumps(AnalyzeResult(report, auto).to_dict(), indent=2))
        return 0 if auto is None or auto.met else 1
    labelled = report.baseline_accuracy is not None
    layers = report.layers[: args.top] if args.top else report.layers
    table = cli_table(sensitivity_columns(labelled), list(enumerate(layers, 1)))
    print(
        f"{report.pass_name} on {report.model_source}: one layer quantized at a time, data {report.data} "
        f"({report.num_samples} samples), most sensitive first; {report.method} method, "
        f"{report.duration_s:.1f} s"
    )
    print(table)
    if report.skipped:
        print(
            f"not analysed ({len(report.skipped)} of {len(report.skipped) + len(report.layers)}, "
            f"--max-layers {len(report.layers)}): {', '.join(report.skipped)}"
        )
    f = report.full
    line = f"all layers quantized: max_abs {_g(f['max_abs'])}, cosine {f['cosine']:.6f}"
    if labelled:
        line += f", accuracy {fmt_num(f.get('accuracy'), 4)} (float {fmt_num(report.baseline_accuracy, 4)})"
    print(line)
    if auto is not None:
        m = auto.metrics
        verdict = gate_verdict(auto.met)
        print(
            f"\nkeep in float: {json.dumps(auto.exclude)} -> max_abs {_g(m.get('max_abs'))}, "
            f"cosine {m.get('cosine', float('nan')):.6f}: {verdict}"
        )
        if auto.met and auto.exclude:
            print(
                f"recipe step: {{pass: {report.pass_name}, params: {{exclude: {json.dumps(auto.exclude)}}}}}"
            )
        return 0 if auto.met else 1
    return 0


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"
