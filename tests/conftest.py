"""Shared fixtures: a quiet torch and a temporary studio data folder."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# Under pytest-xdist (`make test`) the workers share the machine's cores: each worker, and the
# processes it starts, gets its share of threads, so that two torch or OpenMP pools do not
# fight over one core (set before torch is imported; a test's explicit thread count wins).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
if _WORKERS > 1:
    _SHARE = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, _SHARE)


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
