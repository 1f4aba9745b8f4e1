"""The ONNX Runtime GenAI runtime (see the package docstring).

A model of this kind keeps its folder in ``LoadedModel.runtime_file`` and its thread count in
``session_options["threads"]``. Its session is ``(og.Model, ONNX Runtime session or None)``:
generation runs through ``og.Generator`` (``lm_decoder``); the plain forward call through an
ONNX Runtime session on the folder's ``model.onnx``, created on first use. The folder's
``model.onnx`` keeps its KV cache as inputs and outputs and its attention as ONNX Runtime
contrib ops, so it is not a plain ONNX model: no ONNX pass accepts this kind.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.errors import AccelError, ModelLoadError
from accel.models.runtime import ScriptRuntime, register_runtime
from accel.runtimes.base import RuntimeBase

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

RUN_BRANCH = (
    "ids = feed['input_ids'].detach().cpu().numpy().astype(np.int64)\n"
    "b, n = ids.shape\n"
    "g_feed = {'input_ids': ids, 'attention_mask': np.ones((b, n), dtype=np.int64)}\n"
    "for i in session.get_inputs():  # an empty KV cache: the whole sequence at once\n"
    "    if i.name.startswith('past_key_values.'):\n"
    "        g_feed[i.name] = np.zeros((b, i.shape[1], 0, GENAI_HEAD_SIZE), dtype=np.float32)\n"
    "    elif i.name == 'position_ids':\n"
    "        g_feed[i.name] = np.tile(np.arange(n, dtype=np.int64), (b, 1))\n"
    "return (torch.from_numpy(np.asarray(session.run(['logits'], g_feed)[0], dtype=np.float32)),)"
)


@register_runtime
class OrtGenaiRuntime(RuntimeBase):
    kind = "ort_genai"
    label = "ONNX Runtime GenAI"
    file_suffixes = ()  # a folder made by the ort_genai pass; not opened from a file
    libraries = ("onnxruntime_genai", "onnxruntime")
    reached_by = "ort_genai"
    capabilities = frozenset({"netron"})
    artifact_kinds: frozenset[str] = frozenset()  # not served by Triton

    def unavailable_reason(self, device: str = "cpu") -> str | None:
        reason = super().unavailable_reason(device)
        if reason:
            return reason
        if str(device).startswith("cuda"):
            return "the studio builds ONNX Runtime GenAI models for the CPU; set the device to cpu"
        return None

    # -- loading and saving --------------------------------------------------------------
    def finish_load(self, model: LoadedModel, device: str, validate: bool) -> None:
        if str(device).startswith("cuda"):
            raise ModelLoadError("ONNX Runtime GenAI models are built for the CPU here")
        model.device = device

    def save(self, model: LoadedModel, path: Path) -> Path:
        """Copy the model folder to ``path`` (a folder)."""
        path = Path(path)
        if Path(model.runtime_file).resolve() != path.resolve():
            shutil.copytree(model.runtime_file, path, dirs_exist_ok=True)
        return path

    def model_file(self, model: LoadedModel) -> Path | None:
        return Path(model.runtime_file) if model.runtime_file else None

    def netron_file(self, model: LoadedModel) -> Path | None:
        from accel.runtimes.ort_genai.decoder import model_files

        return model_files(model.runtime_file)[0] if model.runtime_file else None

    def with_threads(self, model: LoadedModel, threads: int) -> LoadedModel:
        if model.session_options.get("threads") == threads:
            return model
        return model.replace(session_options={**model.session_options, "threads": threads})

    # -- running -------------------------------------------------------------------------
    def session(self, model: LoadedModel) -> Any:
        from accel.runtimes.ort_genai.decoder import og_model

        self.check_available(str(model.device or "cpu"))
        if model._session is None:
            model._session = [
                og_model(model.runtime_file, model.session_options.get("threads")),
                None,
            ]
        return model._session

    def _ort_session(self, model: LoadedModel) -> Any:
        import onnxruntime as ort

        from accel.runtimes.ort_genai.decoder import model_files

        held = self.session(model)
        if held[1] is None:
            so = ort.SessionOptions()
            threads = model.session_options.get("threads")
            if threads:
                so.intra_op_num_threads = int(threads)
            onnx_file = str(model_files(model.runtime_file)[0])
            held[1] = ort.InferenceSession(onnx_file, so, providers=["CPUExecutionProvider"])
        return held[1]

    def forward(self, model: LoadedModel, inputs: Mapping[str, Any]) -> Any:
        from accel.runtimes.ort_genai.decoder import full_forward

        session = self._ort_session(model)
        return full_forward(session, model.runtime_file, self.prepare_inputs(model, inputs))

    def lm_decoder(self, model: LoadedModel, max_len: int) -> Any:
        """Generation through og.Generator, its KV cache held by ONNX Runtime GenAI."""
        from accel.runtimes.ort_genai.decoder import GenaiDecoder, kv_bytes_per_token

        og_model = self.session(model)[0]
        return GenaiDecoder(og_model, kv_bytes_per_token(model.runtime_file), max_len)

    def info(self, model: LoadedModel) -> dict[str, Any]:
        return {
            "folder": str(model.runtime_file) if model.runtime_file else None,
            "options": dict(model.session_options),
        }

    # -- scripts ----------------------------------------------------------------------------
    def script(self) -> ScriptRuntime:
        return ScriptRuntime(run_branch=RUN_BRANCH, imports=("import onnxruntime as ort",))

    def serve(self, path: Path, device: str, threads: int | None) -> Any:
        raise AccelError(
            "ONNX Runtime GenAI models are not served by Triton here (they generate through "
            "og.Generator, which Triton's backends do not run)"
        )
