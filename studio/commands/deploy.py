"""`studio deploy RUN --triton DIR`: a Triton model repository for a run's final model."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "deploy",
        help="write a Triton Inference Server model repository for a run's final model",
        description="Writes DIR/NAME/config.pbtxt and DIR/NAME/1/<model file> for the last "
        "model artifact of RUN (ONNX -> onnxruntime_onnx, TorchScript -> pytorch_libtorch, "
        "TensorRT engine -> tensorrt_plan, OpenVINO IR -> openvino). Inputs come from the "
        "recipe's input spec (a symbolic first dim becomes max_batch_size), outputs from the "
        "model; dynamic_batching's preferred sizes and queue delay from a batch sweep measured "
        "here. The config is checked with Triton's ModelConfig protobuf and the model is loaded "
        "once with its runtime before anything is written.",
    )
    p.add_argument("run", metavar="RUN", help="run id (or a unique prefix)")
    p.add_argument("--triton", metavar="DIR", required=True, help="model repository to write")
    p.add_argument("--name", default="model", help="model name in the repository")
    p.add_argument("--force", action="store_true", help="replace DIR when it is not empty")
    p.add_argument(
        "--batch",
        metavar="1,2,4",
        help="batch sizes of the sweep (default: powers of two up to max_batch_size, max 32)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)

    s = sub.add_parser(
        "serve-test",
        help="serve a run's model with Triton (PyTriton) on loopback under concurrent clients",
        description="A batch sweep of the run's final model called directly, then a real "
        "Triton server (PyTriton) on 127.0.0.1 serving it without and with dynamic batching "
        "(preferred sizes and queue delay from the sweep), loaded by concurrent clients over "
        "gRPC, each load bounded in requests and time: p50/p99 latency and throughput per "
        "client count, and the served path's overhead over a direct call. The result is "
        "stored with the run and written to the run folder as serve_test.json. "
        "A generation run (benchmark workload: generate, final model a stateful OpenVINO LM "
        "from openvino_stateful) is served token by token instead, with and without "
        "continuous batching: its clients stream seeded prompts of the run's prompt_tokens "
        "and ask new_tokens each, and report tokens/s, time to first token (p50/p99) and "
        "time per output token. The server always stops (Ctrl-C too).",
    )
    s.add_argument("run", metavar="RUN", help="run id (or a unique prefix)")
    s.add_argument("--clients", default="1,4,16", metavar="1,4,16", help="client counts")
    s.add_argument("--batch", metavar="1,2,4,8,16", help="batch sizes of the sweep")
    s.add_argument(
        "--duration",
        type=float,
        help=f"seconds per load at most (default {DURATION_S:g}; generation {LM_DURATION_S:g})",
    )
    s.add_argument(
        "--requests",
        type=int,
        help=f"at most this many requests per client (default {REQUESTS}; generation "
        f"{LM_REQUESTS})",
    )
    s.add_argument(
        "--port", type=int, help="HTTP port (gRPC: +1, metrics: +2); default: free ports"
    )
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=run_serve_test)


# Defaults of a serve test's loads: a forward model's requests are short, a generation's long.
DURATION_S, REQUESTS = 5.0, 2000
LM_DURATION_S, LM_REQUESTS = 60.0, 8


def parse_batches(text: str | None, flag: str = "--batch") -> list[int] | None:
    """``"1,4,16"`` -> [1, 4, 16]; UserError naming ``flag`` otherwise."""
    from studio.errors import UserError

    if not text:
        return None
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UserError(f"{flag} {text!r}: give whole numbers separated by commas") from None
    if not out or out[0] < 1:
        raise UserError(f"{flag} {text!r}: give numbers >= 1")
    return out


MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


def _check_name(name: str) -> None:
    """A Triton model name is a folder of the repository and a line of its config: letters,
    digits, ``_ . -`` only, not starting with a dot (no ``..``, no hidden folder)."""
    from studio.errors import UserError

    if not MODEL_NAME.fullmatch(name or ""):
        raise UserError(
            f"--name {name!r}: use letters, digits, '_', '.' and '-' only (at most 128, not "
            "starting with '.'), e.g. --name resnet50_int8"
        )


def run(args: argparse.Namespace) -> int:
    from studio.commands.history import _repo
    from studio.serve_test import deploy_spec
    from studio.usecases import run_boxed

    _check_name(args.name)
    repo = _repo(args)
    try:
        job, art = deploy_spec(
            repo, args.run, args.triton, name=args.name, force=args.force,
            batches=parse_batches(args.batch),
        )  # fmt: skip
    finally:
        repo.close()
    report = run_boxed(job)  # the model loads and is timed in a confined worker
    if args.json:
        print(json.dumps({**report.to_dict(), "run_id": job.run_id}, indent=2))
        return 0
    print(
        f"wrote {report.model_dir} ({report.platform}, from step {art['step'] + 1} {art['pass']})"
    )
    if report.sweep:
        print("batch sweep (this machine):")
        for pt in report.sweep:
            print(f"  batch {pt.batch:>3}: {pt.latency_ms:8.2f} ms  {pt.throughput:10.1f} /s")
        sizes = ", ".join(map(str, report.preferred_batch_sizes)) or "none"
        print(
            f"dynamic_batching: preferred sizes [{sizes}], max_queue_delay "
            f"{report.max_queue_delay_us} us, max_batch_size {report.max_batch_size}"
        )
    else:
        print("no batching: the input spec has no symbolic first dim")
    print("config.pbtxt parses with Triton's ModelConfig; the model loaded with its runtime")
    return 0


def run_serve_test(args: argparse.Namespace) -> int:
    import contextlib
    import sys

    from accel.events import Log
    from accel.job_specs import ServeTestJob
    from studio.commands.history import _repo
    from studio.serve_test import job_params, lm_job, store_result
    from studio.usecases import run_boxed, typed_event

    clients = parse_batches(args.clients, "--clients")  # the same "1,4,16" syntax
    repo = _repo(args)
    try:  # the GUI's job spec: bad numbers raise JobParamsError saying which
        lm = lm_job(
            repo,
            args.run,
            clients=clients,
            requests=args.requests,
            duration_s=args.duration,
            port=args.port,
        )
        if lm is None:
            params, art = job_params(
                repo,
                args.run,
                clients=clients or [],
                batches=parse_batches(args.batch),
                duration_s=DURATION_S if args.duration is None else args.duration,
                max_requests=REQUESTS if args.requests is None else args.requests,
            )
    finally:
        repo.close()
    if lm is not None:
        return _run_lm_serve_test(args, *lm)
    job = ServeTestJob.from_params({**params, "port": args.port})

    def say(event: dict) -> None:
        if isinstance(log := typed_event(event), Log) and not args.json:
            print(log.message, file=sys.stderr, flush=True)

    # The GUI worker's use case (accel.deploy.serve.serve_run). PyTriton prints what the
    # server writes on stdout: that goes to stderr, so stdout keeps the report (--json).
    with contextlib.redirect_stdout(sys.stderr):
        report = run_boxed(job, say)
    detail_id = str(job.run_id)
    data = {**report.to_dict(), "run_id": detail_id, "artifact": art}
    repo = _repo(args)
    try:  # the GUI's serve test stores through the same function
        data.update(store_result(repo, detail_id, report.to_dict(), art))
    finally:
        repo.close()
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    _print_serve_test(report, art, clients or [])
    if "saved_to" in data:
        print(f"saved {data['saved_to']}")
    return 0


def _run_lm_serve_test(args: argparse.Namespace, job: Any, art: dict[str, Any]) -> int:
    """The generation serve test of a run: its job in a worker, stored, printed."""
    import contextlib
    import sys

    from accel.events import Log
    from studio.commands.history import _repo
    from studio.serve_test import store_result
    from studio.usecases import run_boxed, typed_event

    if args.batch:
        from studio.errors import UserError

        raise UserError("--batch is for a forward model's batch sweep; a generation run has none")

    def say(event: dict) -> None:
        if isinstance(log := typed_event(event), Log) and not args.json:
            print(log.message, file=sys.stderr, flush=True)

    with contextlib.redirect_stdout(sys.stderr):  # what the server prints is not the report
        report = run_boxed(job, say)
    data = {**report.to_dict(), "run_id": job.run_id, "artifact": art}
    repo = _repo(args)
    try:
        data.update(store_result(repo, str(job.run_id), report.to_dict(), art))
    finally:
        repo.close()
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    print(f"model: {art['path']} (step {art['step'] + 1} {art['pass']})")
    print(
        f"{report.prompt_tokens} prompt tokens (seeded ids), {report.new_tokens} new tokens per "
        "request, greedy; figures measured by the clients"
    )
    print(lm_serve_table(report))
    if "saved_to" in data:
        print(f"saved {data['saved_to']}")
    return 0


def lm_serve_table(report: Any) -> str:
    """A generation serve test as a table: mode x clients, and the tokens/s gain of
    continuous batching per client count."""
    from accel.deploy.serve_lm import CB, NO_CB

    lines = [
        f"{'mode':24s} {'clients':>7s} {'tokens/s':>9s} {'TTFT p50':>9s} {'TTFT p99':>9s} "
        f"{'TPOT p50':>9s} {'requests':>8s} {'errors':>6s}"
    ]
    for p in sorted(report.load, key=lambda p: (p.mode != NO_CB, p.clients)):
        lines.append(
            f"{p.mode:24s} {p.clients:7d} {p.tokens_per_s:9.1f} {p.ttft_p50_ms:9.2f} "
            f"{p.ttft_p99_ms:9.2f} {p.tpot_p50_ms:9.2f} {p.requests:8d} {p.errors:6d}"
        )
    lines.append("TTFT, TPOT in ms (TPOT: per output token after the first)")
    for n in sorted({p.clients for p in report.load}):
        gain = report.gain(n)
        if gain is not None:
            lines.append(f"{n} clients: {CB} {gain:.2f}x the tokens/s of {NO_CB}")
    return "\n".join(lines)


def _print_serve_test(report: Any, art: dict[str, Any], clients: list[int]) -> None:
    """The serve test as tables: the sweep, the loads, the gains and the served overhead."""
    print(f"model: {art['path']} ({art['kind']}, step {art['step'] + 1} {art['pass']})")
    print("batch sweep (direct calls):")
    for pt in report.sweep:
        print(f"  batch {pt.batch:>3}: {pt.latency_ms:8.2f} ms  {pt.throughput:10.1f} samples/s")
    sizes = ", ".join(map(str, report.preferred_batch_sizes)) or "none"
    print(f"dynamic batching: preferred [{sizes}], max_queue_delay {report.max_queue_delay_us} us")
    print(
        f"{'mode':18s} {'clients':>7s} {'req/s':>9s} {'p50 ms':>8s} {'p99 ms':>8s} "
        f"{'batch':>6s} {'errors':>6s}"
    )
    for p in report.load:
        batch = "-" if p.avg_batch is None else f"{p.avg_batch:.2f}"
        print(
            f"{p.mode:18s} {p.clients:7d} {p.throughput:9.1f} {p.p50_ms:8.2f} "
            f"{p.p99_ms:8.2f} {batch:>6s} {p.errors:6d}"
        )
    print("batch: requests per model execution (Triton's metrics), the batches formed")
    for n in clients:
        a, b = report.point("dynamic batching", n), report.point("no batching", n)
        if a and b and b.throughput > 0:
            print(f"{n} clients: dynamic batching {a.throughput / b.throughput:.2f}x throughput")
    print(f"batching gain of the model itself (direct sweep): {report.sweep_gain:.2f}x")
    if report.served_p50_ms == report.served_p50_ms:  # not NaN: timed beside direct calls
        print(
            f"served path overhead at 1 client: {report.served_p50_ms - report.direct_p50_ms:.2f}"
            f" ms (p50 {report.served_p50_ms:.2f} ms served vs {report.direct_p50_ms:.2f} ms "
            "direct, in alternation)"
        )
