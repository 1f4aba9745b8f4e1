"""What a run leaves on disk: its folder, JSON files, artifact records (size and sha256) and
each torch step's model saved as ``model.pt2`` (for bisect and the graph diff)."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from accel.recipe import Recipe

log = logging.getLogger(__name__)

SAVE_MODELS_ENV = "ACCEL_SAVE_STEP_MODELS"  # "0": steps save no model.pt2 (quick test runs)
MODEL_ARTIFACT_KINDS = ("model", "onnx", "exported_program", "torchscript")
MAX_SAVED_MODEL_BYTES = 2 * 1024**3  # larger step models are not saved (time and disk)


def default_run_dir(recipe: Recipe, root: str | Path | None = None) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in recipe.name)[:40]
    return Path(root or "runs") / f"{stamp}-{safe}"


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=2))
    return path


def file_artifact(path: str | Path, kind: str) -> dict[str, Any]:
    """An artifact record with size and sha256 (directories: total size, no hash)."""
    p = Path(path)
    rec: dict[str, Any] = {"kind": kind, "path": str(p.resolve()), "sha256": None, "bytes": None}
    if p.is_file():
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        rec["sha256"] = h.hexdigest()
        rec["bytes"] = p.stat().st_size
    elif p.is_dir():
        rec["bytes"] = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return rec


def step_artifacts(declared: list[dict[str, Any]], step_dir: Path) -> list[dict[str, Any]]:
    """Records of the files a pass declared plus the step's outputs and parity report."""
    records = [file_artifact(a["path"], a["kind"]) for a in declared]
    records.append(file_artifact(step_dir / "outputs.pt", "outputs"))
    records.append(file_artifact(step_dir / "parity.json", "parity_report"))
    return records


def save_step_model(
    model: Any,
    inputs: dict[str, Any],
    step_dir: Path,
    artifacts: list[dict[str, Any]],
    seed: int = 0,
) -> str | None:
    """Save a torch step's model as ``step_dir/model.pt2`` (torch.export, never a pickle) and
    add it to ``artifacts`` (kind "model"), so bisect and the graph diff can load every step.

    Returns what to put in ``details["saved_model"]``: the file name, ``"not saved: why"``,
    or None when the step already saved its model (ONNX, TorchScript, torch_export) or the
    model is not a torch module. The step's model is left as it was (mode, hooks)."""
    import torch

    if not model.runtime.saves_step_models or model.module is None:
        return None
    if any(a.get("kind") in MODEL_ARTIFACT_KINDS for a in artifacts):
        return None
    module = getattr(model.module, "_orig_mod", model.module)  # torch.compile: the eager module
    if isinstance(module, torch.jit.ScriptModule):
        return "not saved: a TorchScript module (save it with the torchscript step)"
    size = int(getattr(model, "size_bytes", 0) or 0)
    if size > MAX_SAVED_MODEL_BYTES:
        return f"not saved: the model is {size / 1024**3:.1f} GB (limit 2 GB)"
    t0 = time.perf_counter()
    try:
        ep = _export_step_module(model, module, inputs, seed)
        path = step_dir / "model.pt2"
        torch.export.save(ep, str(path))
    except Exception as exc:  # noqa: BLE001 - saving is a convenience; the step still succeeded
        log.debug("could not export the model of %s", step_dir.name, exc_info=True)
        text = str(exc).strip().splitlines()
        return f"not saved: torch.export failed: {type(exc).__name__}: {text[0] if text else ''}"[
            :300
        ]
    artifacts.append({"kind": "model", "path": str(path)})
    log.debug("saved %s in %.2f s", path, time.perf_counter() - t0)
    return path.name


def _export_step_module(model: Any, module: Any, inputs: dict[str, Any], seed: int) -> Any:
    """torch.export ``module`` with the input spec's symbolic dims dynamic (static if that
    fails). The program takes the spec's inputs: the model's input casts (fp16/bf16) are
    exported inside it, so it runs on the same inputs as the original."""
    import torch

    from accel.models.inputs import is_floating, torch_dtype
    from accel.models.shapes import example_for_export, export_dim_objects, ranged_dims

    spec = model.input_spec
    names = list(inputs)
    casts = [
        torch_dtype(c) if c and is_floating(c) else None
        for c in (model.input_casts.get(n) for n in names)
    ]

    def cast_inputs(_m: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            a.to(c)
            if c is not None and isinstance(a, torch.Tensor) and a.is_floating_point()
            else a
            for a, c in zip(args, casts, strict=False)
        )

    dims = ranged_dims(spec)
    example = example_for_export(spec, inputs, dims, seed) if dims else dict(inputs)
    feed = model.replace(input_casts={}).prepare_inputs(example)  # device, memory format
    shapes = export_dim_objects(spec, dims)
    was_training = module.training
    handle = module.register_forward_pre_hook(cast_inputs) if any(casts) else None
    try:
        module.eval()
        try:
            return torch.export.export(
                module, tuple(feed.values()), dynamic_shapes=shapes if dims else None, strict=False
            )
        except Exception:  # noqa: BLE001 - e.g. a dim the model fixes: export static shapes
            if not dims:
                raise
            feed = model.replace(input_casts={}).prepare_inputs(inputs)
            return torch.export.export(module, tuple(feed.values()), strict=False)
    finally:
        if handle is not None:
            handle.remove()
        module.train(was_training)
