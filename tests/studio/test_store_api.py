"""studio.store.api's Protocols and the Repository that implements them stay in step."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from studio.store import Repository, api
from studio.store.base import StoreBase

FEATURES = [api.RunWriter, api.RunReader, api.ProfileStore, api.SearchStore, api.ServeTestStore]


def _members(proto: type) -> dict[str, object]:
    names = {n for n in vars(proto) if not n.startswith("_") or n in ("__enter__", "__exit__")}
    for base in proto.__mro__[1:]:
        if base in FEATURES:
            names |= set(_members(base))
    return {n: getattr(proto, n) for n in names if n not in api.Protocol.__dict__}


@pytest.mark.parametrize("proto", [*FEATURES, api.Store], ids=lambda p: p.__name__)
def test_repository_has_every_protocol_method_with_the_same_signature(proto):
    for name, declared in _members(proto).items():
        impl = getattr(Repository, name, None)
        assert impl is not None, f"Repository has no {name} ({proto.__name__})"
        if isinstance(declared, property):
            assert isinstance(impl, property), name
            continue
        assert str(inspect.signature(impl)) == str(inspect.signature(declared)), name


def test_every_public_repository_method_is_in_the_store_protocol():
    declared = set(_members(api.Store))
    public = {
        n
        for n in dir(Repository)
        if not n.startswith("_") and n not in ("open", "engine") and n not in dir(object)
    }
    assert public - declared == set(), "add these to studio.store.api (or make them private)"


def test_feature_protocols_do_not_overlap():
    seen: dict[str, str] = {}
    for proto in FEATURES:
        for name in _members(proto):
            assert name not in seen, f"{name} in {proto.__name__} and {seen[name]}"
            seen[name] = proto.__name__


def test_an_open_repository_is_a_store(tmp_path):
    with Repository.open(tmp_path / "s.db") as repo:
        assert isinstance(repo, api.Store)
        assert all(isinstance(repo, p) for p in FEATURES)
        assert isinstance(repo, StoreBase)
    assert not isinstance(object(), api.RunReader)


def test_the_api_module_does_not_import_sqlalchemy():
    # Importing the Protocols alone (as a type checker or a headless caller would)
    # loads no database layer: the module and the records it names are SQLAlchemy-free.
    code = (
        "import sys, importlib.util, pathlib\n"
        "root = pathlib.Path('studio/store')\n"
        "for name in ('errors', 'records', 'api'):\n"
        "    spec = importlib.util.spec_from_file_location(\n"
        "        'studio.store.' + name, root / (name + '.py'))\n"
        "    mod = importlib.util.module_from_spec(spec)\n"
        "    sys.modules[spec.name] = mod\n"
        "    spec.loader.exec_module(mod)\n"
        "print('sqlalchemy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
