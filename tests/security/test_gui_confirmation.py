"""Issue 15 (2, 3) in the studio: a recipe's code runs only after the user confirms it, and
trust to unpickle comes from the Open dialog, never from the recipe."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")


class FakePool:
    lanes = []

    def __init__(self) -> None:
        self.submitted: list[tuple[str, dict]] = []

    def subscribe(self, fn):
        return lambda: None

    def submit(self, kind, params=None, **kw):
        self.submitted.append((kind, dict(params or {})))

        class H:
            job_id = f"job{len(self.submitted)}"
            run_id = None

        return H()

    def cancel(self, job_id, reason=""):
        pass

    def shutdown(self, **kw):
        pass


@pytest.fixture
def services(qtbot):
    from studio.services import Services
    from studio.state import AppState

    s = Services(AppState(), pool=FakePool(), open_store=False)
    yield s


RECIPE = {
    "model": {
        "source": "my_pkg.nets:build",
        "input_spec": "x:float32[batch,8]",
        "trust_pickle": True,
    },
    "data": {"calibration": "my_data.py:batches"},
    "steps": [{"pass": "bf16"}],
}


def test_unconfirmed_recipe_code_does_not_run(services, qtbot):
    asked = []
    services.confirm_code = lambda refs: asked.append(refs) or False
    with qtbot.waitSignal(services.jobFailed) as sig:
        assert services.run_recipe(RECIPE) is None
    assert services.pool.submitted == []
    assert asked == [["my_pkg.nets:build", "my_data.py:batches"]]
    assert "not confirmed" in sig.args[1]


def test_no_confirmation_hook_means_no(services):
    services.confirm_code = None
    assert services.run_recipe(RECIPE) is None
    assert services.pool.submitted == []


def test_confirmed_code_runs_with_the_opt_in_and_without_pickle_trust(services):
    services.confirm_code = lambda refs: True
    assert services.run_recipe(RECIPE)
    kind, params = services.pool.submitted[-1]
    assert kind == "run_recipe" and params["trust_recipe_code"] is True
    assert "trust_pickle" not in params  # the recipe's own trust_pickle grants nothing


def test_the_model_the_user_opened_needs_no_confirmation(services):
    services.confirm_code = lambda refs: pytest.fail(f"asked about {refs}")
    services.open_model("my_pkg.nets:build", trust_pickle=True)
    recipe = {**RECIPE, "data": {}}
    assert services.run_recipe(recipe)
    _, params = services.pool.submitted[-1]
    assert params["trust_recipe_code"] is True and params["trust_pickle"] is True


def test_zoo_recipes_are_not_asked_about(services):
    services.confirm_code = lambda refs: pytest.fail("asked")
    assert services.run_recipe({"model": {"source": "zoo:mlp"}, "steps": [{"pass": "bf16"}]})
    assert "trust_recipe_code" not in services.pool.submitted[-1][1]
