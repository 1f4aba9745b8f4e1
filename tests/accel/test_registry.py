"""The pass registry: cheap to list, complete descriptions, configs that round-trip."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from accel.passes import CATEGORIES, get_pass, list_passes


def test_every_pass_module_imports():
    from accel.passes.registry import SCAN_ERRORS

    list_passes()
    assert SCAN_ERRORS == {}


def test_listing_passes_imports_no_heavy_library():
    code = (
        "import sys, json\n"
        "from accel.passes import list_passes\n"
        "names = [p.name for p in list_passes()]\n"
        "heavy = [m for m in ('torch', 'torchao', 'onnxruntime', 'torch_pruning', 'onnx', 'onnxscript') if m in sys.modules]\n"
        "print(json.dumps({'names': names, 'heavy': heavy}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert "channels_last" in data["names"]
    assert data["heavy"] == [], f"listing passes imported {data['heavy']}"


@pytest.mark.parametrize("cls", list_passes(), ids=lambda c: c.name)
def test_every_pass_is_described(cls):
    info = cls.describe()
    assert info["summary"] and info["category"] in CATEGORIES
    assert (
        cls.Config.model_config.get("frozen") and cls.Config.model_config.get("extra") == "forbid"
    )
    for prm in info["params"]:
        assert prm["description"], f"{cls.name}.{prm['name']} has no description"
    # the default config round-trips through JSON (the GUI and stored recipes rely on it)
    required = {p["name"] for p in info["params"] if p["required"]}
    if not required:
        cfg = cls.parse_config({})
        again = cls.parse_config(json.loads(cfg.model_dump_json()))
        assert again == cfg


def test_unknown_pass_suggests_close_names():
    from accel.errors import PassError

    with pytest.raises(PassError, match="Did you mean channels_last"):
        get_pass("channel_last")


@pytest.mark.parametrize("cls", list_passes(include_test=True), ids=lambda c: c.name)
def test_layer_lists_are_declared(cls):
    """Every parameter written in the layer-pattern language (its description ends with
    PATTERN_HELP) is declared in ``requires.layer_lists`` with a role, and only those."""
    from accel.layer_patterns import PATTERN_HELP
    from accel.passes.base import LAYER_ROLES

    fields = cls.Config.model_fields
    patterned = {n for n, f in fields.items() if PATTERN_HELP in (f.description or "")}
    assert set(cls.requires.layer_lists) == patterned
    assert set(cls.requires.layer_lists.values()) <= set(LAYER_ROLES)
    assert cls.describe()["requires"]["layer_lists"] == cls.requires.layer_lists


def test_an_unknown_layer_list_role_is_refused():
    from accel.passes.base import Requirements

    with pytest.raises(ValueError, match="roles"):
        Requirements(layer_lists={"exclude": "float"})
