"""Running an ONNX Runtime GenAI model folder.

``GenaiDecoder`` generates (accel.generate's Decoder protocol) through ``og.Generator``: its
prefill starts a new Generator (a fresh KV cache) and appends the prompt, each step appends
the given tokens; both return the last position's logits. The KV cache lives inside the
Generator, sized from ``genai_config.json`` (layers x kv heads x head size, float32 on CPU).

``full_forward`` is the plain forward call (the runner's parity, the forward workload): the
folder's ``model.onnx`` in an ONNX Runtime session, fed the whole sequence and an empty past
(past_sequence_length 0), giving logits [batch, sequence, vocab].
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG = "genai_config.json"


def genai_config(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / CONFIG).read_text())


def decoder_section(folder: Path) -> dict[str, Any]:
    return dict(genai_config(folder)["model"]["decoder"])


def model_files(folder: Path) -> list[Path]:
    """The ONNX file and its external data (the weights), checked to lie in ``folder``."""
    folder = Path(folder).resolve()
    onnx_file = (folder / decoder_section(folder)["filename"]).resolve()
    files = [onnx_file, onnx_file.with_name(onnx_file.name + ".data")]
    files = [f for f in files if f.is_file()]
    if not files or any(f.parent != folder for f in files):
        from accel.errors import ModelLoadError

        raise ModelLoadError(f"{folder}: the GenAI model's files must lie in its folder")
    return files


def kv_bytes_per_token(folder: Path) -> int:
    """Bytes of cached keys and values per token and batch row (float32)."""
    d = decoder_section(folder)
    heads = int(d.get("num_key_value_heads") or d["num_attention_heads"])
    return int(d["num_hidden_layers"]) * 2 * heads * int(d["head_size"]) * 4


def og_model(folder: Path, threads: int | None) -> Any:
    """``og.Model`` of the folder on the CPU, on ``threads`` intra-op threads when given."""
    import onnxruntime_genai as og

    og.disable_telemetry_events()
    config = og.Config(str(folder))
    config.clear_providers()
    if threads:
        opts = {"intra_op_num_threads": int(threads), "inter_op_num_threads": 1}
        config.overlay(json.dumps({"model": {"decoder": {"session_options": opts}}}))
    return og.Model(config)


def _ids(x: Any) -> Any:
    import numpy as np

    x = x.detach().cpu().numpy() if hasattr(x, "detach") else x
    return np.ascontiguousarray(x, dtype=np.int64)


def full_forward(session: Any, folder: Path, inputs: dict[str, Any]) -> tuple:
    """The model on the whole sequence from an empty cache: (logits,) as a torch tensor."""
    import numpy as np
    import torch

    d = decoder_section(folder)
    ids = _ids(inputs.get("input_ids", next(iter(inputs.values()))))
    batch, n = ids.shape
    feed: dict[str, Any] = {"input_ids": ids, "attention_mask": np.ones((batch, n), np.int64)}
    names = {i.name: i for i in session.get_inputs()}
    heads = int(d.get("num_key_value_heads") or d["num_attention_heads"])
    empty = np.zeros((batch, heads, 0, int(d["head_size"])), dtype=np.float32)
    for name in names:
        if name.startswith("past_key_values."):
            feed[name] = empty
        elif name == "position_ids":
            feed[name] = np.tile(np.arange(n, dtype=np.int64), (batch, 1))
    logits = session.run(["logits"], feed)[0]
    return (torch.from_numpy(np.asarray(logits, dtype=np.float32)),)


class GenaiDecoder:
    """Generation through ``og.Generator`` (its KV cache held by ONNX Runtime GenAI)."""

    kv_cache = "stateful"

    def __init__(self, model: Any, per_token_bytes: int, max_len: int) -> None:
        self.model, self.per_token_bytes, self.max_len = model, per_token_bytes, max_len
        self._gen: Any = None
        self._pos = 0
        self._batch = 0

    def _logits(self) -> Any:
        import numpy as np
        import torch

        logits = np.asarray(self._gen.get_output("logits"), dtype=np.float32)
        return torch.from_numpy(np.ascontiguousarray(logits[:, -1, :]))

    def prefill(self, ids: Any) -> Any:
        import onnxruntime_genai as og

        ids = _ids(ids)
        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=self.max_len, batch_size=ids.shape[0], do_sample=False)
        self._gen = og.Generator(self.model, params)
        self._batch, self._pos = int(ids.shape[0]), int(ids.shape[1])
        self._gen.append_tokens(ids)
        return self._logits()

    def step(self, ids: Any) -> Any:
        ids = _ids(ids)
        if self._pos + ids.shape[1] > self.max_len:
            from accel.errors import AccelError

            raise AccelError(f"generation longer than the {self.max_len} tokens planned")
        self._gen.append_tokens(ids)
        self._pos += int(ids.shape[1])
        return self._logits()

    def kv_cache_bytes(self) -> int:
        """The cache's size after the tokens fed so far (from the config's shapes)."""
        return int(self.per_token_bytes * self._pos * self._batch)
