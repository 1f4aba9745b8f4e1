"""Shared fixtures: a quiet torch and a temporary studio data folder."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _studio_home(tmp_path_factory, monkeypatch):
    """Keep every test's database and settings out of the user's folders."""
    home = tmp_path_factory.mktemp("studio-home")
    monkeypatch.setenv("ACCEL_STUDIO_HOME", str(home))
    # Runs skip saving every torch step as model.pt2 (torch.export per step adds minutes to
    # the suite); the tests of that feature turn it back on.
    monkeypatch.setenv("ACCEL_SAVE_STEP_MODELS", "0")
    # No warm worker per test window (each would import torch in the background); the tests
    # of the warm worker and of the GUI's responsiveness turn it on.
    monkeypatch.setenv("ACCEL_STUDIO_WARM_WORKER", "0")
    yield
