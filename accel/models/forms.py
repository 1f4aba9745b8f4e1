"""Model forms: what a step receives and produces, finer than the model kind.

A torch model is ``eager`` (a Python nn.Module), ``compiled`` (torch.compile), ``scripted``
(TorchScript), ``exported`` (a torch.export program run as a module) or ``cuda_graph`` (a
captured CUDA graph replayed). Any other kind (``onnx``, and the other runtimes of accel.runtimes)
is its own form, plus the forms its runtime declares (``Runtime.form_info``: OpenVINO's
``openvino_stateful``, an LM whose KV cache lives in the infer request). Passes declare the
forms they accept and produce (``accel.passes.Requirements``); ``accel.plan`` checks a recipe's step order with them
before any model is loaded, and ``Pass.check_requirements`` checks the loaded model."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from accel.models.corpus import CORPUS_PREFIXES
from accel.models.runtime import get_runtime, runtime_for_file, runtimes
from accel.models.runtime import kinds as known_kinds

EAGER = "eager"
COMPILED = "compiled"
SCRIPTED = "scripted"
EXPORTED = "exported"
CUDA_GRAPH = "cuda_graph"
ONNX = "onnx"

TORCH_FORMS = (EAGER, COMPILED, SCRIPTED, EXPORTED, CUDA_GRAPH)

_DESCRIPTIONS = {
    EAGER: "a plain (eager) torch module",
    COMPILED: "a torch.compile'd module",
    SCRIPTED: "a TorchScript module",
    EXPORTED: "a torch.export program",
    CUDA_GRAPH: "a captured CUDA graph",
    ONNX: "an ONNX model",
}
# The step that turns a torch model into each form (for "move this step before ...").
_MADE_BY = {
    COMPILED: "compile",
    SCRIPTED: "torchscript",
    EXPORTED: "torch_export",
    CUDA_GRAPH: "cuda_graphs",
    ONNX: "export_onnx",
}


def kind_of(form: str) -> str:
    """The model kind of a form (its runtime's; ``torch`` for the torch forms)."""
    return next((r.kind for r in runtimes() if form in r.forms), form)


def forms_of(kinds: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """All forms of the given model kinds."""
    out: list[str] = []
    for k in kinds:
        out.extend(get_runtime(k).forms if k in known_kinds() else (k,))
    return tuple(out)


def _runtime_form_info(form: str) -> tuple[str, str | None] | None:
    """(description, maker) of a form a runtime declares beyond its kind (Runtime.form_info)."""
    return next((r.form_info[form] for r in runtimes() if form in r.form_info), None)


def describe(form: str) -> str:
    if form in _DESCRIPTIONS:
        return _DESCRIPTIONS[form]
    info = _runtime_form_info(form)
    return info[0] if info else f"a {form} model"


def made_by(form: str) -> str | None:
    """The pass that usually makes ``form`` (None: the source does)."""
    if form in _MADE_BY:
        return _MADE_BY[form]
    info = _runtime_form_info(form)
    return info[1] if info else None


def default_form(kind: str) -> str:
    """The form of a freshly loaded model of ``kind`` (its runtime's first form: torch:
    eager; others: the kind)."""
    return get_runtime(kind).forms[0] if kind in known_kinds() else kind


def model_form(model: Any) -> str:
    """The form of a LoadedModel (cheap: type and metadata checks, no forward)."""
    kind = getattr(model, "kind", "torch")
    if getattr(model, "module", None) is None:  # runtime files: their runtime tells
        return get_runtime(kind).model_form(model) if kind in known_kinds() else kind
    meta = getattr(model, "metadata", None) or {}
    if meta.get("cuda_graphs"):
        return CUDA_GRAPH
    module = getattr(model, "module", None)
    if type(module).__name__ == "OptimizedModule":
        return COMPILED
    if module is not None:
        import torch

        if isinstance(module, torch.jit.ScriptModule):
            return SCRIPTED
    if meta.get("exported_program"):
        return EXPORTED
    return EAGER


def source_form(source: str) -> str | None:
    """The form a model source loads as, read from the source string (and, for .pt files,
    the archive's file list) without loading it; None when that cannot be told (a file
    that is not there, a suffix another runtime loads)."""
    text = str(source).strip()
    target = text.split("@", 1)[0].split("(", 1)[0].strip()
    if target.startswith(("zoo:", *CORPUS_PREFIXES)):
        return EAGER
    path = Path(target)
    runtime = runtime_for_file(path) if ":" not in path.name else None
    if runtime is not None:  # a model file: its runtime tells its form
        return runtime.file_form(path) if path.is_file() else None  # loading says what is wrong
    if ":" in target:
        return EAGER  # file.py:factory / pkg.mod:factory
    return None


def is_torchscript_archive(path: Path) -> bool:
    """Whether ``path`` is a TorchScript zip (code/ or constants.pkl inside)."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError):
        return False
    return any(n.split("/", 1)[-1].startswith(("code/", "constants.pkl")) for n in names)
