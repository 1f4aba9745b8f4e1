"""Plain-library helpers shared by the ONNX quantization passes and their exported scripts.

``to_script`` copies the source text of these functions into the exported script, so the
studio and the script run the same code. Keep them self-contained: only numpy, onnx and
onnxruntime, imported inside the functions (``BatchCalibrationReader`` needs
``from onnxruntime.quantization import CalibrationDataReader`` at the top of the script).
"""

from __future__ import annotations

from onnxruntime.quantization import CalibrationDataReader

from accel.layer_patterns import layer_matches  # scripts get its source with these helpers


def index_computing_nodes(model_path):
    """Names of the nodes that compute the indices of a Gather (all their producers, up to
    the graph inputs): integer positions, often computed in float (T5's relative-position
    buckets take a log that is -inf at 0). Quantizing them breaks the indices, so static
    quantization keeps them in float."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    producer = {out: n for n in graph.node for out in n.output}
    found, todo = {}, []
    for n in graph.node:
        if n.op_type in ("Gather", "GatherElements", "GatherND") and len(n.input) > 1:
            todo.append(n.input[1])
    while todo:
        node = producer.get(todo.pop())
        if node is None or node.name in found:
            continue
        found[node.name] = None
        todo.extend(node.input)
    return [name for name in found if name]


def onnx_module_paths(graph):
    """Node name -> the torch module path it came from ("layer3.0.conv1"), "" when unknown.

    The dynamo exporter records the path in node metadata (pkg.torch.onnx.name_scopes); the
    TorchScript exporter encodes it in the node name ("/layer3/layer3.0/conv1/Conv").
    """
    import ast

    paths = {}
    for node in graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        path = ""
        if "pkg.torch.onnx.name_scopes" in meta:
            try:
                scopes = ast.literal_eval(meta["pkg.torch.onnx.name_scopes"])
                path = scopes[-2] if len(scopes) >= 2 else ""
            except (ValueError, SyntaxError):
                path = ""
        elif node.name.startswith("/"):
            for seg in node.name.split("/")[1:-1]:
                path = seg if not path or seg.startswith(path + ".") else f"{path}.{seg}"
        paths[node.name] = path
    return paths


def onnx_module_types(graph):
    """Node name -> class name of the torch module it came from ("Linear"), "" when unknown
    (the dynamo exporter records it in pkg.torch.onnx.class_hierarchy)."""
    import ast

    types = {}
    for node in graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        try:
            hierarchy = ast.literal_eval(meta.get("pkg.torch.onnx.class_hierarchy", "[]"))
        except (ValueError, SyntaxError):
            hierarchy = []
        types[node.name] = str(hierarchy[-2]).rsplit(".", 1)[-1] if len(hierarchy) >= 2 else ""
    return types


def onnx_nodes_matching(model_path, patterns, original_path=None):
    """Names of the nodes matching any pattern, and the patterns that matched none.

    A pattern matches a node's ONNX name as a glob ("/fc/Gemm", "node_linear") or the torch
    module it came from as layer_matches does ("fc", "layer3" also covers "layer3.0.conv1",
    "layer3.*", a type name "Linear" where the exporter recorded it). Module paths missing in
    model_path (graph optimizers drop node metadata) are looked up by node name in
    original_path, the file before pre-processing.
    """
    import fnmatch

    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    paths, types = onnx_module_paths(graph), onnx_module_types(graph)
    if original_path is not None:
        before_graph = onnx.load(str(original_path), load_external_data=False).graph
        before, before_types = onnx_module_paths(before_graph), onnx_module_types(before_graph)
        paths = {n: p or before.get(n, "") for n, p in paths.items()}
        types = {n: t or before_types.get(n, "") for n, t in types.items()}
    names = [n.name for n in graph.node if n.name]
    matched, unmatched = [], []
    for pattern in patterns:
        hits = [
            n
            for n in names
            if fnmatch.fnmatchcase(n, pattern) or layer_matches(pattern, paths[n], types[n])
        ]
        if not hits:
            unmatched.append(pattern)
        matched += [n for n in hits if n not in matched]
    return matched, unmatched


def onnx_op_types(model_path):
    """Op types present in the main graph of an ONNX file."""
    return sorted(onnx_op_histogram(model_path))


def onnx_op_histogram(model_path) -> dict[str, int]:
    """How many nodes of each op type the main graph of an ONNX file has."""
    import collections

    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    return dict(collections.Counter(n.op_type for n in graph.node))


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


def without_value_info(model_path, out_path, error):
    """``model_path`` saved at ``out_path`` without its intermediate shape annotations
    (``value_info``) when ``error`` is ONNX's shape inference disagreeing with them (the
    quantizer re-infers shapes of its rewritten graph; an exporter's annotations can contradict
    them: diffusers' UNet, 64 vs 256). None when the error is another or there are none."""
    import onnx

    if "InferenceError" not in type(error).__name__ and "ShapeInferenceError" not in str(error):
        return None
    proto = onnx.load(str(model_path))
    if not proto.graph.value_info:
        return None
    del proto.graph.value_info[:]
    # weights beside it: a model of any size fits (one protobuf holds at most 2 GB)
    data = out_path.with_name(out_path.name + ".data")
    onnx.save_model(
        proto,
        str(out_path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data.name,
    )
    return out_path
