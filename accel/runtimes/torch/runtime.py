"""The torch runtime: nn.Module, TorchScript and torch.export programs run eagerly."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.errors import AccelError
from accel.layer_patterns import module_layers
from accel.models import forms as model_forms
from accel.models.calls import bind_inputs, call_module
from accel.models.runtime import (
    GenerationWork,
    ProfileRequest,
    ScriptRuntime,
    TimingTarget,
    register_runtime,
)
from accel.runtimes.base import RuntimeBase

if TYPE_CHECKING:
    from accel.graph.model import Graph
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel
    from accel.profile.generation import GenerationLayers
    from accel.profile.results import ModelProfile
    from accel.runtimes.torch.serving import ServedTorchScript

log = logging.getLogger(__name__)

_EXPORTED = ".pt2"  # a torch.export archive; the other suffixes are torch.save / TorchScript


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    import torch

    if not threads:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(old)


@register_runtime
class TorchRuntime(RuntimeBase):
    kind = "torch"
    label = "PyTorch"
    file_suffixes = (".pt2", ".ts", ".pt", ".pth", ".jit")
    libraries = ("torch",)
    capabilities = frozenset({"graph", "profile", "layer_parity", "export_onnx"})
    profile_rows = "modules"
    saves_step_models = True
    artifact_kinds = frozenset({"torchscript"})
    forms = model_forms.TORCH_FORMS  # eager first: a loaded module's form

    # -- loading and saving --------------------------------------------------------------
    def load(
        self, path: Path, spec: InputSpec | None, source: str, *, trust_pickle: bool = False
    ) -> LoadedModel:
        from accel.models.sources import load_exported, load_torch_file

        load = load_exported if Path(path).suffix.lower() == _EXPORTED else load_torch_file
        return load(path, spec, source, trust_pickle)

    def file_form(self, path: Path) -> str | None:
        if Path(path).suffix.lower() == _EXPORTED:
            return model_forms.EXPORTED
        return (
            model_forms.SCRIPTED if model_forms.is_torchscript_archive(path) else model_forms.EAGER
        )

    def finish_load(self, model: LoadedModel, device: str, validate: bool) -> None:
        from accel.runtimes.torch.loading import check_device, fill_torch_stats, validate_forward

        fill_torch_stats(model)
        if device != "cpu":
            check_device(device)
            model.module.to(device)
            model.device = device
        if validate:
            validate_forward(model)

    def copy(self, model: LoadedModel) -> LoadedModel:
        import copy

        try:
            return model.replace(module=copy.deepcopy(model.module), metadata=dict(model.metadata))
        except Exception:  # noqa: BLE001 - some scripted modules cannot be copied; reload instead
            from accel.models import load_model

            return load_model(model.source, model.input_spec, device=model.device, validate=False)

    # -- running -------------------------------------------------------------------------
    def _move(self, model: LoadedModel, x: Any) -> Any:
        return x.to(model.device) if model.device != "cpu" else x

    def forward(self, model: LoadedModel, inputs: Mapping[str, Any]) -> Any:
        import torch

        fed = self.prepare_inputs(model, inputs)
        with torch.inference_mode():
            return call_module(model.module, fed)

    def timing_target(
        self, model: LoadedModel, inputs: Any, device: str, threads: int | None
    ) -> TimingTarget:
        from accel.runtimes.torch.timing import model_target

        return model_target(model, inputs, device)

    def native_timing_target(
        self, obj: Any, inputs: Any, device: str, threads: int | None
    ) -> TimingTarget | None:
        from accel.runtimes.torch.timing import module_target

        return module_target(obj, inputs, device)

    # -- insight -------------------------------------------------------------------------
    def profile(
        self, model: LoadedModel, inputs: Mapping[str, Any], request: ProfileRequest
    ) -> ModelProfile:
        import torch

        from accel.runtimes.torch.profile import profile_torch

        module, device = model.module, request.device
        if not isinstance(module, torch.nn.Module):
            raise AccelError(f"cannot profile {model.source}: it has no torch module to hook")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise AccelError(
                f"device {device!r} asked for, but CUDA is not available here; use --device cpu"
            )
        moved = device != model.device
        target = model.replace(device=device) if moved else model
        if moved:
            module.to(device)
        try:
            args, kwargs = bind_inputs(module, self.prepare_inputs(target, inputs))
            # Events and memory stats refer to the current CUDA device: make it the model's.
            dev_ctx = (
                torch.cuda.device(torch.device(device))
                if device.startswith("cuda")
                else contextlib.nullcontext()
            )
            with torch_threads(request.threads), torch.inference_mode(), dev_ctx:
                return profile_torch(
                    module,
                    lambda: module(*args, **kwargs),
                    device=device,
                    iters=request.iters,
                    warmup=request.warmup,
                    ops=request.ops,
                    trace_path=request.trace_path,
                    progress=request.progress,
                    cancel=request.cancel,
                )
        finally:
            if moved:
                module.to(model.device)

    def profile_generation(
        self, model: LoadedModel, work: GenerationWork, request: ProfileRequest
    ) -> GenerationLayers:
        import torch

        from accel.runtimes.torch.generation_profile import profile_generation_torch

        module = model.module
        if not isinstance(module, torch.nn.Module):
            raise AccelError(f"cannot profile {model.source}: it has no torch module to hook")
        with torch_threads(request.threads):
            return profile_generation_torch(
                module,
                work,
                device=str(model.device or "cpu"),
                rounds=request.iters,
                warmup=request.warmup,
                progress=request.progress,
                cancel=request.cancel,
            )

    def graph(self, model: LoadedModel, inputs: Mapping[str, Any] | None, **kwargs: Any) -> Graph:
        from accel.runtimes.torch.graph import graph_from_torch

        return graph_from_torch(model, inputs, **kwargs)

    def layer_outputs(
        self, model: LoadedModel, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], set[str]]:
        from accel.runtimes.torch.layers import torch_model_layer_outputs

        return torch_model_layer_outputs(model, inputs)

    def layer_notes(self, model: Any) -> list[str]:
        """Why per-layer parity sees less of ``model`` than its layers (or nothing)."""
        from accel.runtimes.torch.layers import is_script

        notes = []
        if is_script(model):
            notes.append(
                "is TorchScript: its layers cannot be hooked; compare the eager model or its "
                "ONNX export instead"
            )
        if hasattr(getattr(model, "module", model), "_orig_mod"):
            notes.append("is torch.compile'd: its layers run eagerly here")
        return notes

    def adopt(self, obj: Any, inputs: Mapping[str, Any]) -> LoadedModel | None:
        """A LoadedModel around a bare ``nn.Module`` whose input spec is read from the
        sample ``inputs`` (None for anything else)."""
        import sys

        torch = sys.modules.get("torch")
        if torch is None or not isinstance(obj, torch.nn.Module):
            return None
        from accel.models.inputs import InputSpec, TensorSpec
        from accel.models.loaded import LoadedModel

        spec = InputSpec(
            tuple(
                TensorSpec(name, tuple(x.shape), str(x.dtype).removeprefix("torch."))
                for name, x in inputs.items()
            )
        )
        return LoadedModel(source=type(obj).__name__, kind=self.kind, input_spec=spec, module=obj)

    def netron_file(self, model: LoadedModel) -> Path | None:
        return None  # Netron shows torch models through an ONNX export (capability)

    def info(self, model: LoadedModel) -> dict[str, Any]:
        out: dict[str, Any] = {"class_name": type(model.module).__name__ if model.module else ""}
        if model.module is not None:
            dtypes: dict[str, int] = {}
            for p in model.module.parameters():
                key = str(p.dtype).removeprefix("torch.")
                dtypes[key] = dtypes.get(key, 0) + p.numel()
            out["param_dtypes"] = dtypes
            # (module name, type name) of its layers: editors check layer patterns with them
            # (accel.plan.step_problems) without loading the model again.
            out["layers"] = [list(pair) for pair in module_layers(model.module)]
        return out

    # -- scripts and serving ---------------------------------------------------------------
    def script(self) -> ScriptRuntime:
        scripted = (
            "model = torch.jit.load(str(model_file), map_location='cpu').eval()\nkind = \"torch\""
        )
        loads = {s: scripted for s in self.file_suffixes if s != _EXPORTED}
        loads[_EXPORTED] = 'model = torch.export.load(str(model_file)).module()\nkind = "torch"'
        return ScriptRuntime(
            run_branch=(
                "with torch.inference_mode():\n"
                "    return model(*[x.to(device) for x in feed.values()])"
            ),
            loads=loads,
        )

    def serve(self, path: Path, device: str, threads: int | None) -> ServedTorchScript:
        from accel.runtimes.torch.serving import ServedTorchScript

        return ServedTorchScript(path)
