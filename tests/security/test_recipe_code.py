"""Issue 15, reproductions 2 and 3: a recipe file never decides by itself to run code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from accel.errors import ModelLoadError, UntrustedCodeError
from accel.models import load_model
from accel.runner import run_recipe
from tests.security.conftest import craft_pickled_module

FAST = {"warmup": 0, "iters": 1}


def _recipe(tmp_path: Path, source: str, **model: object) -> Path:
    data = {
        "name": "r",
        "model": {"source": source, "input_spec": "x:float32[batch,8]", **model},
        "benchmark": FAST,
        "steps": [{"pass": "bf16"}],
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _user_factory(tmp_path: Path, marker: Path) -> Path:
    """A user's model file whose import leaves ``marker`` (stands for any code it runs)."""
    f = tmp_path / "user_model.py"
    f.write_text(
        "import torch\n"
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "def build():\n"
        "    return torch.nn.Linear(8, 2)\n"
    )
    return f


def _failed(result) -> str:
    assert result.status == "failed", result.status
    return result.error or ""


@pytest.mark.parametrize(
    "source",
    [
        "subprocess:run(args='touch {m}', shell=True)",
        "os:system(command='touch {m}')",
        "subprocess:check_call(args=['touch', '{m}'])",
    ],
)
def test_stdlib_callables_in_a_recipe_never_run(tmp_path, marker, source):
    recipe = _recipe(tmp_path, source.format(m=marker))
    err = _failed(run_recipe(recipe, out_dir=tmp_path / "run"))
    assert "--trust-recipe-code" in err
    # Even with the opt-in, a stdlib function is not a factory: refused before the call.
    err = _failed(run_recipe(recipe, out_dir=tmp_path / "run2", trust_recipe_code=True))
    assert "not a model factory" in err
    assert not marker.exists()


def test_stdlib_callable_refused_even_when_the_user_names_it(marker):
    with pytest.raises(UntrustedCodeError, match="not a model factory"):
        load_model(f"os:system(command='touch {marker}')", "x:float32[1]")
    with pytest.raises(UntrustedCodeError, match="not a model factory"):
        load_model("builtins:eval(source='1')", "x:float32[1]")
    assert not marker.exists()


def test_site_packages_factories_and_module_classes_are_allowed():
    lm = load_model("torch.nn:Linear(in_features=8, out_features=2)", "x:float32[batch,8]")
    assert lm.kind == "torch"
    with pytest.raises(UntrustedCodeError, match="not a model factory"):
        load_model("torch:zeros(size=[2])", "x:float32[1]")


def test_recipe_factory_file_needs_the_opt_in(tmp_path, marker):
    f = _user_factory(tmp_path, marker)
    recipe = _recipe(tmp_path, f"{f}:build")
    err = _failed(run_recipe(recipe, out_dir=tmp_path / "run"))
    assert "--trust-recipe-code" in err and str(f) in err
    assert not marker.exists()  # not even imported
    ok = run_recipe(recipe, out_dir=tmp_path / "run2", trust_recipe_code=True)
    assert ok.status == "succeeded", ok.error
    assert marker.exists()


def test_model_named_by_the_caller_needs_no_opt_in(tmp_path, marker):
    f = _user_factory(tmp_path, marker)
    recipe = _recipe(tmp_path, "zoo:mlp")
    ok = run_recipe(recipe, out_dir=tmp_path / "run", model_source=f"{f}:build")
    assert ok.status == "succeeded", ok.error
    # and a notebook call names its own source
    assert load_model(f"{f}:build", "x:float32[batch,8]").kind == "torch"


def test_recipe_data_function_needs_the_opt_in(tmp_path, marker):
    data = tmp_path / "calib.py"
    data.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef batches():\n    return []\n")
    path = tmp_path / "r.json"
    path.write_text(
        json.dumps(
            {
                "model": {"source": "zoo:mlp"},
                "benchmark": FAST,
                "data": {"calibration": f"{data}:batches"},
                "steps": [{"pass": "bf16"}],
            }
        )
    )
    err = _failed(run_recipe(path, out_dir=tmp_path / "run"))
    assert "--trust-recipe-code" in err
    assert not marker.exists()


