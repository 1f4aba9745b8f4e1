"""Helpers for the security suite: crafted files whose loading would leave a side-effect file."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest


class Evil:
    """Unpickling this creates ``marker`` (via eval, as an attacker would) and then
    returns what the loader expects, so nothing else looks wrong."""

    def __init__(self, marker: Path, shape: tuple[int, ...] = ()):
        self.marker = str(marker)
        self.shape = shape

    def __reduce__(self):
        code = f"(open({self.marker!r}, 'w').write('pwned'), __import__('torch').nn.Parameter(__import__('torch').zeros({self.shape!r})))[1]"
        return (eval, (code,))


def craft_pickled_pt2(path: Path, marker: Path) -> Path:
    """A torch.export archive of a Linear(4, 2) whose weights are pickled objects that
    create ``marker`` when torch unpickles them (issue 15, reproduction 1)."""
    import torch

    ep = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))
    clean = path.with_suffix(".clean.pt2")
    torch.export.save(ep, str(clean))
    shapes = {"weight": (2, 4), "bias": (2,)}
    with zipfile.ZipFile(clean) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("data/weights/model_weights_config.json"):
                prefix = info.filename.rsplit("data/weights/", 1)[0]
                config = json.loads(data)
                for k, (fqn, meta) in enumerate(config["config"].items()):
                    meta["use_pickle"] = True
                    meta["path_name"] = f"evil_{k}"
                    buf = io.BytesIO()
                    torch.save(Evil(marker, shapes[fqn]), buf)
                    dst.writestr(f"{prefix}data/weights/evil_{k}", buf.getvalue())
                data = json.dumps(config).encode()
            dst.writestr(info, data)
    clean.unlink()
    return path


def craft_pickled_module(path: Path, marker: Path, legacy: bool = False) -> Path:
    """A .pt file holding a pickled object that creates ``marker`` when unpickled."""
    import torch

    torch.save({"model": Evil(marker, (1,))}, str(path), _use_new_zipfile_serialization=not legacy)
    return path


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """The side-effect file that must never appear."""
    return tmp_path / "PWNED"
