"""A stateful OpenVINO LM generating through OpenVINO GenAI's ``LLMPipeline``.

The pipeline reads a folder (``openvino_model.xml`` / ``.bin``); ``pipeline_for`` lays one out
with links to the step's IR (copies where links fail), builds the pipeline from it without a
tokenizer (prompts are token ids: ``TokenizedInputs``) and removes the folder. Generation is
greedy and runs exactly ``new_tokens`` tokens: ``min_new_tokens = max_new_tokens`` and
``ignore_eos``. ``PipelineDecoder.generate_timed`` reads the caller's clock before the call and
in the pipeline's streamer as each token arrives, which is what accel.generate's timing uses.

The pipeline returns no logits, so teacher-forced parity (``prefill`` / ``step``) runs the same
IR through the infer request (``StatefulDecoder``): the same weights and KV-cache precision,
not the same code path; the pipeline's own tokens are checked against it by the tests.

``continuous_pipeline_for`` builds the same IR's ``ContinuousBatchingPipeline`` (paged
attention, requests stepped together) for serving (``lm_serving``). Both compile through
``known_crashes.safe_config``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PIPELINES = ("infer_request", "genai")
# ATTENTION_BACKEND: SDPA keeps the IR's own attention and state; PA (paged attention) has the
# pipeline rewrite the IR into its continuous-batching form with a block KV cache.
ATTENTION_BACKENDS = {"sdpa": "SDPA", "paged": "PA"}
# Any valid id: generation ignores it (ignore_eos), but the pipeline refuses -1.
EOS_PLACEHOLDER = 0
PAGED_CACHE_GB = 1  # the paged KV cache's block pool
PAGED_MAX_BATCHED_TOKENS = 1 << 20


def pipeline_unavailable() -> str | None:
    """Why OpenVINO GenAI cannot run here (None: it can)."""
    import importlib.util

    if importlib.util.find_spec("openvino_genai") is None:
        return (
            "OpenVINO GenAI is not installed (pip install openvino-genai matching the installed "
            "openvino's version); use pipeline: infer_request"
        )
    return None


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _pipeline_props(xml: Path, options: dict[str, Any]) -> dict[str, Any]:
    """The compile properties of the IR ``xml``: the step's options through the known-crash
    check (``safe_config``), as every compile of the studio goes."""
    from accel.runtimes.openvino.ir import compile_config, read_ir
    from accel.runtimes.openvino.known_crashes import safe_config

    return safe_config(read_ir(xml), compile_config(options), options, "CPU")


@contextlib.contextmanager
def _model_folder(xml: Path) -> Iterator[Path]:
    """A folder laid out as OpenVINO GenAI reads a model (``openvino_model.xml`` / ``.bin``),
    linking the step's IR; removed after the block (the pipeline holds the compiled model)."""
    from accel.runtimes.openvino.ir import weights_file

    folder = Path(tempfile.mkdtemp(prefix="accel-ov-genai-"))
    try:
        _link_or_copy(Path(xml), folder / "openvino_model.xml")
        _link_or_copy(weights_file(xml), folder / "openvino_model.bin")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def pipeline_for(xml: Path, options: dict[str, Any]) -> Any:
    """``openvino_genai.LLMPipeline`` of the IR ``xml`` on the CPU with the step's options."""
    import openvino_genai as ov_genai

    props = _pipeline_props(xml, options)
    backend = ATTENTION_BACKENDS[str(options.get("attention", "sdpa"))]
    props["ATTENTION_BACKEND"] = backend
    if backend == "PA":
        props["scheduler_config"] = paged_scheduler()
    with _model_folder(xml) as folder:
        return ov_genai.LLMPipeline(str(folder), "CPU", **props)


