"""Issue 29: every attack route of the second round is closed at its cause (the loader, the
trust rule, the size check, the command-line check refuse on their own, unconfined), and the
file reproductions are live attacks (they run code once the checks are skipped)."""

from __future__ import annotations

import pytest

from tests.security.reproductions import ROUTES, live, run_route


@pytest.mark.parametrize("key", sorted(ROUTES))
def test_route_is_closed(key, tmp_path):
    finding = run_route(key, tmp_path)
    assert not finding.open, f"route {finding.route} is open: {finding.detail}"


@pytest.mark.parametrize("key", ["1", "3", "3c", "7"])
def test_file_reproductions_are_live_attacks(key, tmp_path):
    """With the checks skipped (trust_pickle), each crafted file runs its payload: the
    closed routes above are closed by the checks, not by a broken reproduction."""
    assert live(key, tmp_path) is True
