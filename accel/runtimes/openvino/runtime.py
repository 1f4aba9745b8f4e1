"""The OpenVINO runtime: IR files (.xml + .bin) compiled by the OpenVINO runtime.

A model of this kind keeps its IR path in ``LoadedModel.runtime_file`` and how to compile it in
``session_options``: ``device`` (CPU / GPU / AUTO), ``precision`` (f32 / bf16 / f16, the
inference precision hint), ``performance_hint`` (latency / throughput), ``threads`` and
``streams``. Its session is the compiled model with one infer request.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.errors import AccelError, ModelLoadError
from accel.models.runtime import (
    GenerationWork,
    ProfileRequest,
    ScriptRuntime,
    TimingTarget,
    register_runtime,
)
from accel.runtimes.base import RuntimeBase
from accel.runtimes.openvino.ir import (
    compile_config,
    outputs_as_torch,
    ov_stats,
    read_ir,
    save_ir,
    spec_from_ov,
    to_numpy_feed,
    weights_file,
)
from accel.runtimes.openvino.stateful import STATEFUL_FORM, is_stateful_lm, lm_facts

if TYPE_CHECKING:
    from accel.graph.model import Graph
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel
    from accel.profile.generation import GenerationLayers
    from accel.profile.results import ModelProfile
    from accel.runtimes.openvino.serving import ServedIR

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=64)
def _ir_is_stateful(path: str, size: int, mtime_ns: int) -> bool | None:
    """Whether the IR XML at ``path`` has state variables and the stateful-LM inputs (None:
    unreadable); ``size`` and ``mtime_ns`` key the cache to one version of the file."""
    try:
        with open(path, "rb") as f:
            text = f.read(64 << 20)
    except OSError:
        return None
    return b'type="Assign"' in text and b"beam_idx" in text


@register_runtime
class OpenVinoRuntime(RuntimeBase):
    kind = "openvino"
    label = "OpenVINO"
    file_suffixes = (".xml",)
    libraries = ("openvino",)
    reached_by = "openvino"
    capabilities = frozenset({"graph", "profile", "layer_parity", "netron", "serve_lm"})
    artifact_kinds = frozenset({"openvino", "openvino_ir"})
    # Measured (bench round robin, 1 thread, AMD EPYC with AVX2 and no VNNI): a Llama-style
    # decoder's prefill ran 1.10-1.13x eager with NNCF int8 against 1.21-1.33x in f32, while
    # ONNX Runtime's int8 ran 2.1-2.5x; a ResNet-50's int8 convolutions still doubled f32.
    int8_matmul_needs_dot_products = True
    form_info = {
        STATEFUL_FORM: (
            "a stateful OpenVINO LM (its KV cache in the infer request)",
            "openvino_stateful",
        )
    }

    def model_form(self, model: LoadedModel) -> str:
        # loading a stateful IR (and the pass that makes one) records its LM facts
        return STATEFUL_FORM if "lm_config" in (model.metadata or {}) else self.kind

    def file_form(self, path: Path) -> str | None:
        """``openvino_stateful`` for an IR with state variables (Assign ops: read from the
        XML text, nothing compiled), else ``openvino``. The plan asks on every palette
        refresh: the answer is kept per file version (path, size, mtime)."""
        try:
            st = Path(path).stat()
        except OSError:
            return None
        stateful = _ir_is_stateful(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
        return None if stateful is None else STATEFUL_FORM if stateful else self.kind

    # -- loading and saving --------------------------------------------------------------
    def load(
        self, path: Path, spec: InputSpec | None, source: str, *, trust_pickle: bool = False
    ) -> LoadedModel:
        from accel.models.loaded import LoadedModel

        ov_model = read_ir(path)
        inferred = spec_from_ov(ov_model)
        if spec is None:
            spec = inferred
        elif len(spec.inputs) != len(inferred.inputs):
            raise ModelLoadError(
                f"input spec has {len(spec.inputs)} inputs, the OpenVINO model "
                f"{len(inferred.inputs)} ({inferred.names})"
            )
        weights, size, digest = ov_stats(ov_model, [Path(path), weights_file(path)])
        metadata: dict[str, Any] = {"param_dtypes": weights}
        if is_stateful_lm(ov_model):  # what generation needs of its config (vocab, context)
            metadata["lm_config"] = lm_facts(ov_model)
        return LoadedModel(
            source=source,
            kind=self.kind,
            input_spec=spec,
            runtime_file=Path(path),
            num_params=sum(weights.values()),
            size_bytes=size,
            content_hash=digest,
            format="openvino_ir",
            # f32 unless a step says otherwise: OpenVINO's CPU default is bf16 where the
            # CPU has AMX, which would change a loaded model's outputs silently.
            session_options={"device": "CPU", "precision": "f32", "performance_hint": "latency"},
            metadata=metadata,
        )

    def finish_load(self, model: LoadedModel, device: str, validate: bool) -> None:
        if str(device).startswith("cuda"):
            raise ModelLoadError(
                "OpenVINO models run on OpenVINO devices (CPU, GPU = Intel GPU); use device 'cpu'"
            )
        model.device = device

    def save(self, model: LoadedModel, path: Path) -> Path:
        path = Path(path).with_suffix(".xml")
        save_ir(read_ir(model.runtime_file), path)
        return path

    def model_file(self, model: LoadedModel) -> Path | None:
        return Path(model.runtime_file) if model.runtime_file else None

    def with_threads(self, model: LoadedModel, threads: int) -> LoadedModel:
        if model.session_options.get("threads") == threads:
            return model
        return model.replace(session_options={**model.session_options, "threads": threads})

    # -- running -------------------------------------------------------------------------
    def compile(self, model: LoadedModel, **overrides: Any) -> Any:
        """A fresh compiled model of ``model`` (``overrides`` change session_options)."""
        import openvino as ov

        from accel.runtimes.openvino.known_crashes import safe_config

        options = {**model.session_options, **overrides}
        ov_model, device = read_ir(model.runtime_file), str(options.get("device", "CPU")).upper()
        config = safe_config(ov_model, compile_config(options), options, device)
        return ov.Core().compile_model(ov_model, device, config)

    def session(self, model: LoadedModel) -> Any:
        if model._session is None:
            compiled = self.compile(model)
            model._session = (compiled, compiled.create_infer_request())
        return model._session

    def forward(self, model: LoadedModel, inputs: Mapping[str, Any]) -> Any:
        from accel.runtimes.openvino.stateful import full_forward, has_lm_inputs

        compiled, request = self.session(model)
        if has_lm_inputs(compiled.inputs):  # a stateful LM: the sequence from an empty cache
            return full_forward(compiled, request, self.prepare_inputs(model, inputs))
        feed = to_numpy_feed(compiled, self.prepare_inputs(model, inputs))
        return outputs_as_torch(compiled, request.infer(feed))

    def lm_decoder(self, model: LoadedModel, max_len: int) -> Any:
        """A stateful LM IR generates through its request's state (else None)."""
        from accel.runtimes.openvino.stateful import (
            StatefulDecoder,
            has_lm_inputs,
            kv_bytes_per_token,
            kv_precision_of,
        )

        compiled, request = self.session(model)
        if not has_lm_inputs(compiled.inputs) or not request.query_state():
            return None
        per_token = kv_bytes_per_token(read_ir(model.runtime_file), kv_precision_of(compiled))
        decoder = StatefulDecoder(compiled, request, per_token, max_len)
        if model.session_options.get("pipeline") == "genai":  # OpenVINO GenAI's LLMPipeline
            from accel.runtimes.openvino.genai import PipelineDecoder, pipeline_for

            pipe = pipeline_for(Path(model.runtime_file), dict(model.session_options))
            return PipelineDecoder(pipe, decoder)
        return decoder

    def concurrent_throughput(
        self, model: LoadedModel, inputs: Mapping[str, Any], seconds: float = 1.0
    ) -> float | None:
        """Calls per second through an AsyncInferQueue of the compiled model's optimal number
        of requests (its performance hint and streams decide it)."""
        import time

        import openvino as ov

        compiled = self.session(model)[0]
        n = max(1, int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
        queue = ov.AsyncInferQueue(compiled, n)
        feed = to_numpy_feed(compiled, self.prepare_inputs(model, inputs))
        for _ in range(n):  # warm every request
            queue.start_async(feed)
        queue.wait_all()
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            queue.start_async(feed)  # blocks while every request is busy
            done += 1
        queue.wait_all()
        return done / (time.perf_counter() - t0)

    def timing_target(
        self, model: LoadedModel, inputs: Any, device: str, threads: int | None
    ) -> TimingTarget:
        from accel.runtimes.openvino.stateful import has_lm_inputs
        from accel.runtimes.openvino.timing import request_target

        if not isinstance(inputs, Mapping):
            inputs = dict(zip(model.input_spec.names, inputs))
        fed = self.prepare_inputs(model, inputs)
        stateful = has_lm_inputs(self.session(model)[0].inputs)
        if stateful:  # a stateful LM: the whole sequence, from an empty state each call
            from accel.runtimes.openvino.stateful import input_names, lm_feed

            ids = next(iter(fed.values()))
            ids = ids.detach().cpu().numpy() if hasattr(ids, "detach") else ids
            fed = lm_feed(input_names(self.session(model)[0].inputs), ids, 0)

        def compile_model() -> Any:
            if threads and threads != model.session_options.get("threads"):
                return self.compile(model, threads=int(threads))
            return self.session(model)[0]

        return request_target(compile_model, fed, model.size_bytes or None, stateful)

    # -- insight -------------------------------------------------------------------------
    def profile(
        self, model: LoadedModel, inputs: Mapping[str, Any], request: ProfileRequest
    ) -> ModelProfile:
        """Per-op times from OpenVINO's performance counters (PERF_COUNT), alternating
        with plain runs of the same compiled model without counters."""
        from accel.runtimes.openvino.profile import profile_compiled
        from accel.runtimes.openvino.stateful import has_lm_inputs, lm_sequence_feed

        over = {"threads": int(request.threads)} if request.threads else {}
        plain_c = self.compile(model, **over)
        prof_c = self.compile(model, perf_count=True, **over)
        fed = self.prepare_inputs(model, inputs)
        stateful = has_lm_inputs(plain_c.inputs)
        if stateful:  # a stateful LM: the whole sequence from an empty cache, as its forward
            fed = lm_sequence_feed(plain_c, fed)
        return profile_compiled(plain_c, prof_c, fed, self.kind, request, reset_state=stateful)

    def profile_generation(
        self, model: LoadedModel, work: GenerationWork, request: ProfileRequest
    ) -> GenerationLayers:
        """A stateful LM's generation split per layer by the performance counters of a
        PERF_COUNT twin compiled with the same options, generating beside the plain one."""
        from accel.runtimes.openvino.generation_profile import profile_generation_ov
        from accel.runtimes.openvino.stateful import StatefulDecoder

        plain = self.lm_decoder(model, 1)
        if plain is None:
            raise AccelError(
                f"cannot split {model.source}'s generation by layer: it is not a stateful LM "
                "(its KV cache is not in the infer request); export it with openvino_stateful"
            )
        twin = self.compile(model, perf_count=True)
        max_len = int(work.prompt.shape[1]) + work.new_tokens
        counting = StatefulDecoder(
            twin, twin.create_infer_request(), plain.per_token_bytes, max_len
        )
        return profile_generation_ov(
            work,
            counting,
            rounds=request.iters,
            warmup=request.warmup,
            progress=request.progress,
            cancel=request.cancel,
        )

    def graph(self, model: LoadedModel, inputs: Mapping[str, Any] | None, **kwargs: Any) -> Graph:
        from accel.runtimes.openvino.graph import graph_from_ov

        return graph_from_ov(read_ir(model.runtime_file), name=Path(model.runtime_file).stem)

    def layer_outputs(
        self, model: LoadedModel, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], set[str]]:
        from accel.runtimes.openvino.layers import ov_layer_outputs

        fed = self.prepare_inputs(model, inputs)
        return ov_layer_outputs(model.runtime_file, dict(model.session_options), fed), set()

    def info(self, model: LoadedModel) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": str(model.runtime_file) if model.runtime_file else None,
            "compile": dict(model.session_options),
        }
        if model.metadata.get("param_dtypes"):  # integer weights counted as NNCF stores them
            out["param_dtypes"] = dict(model.metadata["param_dtypes"])
        return out

    # -- scripts and serving ---------------------------------------------------------------
    def script(self) -> ScriptRuntime:
        return ScriptRuntime(
            run_branch=(
                "ov_names = {n for p in compiled.inputs for n in p.get_names()}\n"
                "if 'beam_idx' in ov_names:  # a stateful LM: the sequence from an empty cache\n"
                "    ids = feed['input_ids'].detach().cpu().numpy()\n"
                "    b, n = ids.shape\n"
                "    lm_feed = {'input_ids': ids, 'attention_mask': np.ones((b, n), dtype=np.int64),\n"
                "               'beam_idx': np.arange(b, dtype=np.int32)}\n"
                "    if 'position_ids' in ov_names:\n"
                "        lm_feed['position_ids'] = np.tile(np.arange(n, dtype=np.int64), (b, 1))\n"
                "    request.reset_state()\n"
                "    return (torch.from_numpy(np.array(request.infer(lm_feed)['logits'])),)\n"
                "ov_feed = {}\n"
                "for i, port in enumerate(compiled.inputs):\n"
                "    x = list(feed.values())[i].detach().cpu()\n"
                "    ov_feed[i] = (x.float() if x.is_floating_point() else x).numpy()\n"
                "result = request.infer(ov_feed)\n"
                "return tuple(torch.from_numpy(np.array(result[o])) for o in compiled.outputs)"
            ),
            loads={
                ".xml": (
                    "ov_model = ov.Core().read_model(str(model_file))\n"
                    "compiled = ov.Core().compile_model(ov_model, 'CPU')\n"
                    "request = compiled.create_infer_request()\n"
                    'kind = "openvino"\n'
                    "model = session = None"
                )
            },
            imports=("import openvino as ov",),
        )

    def serve(self, path: Path, device: str, threads: int | None) -> ServedIR:
        from accel.runtimes.openvino.serving import ServedIR

        return ServedIR(path)

    def serve_lm(self, path: Path, options: dict[str, Any], mode: str) -> Any:
        from accel.runtimes.openvino.lm_serving import engine_for

        return engine_for(Path(path), options, mode)