def test_stdlib_data_function_is_refused(tmp_path):
    from accel.data import make_data_source
    from accel.errors import DataError

    with pytest.raises(DataError, match="standard library"):
        make_data_source("os:getcwd", "x:float32[batch,8]")


def test_trust_pickle_in_a_recipe_is_ignored(tmp_path, marker):
    pt = craft_pickled_module(tmp_path / "m.pt", marker)
    recipe = _recipe(tmp_path, str(pt), trust_pickle=True)
    events = []
    err = _failed(run_recipe(recipe, events.append, out_dir=tmp_path / "run"))
    assert "--trust-pickle" in err
    assert not marker.exists()
    warnings = [e.message for e in events if getattr(e, "level", "") == "warning"]
    assert any("trust_pickle" in w and "ignored" in w for w in warnings)
    # The person running it can opt in: then the file is unpickled (and runs its code).
    run_recipe(recipe, out_dir=tmp_path / "run2", trust_pickle=True)
    assert marker.exists()


def test_export_script_never_imports_the_model_source(tmp_path, marker, capsys):
    from studio.cli import main

    f = _user_factory(tmp_path, marker)
    out = tmp_path / "s.py"
    assert main(["export-script", str(_recipe(tmp_path, f"{f}:build")), "-o", str(out)]) == 0
    assert not marker.exists()
    assert "exec_module" in out.read_text()
    # stdlib callables: the script would call them, so the export refuses
    recipe = _recipe(tmp_path, f"subprocess:run(args='touch {marker}', shell=True)")
    assert main(["export-script", str(recipe), "-o", str(out)]) == 2
    assert "not a model factory" in capsys.readouterr().err
    assert not marker.exists()


def test_export_script_without_spec_does_not_import_a_factory(tmp_path, marker):
    from accel.codegen import recipe_to_script
    from accel.errors import RecipeError

    f = _user_factory(tmp_path, marker)
    with pytest.raises(RecipeError, match="input_spec"):
        recipe_to_script({"model": {"source": f"{f}:build"}, "steps": [{"pass": "bf16"}]})
    assert not marker.exists()


def test_cli_run_flags(tmp_path, marker):
    """`studio run` refuses the recipe's factory, and runs it with --trust-recipe-code (in
    the job's box: its import may write into the run folder, not next to the factory)."""
    import subprocess

    marker = tmp_path / "b" / "IMPORTED"  # inside the second run's folder
    f = _user_factory(tmp_path, marker)
    recipe = _recipe(tmp_path, f"{f}:build")
    env_db = ["--db", str(tmp_path / "db.sqlite")]
    cmd = [sys.executable, "-m", "studio", *env_db, "run", str(recipe), "--out"]
    p = subprocess.run([*cmd, str(tmp_path / "a")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    assert "--trust-recipe-code" in p.stderr
    assert not marker.exists()
    p = subprocess.run(
        [*cmd, str(tmp_path / "b"), "--trust-recipe-code"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert marker.exists()


def test_bad_factory_names_are_refused_before_import():
    with pytest.raises(ModelLoadError, match="Python name"):
        load_model("os:system;rm", "x:float32[1]")


def test_code_references_are_told_from_built_in_sources():
    from accel.trust import is_code_ref, recipe_code_refs

    for built_in in ("zoo:mlp", "zoo:mlp(in_features=8)@w.pt", "hf:bert", "tv:resnet18",
                     "synthetic(batches=2)", "model.onnx", "C:\\models\\m.onnx"):  # fmt: skip
        assert not is_code_ref(built_in), built_in
    for code in ("pkg.mod:build", "my_model.py:build(width=8)", "a/b.py:f@w.pt", "os:system"):
        assert is_code_ref(code), code
    recipe = {
        "model": {"source": "my.py:build"},
        "data": {"calibration": "synthetic-labelled:pkg.teacher:build", "metric": "m.py:acc"},
    }
    assert recipe_code_refs(recipe) == ["my.py:build", "pkg.teacher:build", "m.py:acc"]
