"""Every hand-written list of pass names names a registered pass (issue 30).

The search's seed stacks, the defaults of the jobs and commands, the forms' "made by" steps,
the runtimes' ``reached_by``, the passes' ``module_names_lost_after`` and the sample recipes
in resources/recipes name passes by string; a name that drifts from the registry is silently
dropped (a search seed) or fails late. Each list is read from where it lives, not copied here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accel.passes import list_passes, pass_names

ROOT = Path(__file__).resolve().parents[2]


def _known() -> set[str]:
    return set(pass_names()) | {cls.name for cls in list_passes(include_test=True)}


def _unknown(names, where: str) -> list[str]:
    known = _known()
    return [f"{where}: {name!r}" for name in names if name not in known]


# Names found unknown and not yet fixed (none: the OpenVINO int8 seed became
# openvino + quantize_openvino). Shrink only: an entry that is fixed must go (the test says so).
PENDING_SEEDS: set[str] = set()


def test_search_seeds_name_registered_passes():
    from accel.search.seeds import SEEDS

    problems = []
    for (family, device), chains in sorted(SEEDS.items()):
        for chain in chains:
            problems += _unknown(chain, f"SEEDS[{family}, {device}] {'+'.join(chain)}")
    new = [p for p in problems if p not in PENDING_SEEDS]
    assert not new, "seed stacks name passes that do not exist:\n" + "\n".join(new)
    fixed = PENDING_SEEDS - set(problems)
    assert not fixed, f"fixed, remove from PENDING_SEEDS: {sorted(fixed)}"


def test_defaults_name_registered_passes():
    import argparse

    from accel.job_specs import AnalyzeJob
    from accel.models import forms
    from accel.models.runtime import runtimes
    from studio.commands import analyze

    problems = _unknown([AnalyzeJob.model_fields["pass_name"].default], "AnalyzeJob.pass_name")
    sub = argparse.ArgumentParser().add_subparsers()
    analyze.register(sub)
    parser = sub.choices["analyze"]
    problems += _unknown([parser.get_default("pass_name")], "studio analyze --pass")
    made = [forms.made_by(f) for f in (forms.COMPILED, forms.SCRIPTED, forms.EXPORTED)]
    made += [forms.made_by(forms.CUDA_GRAPH), forms.made_by(forms.ONNX)]
    problems += _unknown([m for m in made if m], "accel.models.forms.made_by")
    problems += _unknown(
        [r.reached_by for r in runtimes() if r.reached_by], "a runtime's reached_by"
    )
    from accel.recipe_edits import KEEP_FLOAT_DEFAULT

    problems += _unknown(KEEP_FLOAT_DEFAULT.values(), "accel.recipe_edits.KEEP_FLOAT_DEFAULT")
    for cls in list_passes(include_test=True):
        lost = getattr(cls, "module_names_lost_after", ())
        problems += _unknown(lost, f"{cls.name}.module_names_lost_after")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "resources" / "recipes").glob("*.yaml")), ids=lambda p: p.name
)
def test_sample_recipes_name_registered_passes(path):
    recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    names = [step["pass"] for step in recipe.get("steps") or []]
    assert names, f"{path.name} has no steps"
    assert not _unknown(names, path.name)


def test_the_check_sees_an_unknown_name():
    assert _unknown(["fold_batchnorm", "openvino_int8_nope"], "x") == ["x: 'openvino_int8_nope'"]
