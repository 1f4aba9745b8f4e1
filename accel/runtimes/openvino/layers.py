"""Per-layer taps of OpenVINO models for per-layer parity: the last floating output of each
torch module's ops, exposed as extra model outputs (the compiled model keeps the model's
precision hint)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel.runtimes.openvino.ir import compile_config, module_path_of, read_ir, to_numpy_feed
from accel.runtimes.openvino.known_crashes import safe_config


def _last_ports(ov_model: Any) -> dict[str, Any]:
    """Module path -> the output port of its last floating op, in completion order."""
    from accel.graph.model import ancestors

    last: dict[str, Any] = {}
    for op in ov_model.get_ordered_ops():
        if op.get_type_name() in ("Constant", "Parameter", "Result") or not op.outputs():
            continue
        out = op.output(0)
        if not out.get_element_type().is_real() or op.get_type_name() == "FakeQuantize":
            continue
        mp = module_path_of(op.get_friendly_name())
        if not mp:
            continue
        for p in ancestors(mp)[1:]:
            last.pop(p, None)  # re-insert: order becomes completion order
            last[p] = out
    return last


def ov_layer_outputs(
    runtime_file: Any, options: Mapping[str, Any], fed: Mapping[str, Any]
) -> dict[str, Any]:
    """Per-module outputs of the IR ``runtime_file`` compiled with ``options`` on ``fed``."""
    import numpy as np
    import openvino as ov
    import torch

    ov_model = read_ir(runtime_file)
    last = _last_ports(ov_model)
    if not last:
        return {}
    existing = len(ov_model.outputs)
    ports = list(dict.fromkeys(last.values()))
    ov_model.add_outputs(ports)
    device = str(options.get("device", "CPU")).upper()
    config = safe_config(ov_model, compile_config(options), options, device)
    compiled = ov.Core().compile_model(ov_model, device, config)
    result = compiled.create_infer_request().infer(to_numpy_feed(compiled, fed))
    values = [torch.from_numpy(np.array(result[o])) for o in compiled.outputs[existing:]]
    by_port = dict(zip(ports, values))
    return {p: by_port[port] for p, port in last.items() if port in by_port}
