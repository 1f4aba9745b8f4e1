"""LoadedModel: a model ready to run, whatever its source."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.models.inputs import InputSpec
from accel.models.runtime import Runtime, get_runtime


@dataclass
class LoadedModel:
    """A model of any kind plus what the studio needs to run and compare it.

    ``kind`` names its runtime (``accel.models.runtime``; the packages of
    ``accel/runtimes/``): "torch" (``module`` set), "onnx" (``onnx_path`` set), "tensorrt"
    (``onnx_path`` set, run by ONNX Runtime's TensorRT provider), or another runtime that
    runs a file (``runtime_file`` set: "openvino", the IR's .xml). Nothing here knows more
    of any kind: its runtime does. ``input_casts``
    maps input names to dtypes applied to floating inputs before forward (an fp16
    model takes fp16 inputs while the recipe's inputs stay fp32); ``channels_last_inputs``:
    4-D inputs are fed in the channels_last memory format (set by the ``channels_last``
    pass, read by the runtime that feeds them and by the passes it matters to).
    """

    source: str
    kind: str
    input_spec: InputSpec
    module: Any = None
    onnx_path: Path | None = None
    runtime_file: Path | None = None  # the file another runtime runs (an OpenVINO IR)
    num_params: int = 0
    size_bytes: int = 0
    content_hash: str = ""
    device: str = "cpu"
    format: str = ""
    input_casts: dict[str, str] = field(default_factory=dict)
    channels_last_inputs: bool = False
    providers: list[str] | None = None
    session_options: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    _session: Any = field(default=None, repr=False, compare=False)

    def replace(self, **changes: Any) -> LoadedModel:
        changes.setdefault("_session", None)
        return dataclasses.replace(self, **changes)

    def example_inputs(self, seed: int = 0, **dims: int) -> dict[str, Any]:
        return self.input_spec.sample(seed=seed, dims=dims or None)

    # -- running (the model kind's runtime does the work) ----------------------------------
    @property
    def runtime(self) -> Runtime[LoadedModel]:
        """The runtime of this model's kind."""
        return get_runtime(self.kind)

    def prepare_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Inputs as the runtime wants them: device moves and ``input_casts``."""
        return self.runtime.prepare_inputs(self, inputs)

    def session(self) -> Any:
        """The runtime object of a non-torch model (ORT session, OpenVINO compiled model),
        created once."""
        return self.runtime.session(self)

    def forward(self, inputs: Mapping[str, Any]) -> Any:
        """Run the model on a name->tensor mapping; non-torch outputs come back as torch
        tensors."""
        return self.runtime.forward(self, inputs)

    def __call__(self, *args: Any) -> Any:
        """Positional call in the input spec's order (makes the model a plain callable)."""
        return self.forward(dict(zip(self.input_spec.names, args)))
