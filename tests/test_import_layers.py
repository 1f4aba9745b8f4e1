"""The layers contract of pyproject.toml sees every accel module and ignores no import.

accel.graph and accel.profile are listed module by module (their data types sit below the
runtime contract, their use cases above the runtimes), so a new module there must be
placed in a layer too; only the packages' own ``__init__`` facades stay out."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Package facades outside any layer: the root (it imports the built-in runtimes) and the
# packages whose modules are listed one by one (accel.timing: its typed result sits at the
# bottom, its harness above the runtimes).
FACADES = {"accel", "accel.graph", "accel.profile", "accel.timing"}


def _layers_contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["type"] == "layers" and "accel.runtimes" in str(c))


def _accel_modules() -> list[str]:
    out = []
    for path in sorted((ROOT / "accel").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


def test_every_accel_module_is_in_a_layer():
    contract = _layers_contract()
    listed = [m.strip() for layer in contract["layers"] for m in layer.split(":")]
    missing = [
        m
        for m in _accel_modules()
        if m not in FACADES and not any(m == x or m.startswith(x + ".") for x in listed)
    ]
    assert missing == [], f"add these modules to a layer of the accel layers contract: {missing}"


def test_the_layers_contract_ignores_no_import_and_covers_the_runtimes():
    contract = _layers_contract()
    assert "ignore_imports" not in contract
    layers = [[m.strip() for m in layer.split(":")] for layer in contract["layers"]]
    order = {m: i for i, layer in enumerate(layers) for m in layer}
    # the runtimes sit above the models they load and below everything that asks them
    assert order["accel.timing.harness"] < order["accel.runtimes"] < order["accel.models"]
    assert order["accel.models"] < order["accel.graph.model"]
