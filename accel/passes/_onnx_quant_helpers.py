"""Plain-library helpers shared by the ONNX quantization passes and their exported scripts.

``to_script`` copies the source text of these functions into the exported script, so the
studio and the script run the same code. Keep them self-contained: only numpy, onnx and
onnxruntime, imported inside the functions (``BatchCalibrationReader`` needs
``from onnxruntime.quantization import CalibrationDataReader`` at the top of the script).
"""

from __future__ import annotations

from onnxruntime.quantization import CalibrationDataReader


def onnx_nodes_matching(model_path, patterns):
    """Names of the nodes whose name matches any glob pattern, and the patterns that matched none."""
    import fnmatch

    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    names = [n.name for n in graph.node if n.name]
    matched, unmatched = [], []
    for pattern in patterns:
        hits = [n for n in names if n == pattern or fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            unmatched.append(pattern)
        matched += [n for n in hits if n not in matched]
    return matched, unmatched


def onnx_op_types(model_path):
    """Op types present in the main graph of an ONNX file."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    return sorted({n.op_type for n in graph.node})


class BatchCalibrationReader(CalibrationDataReader):
    """Feeds calibration batches (dicts of torch tensors or arrays) to ORT's calibrator."""

    def __init__(self, model_path, batches, on_batch=None):
        import onnx

        graph = onnx.load(str(model_path), load_external_data=False).graph
        initializers = {i.name for i in graph.initializer}
        self.dtypes = {
            i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
            for i in graph.input
            if i.name not in initializers
        }
        self.batches = list(batches)
        self.on_batch = on_batch
        self.index = 0

    def get_next(self):
        import numpy as np

        if self.index >= len(self.batches):
            return None
        batch = self.batches[self.index]
        self.index += 1
        if self.on_batch is not None:
            self.on_batch(self.index, len(self.batches))
        feed = {}
        for name, dtype in self.dtypes.items():
            x = batch[name]
            x = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
            feed[name] = x.astype(dtype, copy=False)
        return feed

    def rewind(self):
        self.index = 0


def quantized_op_counts(model_path):
    """Op type -> count of the quantization-related nodes in an ONNX file."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    counts = {}
    for n in graph.node:
        t = n.op_type
        if (
            "Quant" in t
            or "quantize" in t
            or "Integer" in t
            or t.startswith("QLinear")
            or t.startswith("QGemm")
        ):
            counts[t] = counts.get(t, 0) + 1
    return counts
