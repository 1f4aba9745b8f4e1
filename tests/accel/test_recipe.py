"""Recipes: validation errors that say what to change, migrations, save/load."""

from __future__ import annotations

import json

import pytest
import yaml

from accel.errors import RecipeError
from accel.recipe import SCHEMA_VERSION, load_recipe, save_recipe


def _write(tmp_path, data, name="r.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if name.endswith(".yaml") else json.dumps(data))
    return p


def test_unknown_pass_names_the_step_and_closest(tmp_path):
    p = _write(
        tmp_path,
        {
            "model": {"source": "zoo:mlp"},
            "steps": [{"pass": "channels_last"}, {"pass": "chanels_last"}],
        },
    )
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    msg = str(e.value)
    assert msg.startswith("step 2 (chanels_last): unknown pass 'chanels_last'")
    assert "Did you mean: channels_last" in msg


def test_unknown_param_names_field_and_closest(tmp_path):
    p = _write(
        tmp_path,
        {
            "model": {"source": "zoo:resnet"},
            "steps": [{"pass": "channels_last", "params": {"convert_input": False}}],
        },
    )
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert "step 1 (channels_last)" in str(e.value)
    assert "unknown field 'convert_input'; did you mean convert_inputs?" in str(e.value)


def test_wrong_type_and_missing_model(tmp_path):
    p = _write(
        tmp_path,
        {
            "model": {"source": "zoo:resnet"},
            "steps": [{"pass": "channels_last", "params": {"convert_inputs": "maybe"}}],
        },
    )
    with pytest.raises(RecipeError, match=r"field 'convert_inputs'.*got 'maybe'"):
        load_recipe(p)
    p = _write(tmp_path, {"schema_version": SCHEMA_VERSION, "steps": []})
    with pytest.raises(RecipeError, match="missing required field 'model'"):
        load_recipe(p)
    p = _write(tmp_path, {"model": {"source": "zoo:mlp"}, "benchmark": {"iters": "many"}})
    with pytest.raises(RecipeError, match="benchmark.iters"):
        load_recipe(p)
    p = _write(tmp_path, {"model": {"source": "zoo:mlp"}, "gatez": {}})
    with pytest.raises(RecipeError, match="did you mean gates"):
        load_recipe(p)


def test_not_a_mapping_and_bad_yaml(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(RecipeError, match="a recipe is a mapping"):
        load_recipe(tmp_path / "list.yaml")
    (tmp_path / "bad.yaml").write_text("model: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(tmp_path / "bad.yaml")
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path / "missing.yaml")


def test_old_schema_versions_are_migrated(tmp_path):
    v0 = {
        "model": "zoo:resnet",
        "input": "x:float32[batch,3,64,64]",
        "passes": [{"type": "channels_last", "options": {"convert_inputs": False}}],
    }
    r = load_recipe(_write(tmp_path, v0))
    assert r.schema_version == SCHEMA_VERSION
    assert r.model.source == "zoo:resnet" and r.model.input_spec.startswith("x:float32")
    assert r.steps[0].pass_name == "channels_last" and r.steps[0].params == {
        "convert_inputs": False
    }
    v1 = {"schema_version": 1, "model": {"source": "zoo:mlp"}, "parity": {"atol": 0.5}}
    assert load_recipe(v1).gates.atol == 0.5
    with pytest.raises(RecipeError, match="newer than this studio"):
        load_recipe({"schema_version": SCHEMA_VERSION + 1, "model": {"source": "zoo:mlp"}})


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_save_load_roundtrip(tmp_path, suffix):
    r = load_recipe(
        {
            "name": "x",
            "model": {"source": "zoo:resnet"},
            "steps": [{"pass": "channels_last", "enabled": False}],
            "gates": {"min_top1": 0.9},
            "benchmark": {"dims": {"batch": 4}},
        }
    )
    p = save_recipe(r, tmp_path / f"r{suffix}")
    again = load_recipe(p)
    assert again == r and again.content_hash() == r.content_hash()
    assert again.enabled_steps() == []


def test_sample_recipes_are_valid():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "resources" / "recipes"
    files = sorted(folder.glob("*.yaml"))
    for f in files:
        load_recipe(f)
