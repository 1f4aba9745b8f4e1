"""A Hugging Face causal LM as a stateful OpenVINO IR: its KV cache lives in the infer
request's state, as optimum-intel exports it, built here with OpenVINO's own API.

1. ``flat_cache_lm`` wraps the LM in a module with explicit inputs (``input_ids``,
   ``attention_mask``, ``position_ids``, then one past key and one past value per layer,
   [batch, kv_heads, past, head_dim]) and outputs (``logits``, then the present keys and
   values): the transformers cache object is built from the flat tensors inside forward.
2. ``lm_to_openvino`` traces it with ``ov.convert_model`` (past 3, new 4 tokens: the graph
   of a prefill with a past, which covers both the prompt and the one-token decode step).
3. ``make_ir_stateful`` adds a ``beam_idx`` input (a Gather on every cache input, so the
   state can be reordered as OpenVINO GenAI's pipelines expect), turns each past/present
   pair into a ReadValue/Assign variable (``apply_make_stateful_transformation``) and gives
   each variable an empty initial value of the request's batch.

These functions use only torch, transformers, numpy and openvino (imported inside them), so
the exported script carries their source unchanged (``OpenVinoStatefulPass.to_script``).
"""

from __future__ import annotations

from typing import Any

TRACE_BATCH, TRACE_PAST, TRACE_NEW = 2, 3, 4


def kv_shape(config: Any) -> tuple[int, int, int]:
    """(layers, kv heads, head dim) of a decoder config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return int(config.num_hidden_layers), int(kv_heads), int(head_dim)


def flat_cache_lm(lm: Any, takes_positions: bool, cache_arg: str) -> Any:
    """``lm`` behind flat past key/value inputs and present outputs (see the docstring)."""
    import torch
    from transformers import DynamicCache

    class FlatCacheLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, *rest):  # noqa: ANN001
            position_ids, past = (rest[0], rest[1:]) if takes_positions else (None, rest)
            cache = DynamicCache(config=self.lm.config)
            for layer, k, v in zip(cache.layers, past[0::2], past[1::2], strict=True):
                layer.lazy_initialization(k, v)
                layer.keys, layer.values = k, v  # no concat with an empty tensor: traceable
            kwargs = {"position_ids": position_ids} if takes_positions else {}
            kwargs[cache_arg] = cache
            out = self.lm(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **kwargs
            )
            present = out.cache if "cache" in out else out.past_key_values
            return (
                out.logits,
                *[t for layer in present.layers for t in (layer.keys, layer.values)],
            )

    return FlatCacheLM().eval()


def lm_to_openvino(lm: Any) -> tuple[Any, list[str], list[str]]:
    """The traced IR with named inputs and outputs, and the past / present names."""
    import inspect
    import warnings

    import openvino as ov
    import torch

    layers, kv_heads, head_dim = kv_shape(lm.config)
    params = inspect.signature(lm.forward).parameters
    takes_positions = "position_ids" in params
    cache_arg = "cache" if "cache" in params else "past_key_values"
    dtype = next(lm.parameters()).dtype  # the cache in the weights' dtype (bf16 weights too)
    b, p, n = TRACE_BATCH, TRACE_PAST, TRACE_NEW
    gen = torch.Generator().manual_seed(0)
    example = {
        "input_ids": torch.randint(0, int(lm.config.vocab_size), (b, n), generator=gen),
        "attention_mask": torch.ones(b, p + n, dtype=torch.int64),
    }
    if takes_positions:
        example["position_ids"] = torch.arange(p, p + n).expand(b, n).contiguous()
    past_names, present_names = [], []
    for i in range(layers):
        for part in ("key", "value"):
            past_names.append(f"past_key_values.{i}.{part}")
            present_names.append(f"present.{i}.{part}")
            example[past_names[-1]] = torch.randn(b, kv_heads, p, head_dim, generator=gen).to(dtype)
    shapes = [ov.PartialShape([-1, -1])] * (len(example) - len(past_names))
    shapes += [ov.PartialShape([-1, kv_heads, -1, head_dim])] * len(past_names)
    with torch.no_grad(), warnings.catch_warnings():
        # the trace fixes Python-side checks (mask padding, query length): expected here
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        wrapped = flat_cache_lm(lm, takes_positions, cache_arg)
        ov_model = ov.convert_model(wrapped, example_input=tuple(example.values()), input=shapes)
    for port, name in zip(ov_model.inputs, example, strict=True):
        port.get_tensor().set_names({name})
    for port, name in zip(ov_model.outputs, ["logits", *present_names], strict=True):
        port.get_tensor().set_names({name})
    return ov_model, past_names, present_names


def make_ir_stateful(ov_model: Any, past_names: list[str], present_names: list[str]) -> Any:
    """Past inputs and present outputs become state variables; adds ``beam_idx``."""
    import numpy as np
    import openvino as ov
    from openvino import opset13
    from openvino._offline_transformations import apply_make_stateful_transformation

    beam_idx = opset13.parameter(name="beam_idx", dtype=ov.Type.i32, shape=ov.PartialShape([-1]))
    beam_idx.output(0).get_tensor().add_names({"beam_idx"})
    ov_model.add_parameters([beam_idx])
    for name in past_names:  # state reordered by beam_idx along the batch
        port = ov_model.input(name)
        consumers = port.get_target_inputs()
        gather = opset13.gather(port, beam_idx, opset13.constant(0))
        for consumer in consumers:
            consumer.replace_source_output(gather.output(0))
    ov_model.validate_nodes_and_infer_types()
    apply_make_stateful_transformation(ov_model, dict(zip(past_names, present_names, strict=True)))
    # Each variable starts empty: [batch of input_ids, kv_heads, 0, head_dim].
    ids_shape = opset13.shape_of(ov_model.input("input_ids"), output_type="i64")
    batch = opset13.gather(ids_shape, opset13.constant([0]), opset13.constant(0))
    for op in ov_model.get_ops():
        if op.get_type_name() == "ReadValue":
            dims = [d.min_length for d in op.get_output_partial_shape(0)]
            parts = [batch] + [opset13.constant(np.array([d], dtype=np.int64)) for d in dims[1:]]
            zero = opset13.constant(0.0, dtype=op.get_output_element_type(0))
            op.set_arguments([opset13.broadcast(zero, opset13.concat(parts, axis=0))])
    ov_model.validate_nodes_and_infer_types()
    return ov_model
