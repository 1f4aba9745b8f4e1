"""The compile settings that crash OpenVINO's CPU plugin (accel.runtimes.openvino.known_crashes):
the crash itself reproduced in a child process (on a CPU with AMX), the pattern found in a
converted Llama and not in GPT-2, refused with the setting to change, and ``precision: auto``
running f32 instead. No timing."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openvino")

from accel.errors import PassError  # noqa: E402
from accel.hardware import CpuFeatures, cpu_features  # noqa: E402
from accel.runtimes.openvino import known_crashes  # noqa: E402
from accel.runtimes.openvino.ir import read_ir  # noqa: E402
from tests.accel.test_openvino_stateful import _apply, _torch_lm  # noqa: E402
from tests.accel.tiny_decoder import gpt2, llama  # noqa: E402

BF16_ONE = {"INFERENCE_PRECISION_HINT": "bf16", "INFERENCE_NUM_THREADS": 1}

COMPILE = """
import sys, openvino as ov
core = ov.Core()
core.compile_model(core.read_model(sys.argv[1]), "CPU", {"INFERENCE_PRECISION_HINT": "bf16",
                   "INFERENCE_NUM_THREADS": 1})
print("compiled")
"""


@pytest.fixture(scope="module")
def irs(tmp_path_factory):
    """The tiny Llama and GPT-2 converted by the openvino pass (f32), as saved IRs."""
    out = {}
    for name, build in (("llama", llama), ("gpt2", gpt2)):
        ir, _ = _apply(
            "openvino", _torch_lm(build), {"precision": "f32"}, tmp_path_factory.mktemp(name)
        )
        out[name] = Path(ir.runtime_file)
    return out


@pytest.fixture()
def amx(monkeypatch):
    monkeypatch.setattr("accel.hardware.cpu_features", lambda: CpuFeatures(amx_bf16=True))


def _compile_in_child(xml: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", COMPILE, str(xml)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(not cpu_features().amx_bf16, reason="the crash needs a CPU with AMX")
def test_the_crash_is_real_a_gated_mlp_in_bf16_on_one_thread_kills_the_process(irs):
    """Why the guard exists. When an OpenVINO upgrade fixes it, this fails: drop the guard."""
    died = _compile_in_child(irs["llama"])
    assert died.returncode == -signal.SIGFPE, died.stdout + died.stderr[-2000:]
    fine = _compile_in_child(irs["gpt2"])  # GPT-2's MLP is not gated: no crash
    assert fine.returncode == 0 and "compiled" in fine.stdout, fine.stderr[-2000:]


def test_the_gated_mlp_is_found_in_llama_and_not_in_gpt2(irs):
    assert known_crashes.gated_mlp(read_ir(irs["llama"])) is not None
    assert known_crashes.gated_mlp(read_ir(irs["gpt2"])) is None


def test_the_reason_needs_bf16_one_thread_and_amx(irs, amx):
    model = read_ir(irs["llama"])
    why = known_crashes.crash_reason(model, BF16_ONE)
    assert why and "precision: f32" in why and "2 or more threads" in why and "33300" in why
    assert known_crashes.crash_reason(model, {**BF16_ONE, "INFERENCE_NUM_THREADS": 2}) is None
    assert (
        known_crashes.crash_reason(model, {**BF16_ONE, "INFERENCE_PRECISION_HINT": "f32"}) is None
    )
    assert known_crashes.crash_reason(model, BF16_ONE, "GPU") is None
    # no hint on an AMX CPU: the plugin picks bf16
    assert known_crashes.crash_reason(model, {"INFERENCE_NUM_THREADS": 1})
    assert known_crashes.crash_reason(read_ir(irs["gpt2"]), BF16_ONE) is None


def test_without_amx_nothing_is_refused(irs, monkeypatch):
    monkeypatch.setattr("accel.hardware.cpu_features", lambda: CpuFeatures(avx512_bf16=True))
    assert known_crashes.crash_reason(read_ir(irs["llama"]), BF16_ONE) is None


def test_a_bf16_the_recipe_set_is_refused_and_auto_runs_f32(irs, amx):
    model = read_ir(irs["llama"])
    with pytest.raises(PassError, match="precision: f32"):
        known_crashes.safe_config(model, dict(BF16_ONE), {"precision": "bf16"})
    config = known_crashes.safe_config(model, dict(BF16_ONE), {"precision_auto": True})
    assert config["INFERENCE_PRECISION_HINT"] == "f32" and config["INFERENCE_NUM_THREADS"] == 1


def test_the_runtime_compiles_an_auto_step_at_one_thread_instead_of_crashing(irs, amx):
    """The benchmark re-compiles a step at its thread count: with precision auto the Llama IR
    compiles (f32) in this process; set to bf16 it is refused before OpenVINO sees it."""
    from accel.models.inputs import InputSpec
    from accel.models.loaded import LoadedModel
    from accel.runtimes.openvino.runtime import OpenVinoRuntime

    def step(options):
        return LoadedModel(
            source="t",
            kind="openvino",
            input_spec=InputSpec.parse("input_ids:int64[1,8]{0..256}"),
            runtime_file=irs["llama"],
            session_options=options,
        )

    rt = OpenVinoRuntime()
    auto = rt.compile(step({"precision": "bf16", "precision_auto": True, "threads": 1}))
    assert str(auto.get_property("INFERENCE_PRECISION_HINT")) in ("f32", "<Type: 'float32'>")
    with pytest.raises(PassError, match="gated MLP"):
        rt.compile(step({"precision": "bf16", "threads": 1}))


def _forward_recipe(precision: str) -> dict:
    from tests.accel.test_openvino_stateful import SPEC, TINY

    return {
        "model": {"source": f"{TINY}:llama", "input_spec": SPEC},
        "steps": [{"pass": "openvino", "params": {"precision": precision}}],
        "benchmark": {"warmup": 0, "iters": 3, "rounds": 3, "threads": 1},
        "gates": {"min_cosine": 0.95},
    }


def _script(recipe: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    from accel.codegen import recipe_to_script

    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "recipe.py"
    script.write_text(recipe_to_script(recipe))
    return subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


def test_the_exported_script_carries_the_same_check():
    from accel.codegen import recipe_to_script

    text = recipe_to_script(_forward_recipe("auto"))
    compile(text, "recipe.py", "exec")
    assert "def ov_crash_free(" in text and "def gated_mlp(" in text
    assert "ov_config = ov_crash_free(ov_model, ov_config, 'auto', 'CPU')" in text


@pytest.mark.slow
@pytest.mark.skipif(not cpu_features().amx_bf16, reason="the crash needs a CPU with AMX")
def test_an_auto_step_on_one_thread_runs_in_the_studio_and_its_script(tmp_path):
    """On this AMX CPU, bf16 on one thread would kill both: the run and its script run f32;
    the script of a recipe that sets bf16 stops with the reason (no crash)."""
    from accel.recipe import Recipe
    from accel.runner import run_recipe

    res = run_recipe(
        Recipe.model_validate(_forward_recipe("auto")),
        out_dir=tmp_path / "run",
        trust_recipe_code=True,
    )
    assert res.status == "succeeded", res.error
    auto = _script(_forward_recipe("auto"), tmp_path / "auto")
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert "precision auto runs f32" in auto.stdout
    explicit = _script(_forward_recipe("bf16"), tmp_path / "bf16")
    assert explicit.returncode == 1, (explicit.returncode, explicit.stderr[-3000:])
    assert "use precision f32, or 2 or more threads" in explicit.stderr
