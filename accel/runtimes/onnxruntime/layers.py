"""Per-layer taps of ONNX models for per-layer parity (``accel.graph.layer_parity``): the
outputs of the last node of every module namespace (``/layer1/conv/Conv`` -> ``layer1.conv``)
added as extra graph outputs of a copy of the model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _feed(sess: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Numpy inputs by the session's names (else by position), in its float types."""
    import numpy as np
    import torch

    feed = {}
    values = list(inputs.items())
    for i, meta in enumerate(sess.get_inputs()):
        x = inputs[meta.name] if meta.name in inputs else values[i][1]
        x = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        if meta.type == "tensor(float16)":
            x = x.astype(np.float16)
        elif meta.type == "tensor(float)" and x.dtype != np.float32 and x.dtype.kind == "f":
            x = x.astype(np.float32)
        feed[meta.name] = x
    return feed


def onnx_layer_outputs(model: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Outputs of every module namespace of an ONNX model (last node of each), in node order."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    from accel.graph.model import ancestors
    from accel.runtimes.onnxruntime.graph import module_path_of

    path = Path(getattr(model, "onnx_path", None) or model)
    proto = onnx.load(str(path))
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # shapes only help declare the extra outputs
        inferred = proto
    vinfo = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    # Floating types: a quantized model's (Dynamic)QuantizeLinear outputs integers, the
    # layer's value is the last floating tensor of its namespace.
    floating = {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.BFLOAT16,
        onnx.TensorProto.DOUBLE,
    }
    last: dict[str, str] = {}  # module path -> tensor name of its last node's first output
    for node in proto.graph.node:
        if not node.output or not node.output[0] or node.op_type == "Constant":
            continue
        vi = vinfo.get(node.output[0])
        if vi is not None and vi.type.tensor_type.elem_type not in (0, *floating):
            continue
        mp = module_path_of(node)
        for p in ancestors(mp)[1:]:
            last.pop(p, None)  # re-insert: dict order becomes completion order
            last[p] = node.output[0]
    existing = {o.name for o in proto.graph.output}
    for tname in dict.fromkeys(last.values()):
        if tname in existing:
            continue
        vi = vinfo.get(tname)
        proto.graph.output.append(vi if vi is not None else onnx.ValueInfoProto(name=tname))
        existing.add(tname)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # Graph optimizations could fuse away the very tensors we asked for.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    results = dict(zip(names, sess.run(None, _feed(sess, inputs))))
    return {p: torch.from_numpy(np.asarray(results[t])) for p, t in last.items() if t in results}
