"""The torch handler: nn.Module, TorchScript and torch.export programs run eagerly."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.backends.base import Backend, BenchTarget, ScriptRuntime
from accel.errors import AccelError
from accel.layer_patterns import module_layers
from accel.models.calls import bind_inputs, call_module

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)


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


class TorchBackend(Backend):
    kind = "torch"
    label = "PyTorch"
    file_suffixes = (".pt2", ".pt", ".ts", ".pth", ".jit")
    libraries = ("torch",)
    capabilities = frozenset({"graph", "profile", "layer_parity", "export_onnx"})
    profile_rows = "modules"
    saves_step_models = True

    def finish_load(self, model: LoadedModel, device: str, validate: bool) -> None:
        from accel.models.sources import _check_device, _fill_torch_stats, _validate_forward

        _fill_torch_stats(model)
        if device != "cpu":
            _check_device(device)
            model.module.to(device)
            model.device = device
        if validate:
            _validate_forward(model)

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

    def bench_target(
        self, model: LoadedModel, inputs: Any, device: str, threads: int | None
    ) -> BenchTarget:
        from accel.bench import _as_positional, _module_size_bytes, _move_inputs

        module = model.module
        if module is None:
            raise AccelError(f"{model.source}: a torch-kind model without a module")
        # Duck-typed models (anything with kind/module/input_casts) are timed too.
        casts = getattr(model, "input_casts", None)
        prepare = getattr(model, "prepare_inputs", None)
        if callable(prepare) and isinstance(inputs, Mapping):
            inputs, casts = prepare(inputs), None
        moved = _move_inputs(inputs, device, casts)
        args, kwargs = (
            bind_inputs(module, moved)
            if isinstance(moved, Mapping)
            else (_as_positional(moved), {})
        )
        size = getattr(model, "size_bytes", None) or _module_size_bytes(module)
        return BenchTarget(
            lambda: module(*args, **kwargs),
            lambda: module(*args, **kwargs),
            "torch",
            size,
            uses_torch=True,
        )

    # -- insight -------------------------------------------------------------------------
    def profile(
        self,
        model: LoadedModel,
        inputs: Mapping[str, Any],
        *,
        iters: int,
        warmup: int,
        ops: bool,
        trace_path: str | Path | None,
        device: str,
        threads: int | None,
        progress: Callable[[float, str], None] | None,
        cancel: Callable[[], bool] | None,
    ) -> Any:
        import torch

        from accel.profile.torch_profile import profile_torch

        module = model.module
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
            prepared = self.prepare_inputs(target, inputs)
            args, kwargs = bind_inputs(module, prepared)
            # Events and memory stats refer to the current CUDA device: make it the model's.
            dev_ctx = (
                torch.cuda.device(torch.device(device))
                if device.startswith("cuda")
                else contextlib.nullcontext()
            )
            with torch_threads(threads), torch.inference_mode(), dev_ctx:
                return profile_torch(
                    module,
                    lambda: module(*args, **kwargs),
                    device=device,
                    iters=iters,
                    warmup=warmup,
                    ops=ops,
                    trace_path=trace_path,
                    progress=progress,
                    cancel=cancel,
                )
        finally:
            if moved:
                module.to(model.device)

    def graph(self, model: LoadedModel, inputs: Mapping[str, Any] | None, **kwargs: Any) -> Any:
        from accel.graph.from_torch import graph_from_torch

        return graph_from_torch(model, inputs, **kwargs)

    def layer_outputs(
        self, model: LoadedModel, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], set[str]]:
        from accel.graph.layer_parity import torch_model_layer_outputs

        return torch_model_layer_outputs(model, inputs)

    def netron_file(self, model: LoadedModel) -> Path | None:
        return None  # Netron shows torch models through an ONNX export (capability)

    def script_runtime(self) -> ScriptRuntime:
        return ScriptRuntime(
            run_branch=(
                "with torch.inference_mode():\n"
                "    return model(*[x.to(device) for x in feed.values()])"
            ),
            load=(
                "model = torch.export.load(str(model_file)).module()\n"
                "model = model.to(device)\n"
                'kind = "torch"'
            ),
        )

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