def continuous_pipeline_for(xml: Path, options: dict[str, Any]) -> Any:
    """``openvino_genai.ContinuousBatchingPipeline`` of the IR ``xml`` on the CPU: the same
    compile properties as ``pipeline_for`` (paged attention is what it runs), requests added
    with ``add_request`` and advanced together by ``step()``."""
    import openvino_genai as ov_genai

    props = _pipeline_props(xml, options)
    with _model_folder(xml) as folder:
        return ov_genai.ContinuousBatchingPipeline(str(folder), paged_scheduler(), "CPU", props)


def paged_scheduler() -> Any:
    """The pipeline's latency-oriented paged-attention scheduler without prefix caching: its
    default keeps the blocks of earlier prompts, so a repeated prompt (every timed round)
    would skip its prefill and the TTFT would time a cache hit."""
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.enable_prefix_caching = False
    sc.cache_size = PAGED_CACHE_GB
    sc.max_num_batched_tokens = PAGED_MAX_BATCHED_TOKENS  # the prompt's prefill in one chunk
    return sc


def greedy_config(pipe: Any, new_tokens: int) -> Any:
    """Greedy, exactly ``new_tokens`` new tokens, no stop token (``pipe``: an LLMPipeline or
    a ContinuousBatchingPipeline)."""
    get = getattr(pipe, "get_generation_config", None) or pipe.get_config
    cfg = get()
    cfg.do_sample = False
    cfg.num_beams = 1
    cfg.max_new_tokens = int(new_tokens)
    cfg.min_new_tokens = int(new_tokens)
    cfg.ignore_eos = True
    cfg.eos_token_id = EOS_PLACEHOLDER
    cfg.stop_token_ids = {EOS_PLACEHOLDER}
    return cfg


class PipelineDecoder:
    """Generation through LLMPipeline (``generate_timed``); teacher-forced calls through
    ``teacher`` (a StatefulDecoder of the same IR)."""

    kv_cache = "stateful"

    def __init__(self, pipe: Any, teacher: Any) -> None:
        self.pipe, self.teacher = pipe, teacher
        self._fed = 0

    def generate_timed(self, prompt: Any, new_tokens: int, clock: Any) -> tuple[float, list, Any]:
        """(clock before the call, clock at each new token, tokens [1, new_tokens])."""
        import numpy as np
        import openvino as ov
        import openvino_genai as ov_genai
        import torch

        from accel.errors import AccelError

        ids = prompt.detach().cpu().numpy() if hasattr(prompt, "detach") else np.asarray(prompt)
        if ids.shape[0] != 1:
            raise AccelError(
                "pipeline genai streams one sequence (batch 1); OpenVINO GenAI's LLMPipeline "
                "does not stream a batch. Set benchmark.batch: 1 or pipeline: infer_request"
            )
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        times: list[float] = []

        class Clocked(ov_genai.StreamerBase):
            def write(self, token: Any) -> Any:
                n = len(token) if isinstance(token, list) else 1
                times.extend([clock()] * n)
                return ov_genai.StreamingStatus.RUNNING

            def end(self) -> None:
                pass

        inputs = ov_genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
        cfg = greedy_config(self.pipe, new_tokens)
        start = clock()
        result = self.pipe.generate(inputs, cfg, Clocked())
        tokens = torch.tensor([list(result.tokens[0])], dtype=torch.long)
        if tokens.shape[1] != new_tokens or len(times) != new_tokens:
            raise AccelError(
                f"OpenVINO GenAI generated {tokens.shape[1]} tokens ({len(times)} streamed), "
                f"not the {new_tokens} asked for"
            )
        self._fed = ids.shape[1] + new_tokens - 1
        return start, times, tokens

    def prefill(self, ids: Any) -> Any:
        return self.teacher.prefill(ids)

    def step(self, ids: Any) -> Any:
        return self.teacher.step(ids)

    def kv_cache_bytes(self) -> int:
        """The cache the last call held: the pipeline's (prompt + new - 1 tokens) or the
        teacher's, from the IR's shapes and the KV-cache precision."""
        return max(int(self.teacher.per_token_bytes * self._fed), self.teacher.kv_cache_bytes())
