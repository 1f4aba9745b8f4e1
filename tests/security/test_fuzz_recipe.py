"""Issue 15, reproduction 7: the recipe validator. Every failure is a RecipeError, nothing
hangs or explodes in memory, and dangerous values are refused.

Fuzzers are hypothesis tests, derandomized (fixed seed) with bounded example counts and a
per-example deadline, so a hang shows up as a failure instead of a stuck suite."""

from __future__ import annotations

import json
import os
import string
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel.errors import RecipeError
from accel.recipe import load_recipe, migrate

FUZZ = settings(
    max_examples=int(os.environ.get("ACCEL_FUZZ_EXAMPLES", 150)),
    derandomize=True,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)

BASE = {"model": {"source": "zoo:mlp"}, "steps": [{"pass": "bf16"}]}


def _load_text(tmp_path: Path, raw: bytes | str, suffix: str = ".yaml"):
    p = tmp_path / f"r{suffix}"
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    p.write_bytes(raw)
    try:
        return load_recipe(p)
    except RecipeError:
        return None


# -- the reproductions --------------------------------------------------------------------


@pytest.mark.parametrize("version", ["two", None, -1, [2], 1.5, True, {"v": 1}, 10**30])
def test_bad_schema_versions_are_recipe_errors(version):
    with pytest.raises(RecipeError, match="schema_version"):
        load_recipe({**BASE, "schema_version": version})


@pytest.mark.parametrize("passes", ["bf16", 3, [1, 2], [{"type": "bf16"}, "x"], None])
def test_v0_passes_not_a_list_of_mappings(passes):
    with pytest.raises(RecipeError):
        migrate({"model": "zoo:mlp", "passes": passes})


@pytest.mark.parametrize(
    "raw",
    [
        b"name: \xff\xfe\x00bad\n",
        "name: x\nmodel: {source: zoo:mlp}\n".encode("utf-16"),
        b"\x80\x81\x82",
    ],
)
def test_non_utf8_recipes_are_recipe_errors(tmp_path, raw):
    p = tmp_path / "r.yaml"
    p.write_bytes(raw)
    with pytest.raises(RecipeError, match="UTF"):
        load_recipe(p)


def test_billion_laughs_is_refused_without_expanding(tmp_path):
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 12):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{', '.join('*' + prev for _ in range(9))}]")
    lines.append("model: {source: zoo:mlp}\nname: *l")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines))
    assert len(p.read_bytes()) < 1200
    with pytest.raises(RecipeError, match="aliases"):
        load_recipe(p)


def test_deep_nesting_is_a_recipe_error(tmp_path):
    for suffix, text in ((".yaml", "[" * 5000 + "]" * 5000), (".json", "[" * 100000)):
        p = tmp_path / f"deep{suffix}"
        p.write_text(text)
        with pytest.raises(RecipeError):
            load_recipe(p)


def test_oversized_recipe_is_refused_before_parsing(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("name: " + "x" * (2 << 20))
    with pytest.raises(RecipeError, match="larger than"):
        load_recipe(p)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"gates": {"rtol": float("inf")}}, "rtol"),
        ({"gates": {"atol": float("nan")}}, "atol"),
        ({"gates": {"min_cosine": float("-inf")}}, "min_cosine"),
        ({"benchmark": {"iters": 10**18}}, "iters"),
        ({"benchmark": {"warmup": -1}}, "warmup"),
        ({"benchmark": {"dims": {"batch": -3}}}, "batch"),
        ({"benchmark": {"dims": {"batch": 0}}}, "batch"),
        ({"benchmark": {"dims": {"batch": 10**15}}}, "batch"),
        ({"benchmark": {"dims": {"batch": 1e9}}}, "batch"),
        ({"schema_version": 1.5}, "schema_version"),
        ({"data": {"calibration_batches": 10**12}}, "calibration_batches"),
        ({"seed": -1}, "seed"),
        ({"name": "\ud800"}, "surrogate"),
        ({"steps": [{"pass": "bf16", "name": "x" * 100000}]}, "name"),
    ],
)
def test_dangerous_values_are_refused(patch, field):
    with pytest.raises(RecipeError, match=field):
        load_recipe({**BASE, **patch})


def test_unknown_dim_names_are_refused():
    with pytest.raises(RecipeError, match="'bacth'"):
        load_recipe(
            {
                **BASE,
                "model": {"source": "zoo:mlp", "input_spec": "x:float32[batch,16]"},
                "benchmark": {"dims": {"bacth": 4}},
            }
        )


def test_unknown_dim_names_are_refused_when_the_model_gives_the_spec(tmp_path):
    from accel.runner import run_recipe

    res = run_recipe({**BASE, "benchmark": {"dims": {"bacth": 4}}}, out_dir=tmp_path)
    assert res.status == "failed" and "'bacth'" in (res.error or "")


def test_error_messages_stay_short():
    big = list(range(100000))
    with pytest.raises(RecipeError) as err:
        load_recipe({**BASE, "gates": {"rtol": big}})
    assert len(str(err.value)) < 2000


# -- fuzzers ------------------------------------------------------------------------------

_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_json = st.recursive(
    _json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
_keys = st.sampled_from(
    ["schema_version", "name", "model", "steps", "passes", "gates", "parity", "benchmark",
     "data", "device", "seed", "on_gate_fail", "description", "input"]
)  # fmt: skip
_sub_keys = st.sampled_from(
    ["source", "input_spec", "trust_pickle", "rtol", "atol", "min_cosine", "iters", "warmup",
     "dims", "threads", "pass", "params", "type", "options", "calibration", "batch", "enabled"]
)  # fmt: skip
_recipe_like = st.dictionaries(
    _keys,
    st.one_of(_json, st.dictionaries(_sub_keys, _json, max_size=5), st.lists(_json, max_size=3)),
    max_size=8,
)


@FUZZ
@given(data=_recipe_like)
def test_fuzz_recipe_mappings_only_raise_recipe_errors(data):
    try:
        load_recipe(data)
    except RecipeError:
        pass


@FUZZ
@given(data=_recipe_like, use_json=st.booleans())
def test_fuzz_recipe_files_only_raise_recipe_errors(tmp_path, data, use_json):
    text = json.dumps(data, allow_nan=True) if use_json else yaml.safe_dump(data)
    _load_text(tmp_path, text, ".json" if use_json else ".yaml")


_yaml_chars = string.ascii_letters + string.digits + " :-[]{}&*!|>'\"#,.\n\t\\%@`?"


@FUZZ
@given(text=st.text(alphabet=_yaml_chars, max_size=300))
def test_fuzz_recipe_text_only_raises_recipe_errors(tmp_path, text):
    _load_text(tmp_path, "model: {source: zoo:mlp}\n" + text)


@FUZZ
@given(raw=st.binary(max_size=300))
def test_fuzz_recipe_bytes_only_raise_recipe_errors(tmp_path, raw):
    _load_text(tmp_path, raw, ".yaml")
    _load_text(tmp_path, raw, ".json")
