"""`studio deploy RUN --triton DIR`: a Triton model repository for a run's final model."""

from __future__ import annotations

import argparse
import json
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


def parse_batches(text: str | None) -> list[int] | None:
    from studio.cli import CliError

    if not text:
        return None
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise CliError(f"--batch {text!r}: give whole numbers separated by commas") from None
    if not out or out[0] < 1:
        raise CliError(f"--batch {text!r}: batch sizes must be >= 1")
    return out


def run_artifact(repo: Any, run_id: str) -> tuple[Any, dict[str, Any], Any]:
    """(run detail, servable artifact, input spec) of a finished run; CliError otherwise."""
    from accel.deploy.triton import servable_artifact
    from accel.models import InputSpec
    from studio.cli import CliError
    from studio.store import RunNotFound

    try:
        detail = repo.get_run(run_id)
    except RunNotFound as exc:
        raise CliError(str(exc)) from None
    if detail.run.status != "succeeded":
        raise CliError(f"run {detail.id[:12]} is {detail.run.status}: deploy a succeeded run")
    steps = sorted((s for s in detail.steps if s.index >= 0), key=lambda s: s.index)
    artifacts = [
        {"kind": a.kind, "path": a.path, "step": s.index, "pass": s.pass_name}
        for s in steps
        for a in s.artifacts
    ]
    art = servable_artifact(artifacts)
    if art is None:
        last = steps[-1].pass_name if steps else "none"
        raise CliError(
            f"run {detail.id[:12]} has no model file Triton can serve (its last step: {last}; "
            "a torch.compile'd or eager module is not a file). Add an export_onnx step (or "
            "torchscript) at the end of the recipe and run it again."
        )
    if not detail.model_input_spec:
        raise CliError(f"run {detail.id[:12]} has no input spec recorded")
    spec = InputSpec.parse(detail.model_input_spec)
    return detail, art, spec


def run(args: argparse.Namespace) -> int:
    from accel.deploy.triton import write_repository
    from studio.commands.history import _repo

    repo = _repo(args)
    try:
        detail, art, spec = run_artifact(repo, args.run)
    finally:
        repo.close()
    batches = parse_batches(args.batch)
    device = detail.run.device if detail.run.device.startswith("cuda") else "cpu"
    result = write_repository(
        art, spec, args.triton, name=args.name, device=device, force=args.force, batches=batches
    )
    if args.json:
        print(json.dumps({**result.to_dict(), "run_id": detail.id}, indent=2))
        return 0
    m = result.model
    print(f"wrote {result.model_dir} ({m.platform}, from step {art['step'] + 1} {art['pass']})")
    if result.sweep:
        print("batch sweep (this machine):")
        for pt in result.sweep:
            print(f"  batch {pt.batch:>3}: {pt.latency_ms:8.2f} ms  {pt.throughput:10.1f} /s")
        sizes = ", ".join(map(str, m.preferred_batch_sizes)) or "none"
        print(
            f"dynamic_batching: preferred sizes [{sizes}], "
            f"max_queue_delay {m.max_queue_delay_us} us, max_batch_size {m.max_batch_size}"
        )
    else:
        print("no batching: the input spec has no symbolic first dim")
    print("config.pbtxt parses with Triton's ModelConfig; the model loaded with its runtime")
    return 0
