"""Issue 29 (3): before a person trusts a pickle, they see what it imports."""

from __future__ import annotations

import io

import pytest

from accel.errors import ModelLoadError
from accel.models import load_model
from accel.models.pickle_scan import file_imports, notable_imports, pickle_imports
from tests.security.conftest import craft_pickled_module


def test_the_refusal_lists_what_the_pickle_imports(tmp_path, marker):
    path = craft_pickled_module(tmp_path / "evil.pt", marker)
    with pytest.raises(ModelLoadError, match=r"its pickles import builtins\.eval") as info:
        load_model(str(path), "x:float32[1,4]")
    assert "--trust-pickle" in str(info.value)
    assert not marker.exists()


def test_imports_of_a_state_dict_are_routine_and_of_a_module_are_named():
    import torch

    buf = io.BytesIO()
    torch.save(torch.nn.Linear(2, 2).state_dict(), buf)
    assert notable_imports(pickle_imports(buf.getvalue())) == []
    buf = io.BytesIO()
    torch.save(torch.nn.Linear(2, 2), buf)
    assert "torch.nn.modules.linear.Linear" in pickle_imports(buf.getvalue())


def test_old_format_pickles_are_read_too(tmp_path, marker):
    path = craft_pickled_module(tmp_path / "old.pt", marker, legacy=True)
    assert "builtins.eval" in file_imports(path)
    assert not marker.exists()


def test_the_open_dialog_shows_the_imports_when_trust_is_ticked(qtbot, tmp_path, marker):
    from studio.ui.open_model_dialog import OpenModelDialog

    path = craft_pickled_module(tmp_path / "evil.pt", marker)
    dialog = OpenModelDialog()
    qtbot.addWidget(dialog)
    dialog.tabs.setCurrentIndex(0)
    dialog.path.setText(str(path))
    assert dialog.pickle_facts.text() == ""
    dialog.trust.setChecked(True)
    qtbot.waitUntil(lambda: "builtins.eval" in dialog.pickle_facts.text(), timeout=10_000)
    dialog.trust.setChecked(False)
    assert dialog.pickle_facts.text() == ""
    assert not marker.exists()
