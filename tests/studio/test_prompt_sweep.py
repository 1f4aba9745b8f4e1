"""A generation recipe run at several prompt lengths (issue 31: tokens/s and TTFT against
prompt length): ``studio run --prompt-tokens 8,16`` makes one stored run per length, each with
its own settings in its stored recipe, and bad values are refused naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accel.generate.settings import GenerateError, with_generate_settings
from accel.job_specs import RunRecipeJob
from accel.recipe import load_recipe
from studio.cli import main
from studio.generation_columns import sweep_settings

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "accel" / "tiny_decoder.py"
SPEC = "input_ids:int64[batch,seq]{0..256}; batch=1..8:1; seq=1..64:16"


def _write(tmp_path: Path, bench: dict) -> Path:
    path = tmp_path / "gen.yaml"
    recipe = {
        "name": "tiny-gen",
        "model": {"source": "zoo:mlp", "input_spec": SPEC},
        "benchmark": {"workload": "generate", "warmup": 1, "iters": 2, "rounds": 2, **bench},
        "steps": [{"pass": "bf16"}],
    }
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_settings_for_one_run_are_checked_like_the_recipes_own(tmp_path):
    recipe = load_recipe(_write(tmp_path, {"new_tokens": 4}))
    one = with_generate_settings(recipe, {"prompt_tokens": 12})
    assert (one.benchmark.prompt_tokens, one.benchmark.new_tokens) == (12, 4)
    assert recipe.benchmark.prompt_tokens is None  # the loaded recipe is not changed
    assert sweep_settings(one.to_dict()) == (12, 4)
    assert sweep_settings(recipe.to_dict()) == (128, 4)  # the default prompt length
    with pytest.raises(GenerateError, match=r"benchmark.prompt_tokens: .*greater than"):
        with_generate_settings(recipe, {"prompt_tokens": 0})
    with pytest.raises(GenerateError, match="only prompt_tokens, new_tokens"):
        with_generate_settings(recipe, {"warmup": 100})
    forward = load_recipe(ROOT / "resources" / "recipes" / "mlp_onnx.yaml")
    with pytest.raises(GenerateError, match="only for generation recipes"):
        with_generate_settings(forward, {"prompt_tokens": 8})
    assert sweep_settings(forward.to_dict()) is None


def test_the_job_carries_only_an_override_that_is_set():
    job = RunRecipeJob.from_params({"recipe": "r.yaml", "generate": {"prompt_tokens": 8}})
    assert job.to_params()["generate"] == {"prompt_tokens": 8}
    assert "generate" not in RunRecipeJob.from_params({"recipe": "r.yaml"}).to_params()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--prompt-tokens", "8,x"], "--prompt-tokens takes whole numbers"),
        (["--prompt-tokens", "0"], "--prompt-tokens takes whole numbers"),
        (["--new-tokens", "0"], "--new-tokens: "),
    ],
)
def test_bad_values_are_refused_before_any_work_naming_the_option(tmp_path, capsys, argv, named):
    recipe = _write(tmp_path, {})
    assert main(["run", str(recipe), *argv]) == 2
    assert named in capsys.readouterr().err


def test_a_forward_recipe_refuses_the_generation_options(capsys):
    recipe = ROOT / "resources" / "recipes" / "mlp_onnx.yaml"
    assert main(["run", str(recipe), "--prompt-tokens", "8"]) == 2
    assert "--prompt-tokens: only for generation recipes" in capsys.readouterr().err


def test_a_sweep_stores_one_run_per_prompt_length(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = _write(tmp_path, {})
    before = recipe.read_text()
    argv = ["run", "gen.yaml", "--model", f"{TINY}:llama", "--out", "sweep"]
    assert main([*argv, "--prompt-tokens", "8,16", "--new-tokens", "4", "--tag", "sw"]) == 0
    out = capsys.readouterr().out
    assert "== prompt 8 tokens ==" in out and "== prompt 16 tokens ==" in out
    assert "ref tok/s" in out  # the generation table under each run's
    assert "the 2 runs side by side: studio compare" in out
    assert (tmp_path / "sweep" / "prompt_8").is_dir() and (
        tmp_path / "sweep" / "prompt_16"
    ).is_dir()
    assert recipe.read_text() == before  # the sweep's settings never reach the file
    from studio.store import Repository

    repo = Repository.open(None)
    try:
        runs = [repo.get_run(r.id) for r in repo.list_runs(limit=10)]
    finally:
        repo.close()
    lengths = sorted(sweep_settings(d.recipe) for d in runs if "sw" in d.run.tags)
    assert lengths == [(8, 4), (16, 4)]
    assert all(d.status == "succeeded" for d in runs)
