"""Issue 15, reproductions 1, 3 and 11: model files never run code without the user's opt-in."""

from __future__ import annotations

import pytest

from accel.errors import ModelLoadError
from accel.models import load_model
from tests.security.conftest import craft_pickled_module, craft_pickled_pt2


def test_pt2_with_pickled_weights_is_refused_before_torch_reads_it(tmp_path, marker):
    path = craft_pickled_pt2(tmp_path / "evil.pt2", marker)
    with pytest.raises(ModelLoadError, match="pickled Python object.*--trust-pickle"):
        load_model(str(path), "x:float32[batch,4]")
    assert not marker.exists()


def test_pt2_with_pickled_weights_loads_with_the_users_opt_in(tmp_path, marker):
    # The crafted file really is hostile: torch runs its code once the user allows it.
    path = craft_pickled_pt2(tmp_path / "evil.pt2", marker)
    lm = load_model(str(path), "x:float32[batch,4]", trust_pickle=True)
    assert marker.exists()
    assert lm.kind == "torch"


def test_clean_pt2_still_loads(tmp_path):
    import torch

    ep = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))
    torch.export.save(ep, str(tmp_path / "ok.pt2"))
    lm = load_model(str(tmp_path / "ok.pt2"))
    assert lm.forward(lm.example_inputs()).shape[-1] == 2


def test_pt2_with_pickled_sample_inputs_is_refused(tmp_path, marker):
    import io
    import zipfile

    import torch

    from tests.security.conftest import Evil

    ep = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))
    torch.export.save(ep, str(tmp_path / "ok.pt2"))
    bad = tmp_path / "bad.pt2"
    with zipfile.ZipFile(tmp_path / "ok.pt2") as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if "/sample_inputs/" in info.filename:
                buf = io.BytesIO()
                torch.save(((Evil(marker, (1, 4)),), {}), buf)
                data = buf.getvalue()
            dst.writestr(info, data)
    with pytest.raises(ModelLoadError, match="sample inputs"):
        load_model(str(bad))
    assert not marker.exists()


def test_pt2_cli_entry_points_refuse_it(tmp_path, marker, capsys):
    from studio.cli import main

    path = craft_pickled_pt2(tmp_path / "evil.pt2", marker)
    assert main(["graph", str(path), "--input", "x:float32[batch,4]"]) == 2
    assert "pickled" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize("legacy", [False, True])
def test_pickled_pt_refused_and_old_format_named(tmp_path, marker, legacy):
    path = craft_pickled_module(tmp_path / "m.pt", marker, legacy=legacy)
    with pytest.raises(ModelLoadError) as err:
        load_model(str(path), "x:float32[1]")
    assert not marker.exists()
    msg = str(err.value)
    assert "--trust-pickle" in msg
    if legacy:  # issue 15 (11): say what the file is, not "corrupt"
        assert "old-format" in msg and "corrupt" not in msg


def test_old_format_pickle_with_opt_in_is_named_not_corrupt(tmp_path, marker):
    path = craft_pickled_module(tmp_path / "m.pt", marker, legacy=True)
    with pytest.raises(ModelLoadError) as err:  # a dict, not a model: but read, not "corrupt"
        load_model(str(path), "x:float32[1]", trust_pickle=True)
    assert marker.exists()
    assert "corrupt" not in str(err.value)
