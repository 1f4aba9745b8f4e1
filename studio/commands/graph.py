"""Graph commands: `studio graph SRC`, `studio parity A B` (per layer), `studio bisect RUN`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from studio.commands._common import add_trust_arguments


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input", metavar="SPEC", help="input spec, e.g. 'x:float32[batch,3,224,224]; batch=8'"
    )
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow full unpickling of .pt files (runs code from the file: only for files you trust)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser(
        "graph",
        help="the model's graph: node/group summary, JSON export, diff against another model",
        description="Build the graph of a model (torch.export, FX or module hooks; ONNX) and "
        "print a summary by top-level module. --json writes the graph; --diff B prints what "
        "changed from this model to B (added, removed, fused nodes, dtype changes).",
    )
    g.add_argument("source", metavar="SRC", help="model source: zoo:resnet, model.onnx, ...")
    _common(g)
    g.add_argument("--json", metavar="OUT.json", help="write the graph as JSON")
    g.add_argument("--diff", metavar="SRC_B", help="structural diff against another model")
    g.set_defaults(func=run_graph)

    p = sub.add_parser(
        "parity",
        help="per-layer parity: the first layer where model B drifts from model A",
        description="Run A (original) and B (optimized) on the same inputs, compare every "
        "layer's output (matched by module path; ONNX node names map to module paths) and "
        "report the first layer, in execution order, outside the tolerances. "
        "Exit code 1 when a layer fails.",
    )
    p.add_argument("source_a", metavar="SRC_A", help="original model source")
    p.add_argument("source_b", metavar="SRC_B", help="optimized model source (torch or .onnx)")
    _common(p)
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (1e-4)")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (1e-3)")
    p.add_argument("--min-cosine", type=float, default=None, help="pass layers with cosine >= this")
    p.add_argument("--failures", action="store_true", help="list failing layers only")
    p.add_argument("--json", metavar="OUT.json", help="write the per-layer report as JSON")
    p.set_defaults(func=run_parity)

    b = sub.add_parser(
        "bisect",
        help="per-layer parity of every step of a run against the run's original model",
        description="For a run folder (runs/<id> or its id), compare the original model with "
        "the model each step saved (ONNX, .pt2, TorchScript) layer by layer and print the "
        "first failing layer per step. Steps that saved no model are listed as such.",
    )
    b.add_argument(
        "run",
        metavar="RUN_DIR_OR_ID",
        help="run folder, or a run id from the history (or under ./runs)",
    )
    b.add_argument("--atol", type=float, default=None, help="default: the recipe's gate")
    b.add_argument("--rtol", type=float, default=None, help="default: the recipe's gate")
    add_trust_arguments(b)
    b.set_defaults(func=run_bisect)


def _graph(source: str, spec: str | None, trust: bool):
    """The model's graph through the studio's open-model use case (``accel.jobs.inspect``)."""
    from accel.job_specs import InspectJob
    from studio.errors import UserError
    from studio.usecases import model_job, run_boxed

    opened = run_boxed(model_job(InspectJob, source, spec, trust_pickle=trust))
    if opened.graph is None:
        raise UserError(f"no graph for {source}: {opened.graph_error}")
    return opened.graph


def run_graph(args: argparse.Namespace) -> int:
    from accel.graph.diff import diff_graphs

    graph = _graph(args.source, args.input, args.trust_pickle)
    print(
        f"{graph.name}: {len(graph.nodes)} nodes, {len(graph.edges)} edges, "
        f"{len(graph.groups) - 1} module groups, {graph.num_params:,} parameters "
        f"(built with {graph.source})"
    )
    if graph.fallback_reason:
        print(f"fallback: {graph.fallback_reason}")
    for note in graph.notes:
        if note != graph.fallback_reason:
            print(f"note: {note}")
    view = graph.collapsed()
    for n in view.nodes:
        if n.op == "group":
            print(
                f"  {n.module_path:<30} {n.attributes.get('type', ''):<20} "
                f"{n.attributes['num_nodes']:>5} nodes {n.num_params:>12,} params"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(graph.to_dict()))
        print(f"graph written to {args.json}")
    if args.diff:
        other = _graph(args.diff, args.input, args.trust_pickle)
        d = diff_graphs(graph, other)
        print(f"diff: {d.summary()}")
        for a_id, b_id in d.fused.items():
            print(f"  fused    {a_id} ({graph.node(a_id).module_path}) -> {b_id}")
        for a_id in d.removed:
            print(f"  removed  {a_id} ({graph.node(a_id).module_path})")
        for b_id in d.added:
            print(f"  added    {b_id} ({other.node(b_id).module_path})")
        for c in d.op_changed:
            print(f"  op       {c.a}: {c.before} -> {c.after}")
        for c in d.dtype_changed[:20]:
            print(f"  dtype    {c.a}: {c.before} -> {c.after}")
    return 0


def run_parity(args: argparse.Namespace) -> int:
    from accel.job_specs import ParityJob
    from studio.usecases import model_job, run_boxed

    # In a worker (accel.jobs.parity): B keeps its own input names (an ONNX export may call
    # `x` `input.1`); A's sample inputs are fed by name where they match, else by position.
    spec = model_job(
        ParityJob,
        args.source_a,
        args.input,
        trust_pickle=args.trust_pickle,
        model_b=args.source_b,
        atol=args.atol,
        rtol=args.rtol,
        min_cosine=args.min_cosine,
    )
    report = run_boxed(spec)
    print(report.format_table(only_failures=args.failures))
    for note in report.notes:
        print(f"note: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    if not report.layers:
        print("no layer could be compared (see the notes above)")
        return 1
    if report.first_failure:
        r = report.first_failing()
        print(f"first failing layer: {report.first_failure} ({r.reason})")
        return 1
    print(f"all {len(report.layers)} compared layers within atol {args.atol}, rtol {args.rtol}")
    return 0


def _resolve_run(arg: str, db: str | None = None) -> Path:
    from studio.errors import UserError

    p = Path(arg)
    if p.is_dir():
        return p
    # A run id (or prefix) from the store: its recorded run folder.
    try:
        from studio.store import Repository

        repo = Repository.open(db)
        try:
            run_dir = repo.get_run(arg).run_dir
        finally:
            repo.close()
        if run_dir and Path(run_dir).is_dir():
            return Path(run_dir)
    except Exception:  # not a stored run: try ./runs below
        pass
    for root in (Path("runs"),):
        cand = root / arg
        if cand.is_dir():
            return cand
        matches = sorted(root.glob(f"{arg}*")) if root.is_dir() else []
        if len(matches) == 1:
            return matches[0]
    raise UserError(f"no run folder {arg!r} (give the run's folder, or an id under ./runs)")


def run_bisect(args: argparse.Namespace) -> int:
    from accel.job_specs import BisectJob
    from studio.usecases import run_boxed

    run_dir = _resolve_run(args.run, getattr(args, "db", None))
    # The run folder's recipe is a file: its code and pickles need the person's opt-ins.
    job = BisectJob(
        run_dir=str(run_dir.resolve()),
        atol=args.atol,
        rtol=args.rtol,
        trust_pickle=args.trust_pickle,
        trust_code=args.trust_recipe_code,
    )
    steps = run_boxed(job).steps
    if not steps:
        print(f"{run_dir}: no steps")
        return 0
    failed = False
    for s in steps:
        if s.report is None:
            print(f"{s.step}: {s.error}")
            continue
        rep = s.report
        if not rep.layers:
            print(f"{s.step}: no layer could be compared ({'; '.join(rep.notes)})")
        elif rep.first_failure:
            failed = True
            r = rep.first_failing()
            print(f"{s.step}: first failing layer {rep.first_failure} ({r.reason})")
        else:
            print(
                f"{s.step}: all {len(rep.layers)} layers within tolerance ({Path(s.artifact).name})"
            )
    return 1 if failed else 0
