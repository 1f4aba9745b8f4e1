"""LoadedModel: a model ready to run, whatever its source."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.models.inputs import InputSpec, is_floating, torch_dtype


@dataclass
class LoadedModel:
    """A torch module or an ONNX model plus what the studio needs to run and compare it.

    ``kind`` is "torch" (``module`` set) or "onnx" (``onnx_path`` set). ``input_casts``
    maps input names to dtypes applied to floating inputs before forward (an fp16
    model takes fp16 inputs while the recipe's inputs stay fp32).
    """

    source: str
    kind: str
    input_spec: InputSpec
    module: Any = None
    onnx_path: Path | None = None
    num_params: int = 0
    size_bytes: int = 0
    content_hash: str = ""
    device: str = "cpu"
    format: str = ""
    input_casts: dict[str, str] = field(default_factory=dict)
    providers: list[str] | None = None
    session_options: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    _session: Any = field(default=None, repr=False, compare=False)

    def replace(self, **changes: Any) -> LoadedModel:
        changes.setdefault("_session", None)
        return dataclasses.replace(self, **changes)

    def example_inputs(self, seed: int = 0, **dims: int) -> dict[str, Any]:
        return self.input_spec.sample(seed=seed, dims=dims or None)

    # -- running -------------------------------------------------------------------------
    def prepare_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Move inputs to the model's device and apply ``input_casts``."""
        import torch

        out = {}
        for name, x in inputs.items():
            if isinstance(x, torch.Tensor):
                if self.device != "cpu" and self.kind == "torch":
                    x = x.to(self.device)
                if x.dim() == 4 and self.metadata.get("channels_last_inputs"):
                    x = x.contiguous(memory_format=torch.channels_last)
                cast = self.input_casts.get(name)
                if cast and x.is_floating_point() and is_floating(cast):
                    x = x.to(torch_dtype(cast))
            out[name] = x
        return out

    def session(self) -> Any:
        """The ONNX Runtime session of an onnx-kind model (created once)."""
        if self.kind != "onnx":
            raise TypeError("session() is only for ONNX models")
        if self._session is None:
            from accel.models.onnx_io import create_session

            self._session = create_session(
                self.onnx_path, self.providers, self.session_options, self.device
            )
        return self._session

    def forward(self, inputs: Mapping[str, Any]) -> Any:
        """Run the model on a name->tensor mapping; ONNX outputs come back as torch tensors."""
        import torch

        inputs = self.prepare_inputs(inputs)
        if self.kind == "onnx":
            from accel.models.onnx_io import run_session

            io_binding = bool(self.session_options.get("io_binding", True))
            return run_session(self.session(), inputs, self.device, io_binding)
        with torch.inference_mode():
            return self.module(*inputs.values())

    def __call__(self, *args: Any) -> Any:
        """Positional call in the input spec's order (makes the model a plain callable)."""
        return self.forward(dict(zip(self.input_spec.names, args)))
