"""With a runtime's library unimportable, the rest of the studio works and says why that
runtime is unavailable (issue 30's proof that a runtime is a package of its own).

Every process of the test (the CLI and the workers it spawns) starts with a
``sitecustomize`` on PYTHONPATH that makes the library unimportable, as if it were not
installed (``sys.modules[name] = None``). Then: ``studio passes`` and the palette mark the runtime's passes
unavailable with the reason, a model file of the runtime is refused with it, every sample
recipe plans, and the quick sample recipes run (small iterations).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "resources" / "recipes").glob("*.yaml"))
QUICK = ("mlp_onnx", "transformer_int8")  # no torch.compile: seconds, not minutes

BLOCKER = """
import sys

# As if not installed: `import X` fails and importlib.util.find_spec("X") is None.
for _name in {names!r}:
    sys.modules[_name] = None
"""


def _env(tmp_path: Path, blocked: str) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(names={blocked}))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["ACCEL_STUDIO_HOME"] = str(tmp_path / "home")
    env.pop("ACCEL_STUDIO_PLUGINS", None)
    return env


def _studio(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "studio", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _python(env: dict[str, str], code: str, cwd: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return out.stdout


PALETTE = """
import json
import accel
from accel.models.runtime import availability
from accel.passes import get_pass
from accel.plan import palette
from accel.recipe import Step

print(json.dumps({
    "runtimes": availability("cpu"),
    "palette": {
        p.pass_name: p.problem
        for p in palette([Step.model_validate({"pass": "export_onnx"})], "eager", "cpu")
    },
    "libraries": {p.pass_name: list(get_pass(p.pass_name).requires.libraries)
                  for p in palette([], "eager", "cpu")},
}))
"""


def _quick_recipe(src: Path, folder: Path) -> Path:
    """``src`` with the fewest timing iterations (the steps and models as they are)."""
    data = yaml.safe_load(src.read_text())
    data["benchmark"].update(warmup=1, iters=2, rounds=1, min_time_s=0)
    out = folder / src.name
    out.write_text(yaml.safe_dump(data))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("blocked", ["openvino", "tensorrt"])
def test_the_studio_works_without_a_runtime(tmp_path, blocked):
    env = _env(tmp_path, blocked)
    kind = blocked  # the runtime's kind is its library's name for both

    # `studio passes`: the runtime's passes say why they cannot run; the runtime too.
    res = _studio(env, "passes", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    infos = {i["name"]: i for i in json.loads(res.stdout)}
    needing = {n for n, i in infos.items() if blocked in i["requires"]["libraries"]}
    assert needing, f"no pass needs {blocked}?"
    for name in needing:
        assert blocked in (infos[name]["unavailable"] or ""), infos[name]
    text = _studio(env, "passes", cwd=tmp_path).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{kind} ("))
    assert "unavailable" in line and blocked in line

    # The palette (what the Recipe panel shows) disables them with the reason; the rest
    # of the palette is as it is with every library (torch and ONNX passes still offered).
    facts = json.loads(_python(env, PALETTE, tmp_path))
    assert facts["runtimes"][kind] and blocked in facts["runtimes"][kind]
    assert facts["runtimes"]["torch"] is None and facts["runtimes"]["onnx"] is None
    for name, libs in facts["libraries"].items():
        if blocked in libs:
            assert facts["palette"][name] and blocked in facts["palette"][name], name
    assert facts["palette"]["onnxruntime"] is None and facts["palette"]["onnx_fp16"] is None

    # A model file of the runtime is refused with the reason, not a traceback.
    if blocked == "openvino":
        (tmp_path / "m.xml").write_text("<net/>")
        (tmp_path / "m.bin").write_bytes(b"\0")
        res = _studio(env, "profile", str(tmp_path / "m.xml"), cwd=tmp_path)
        assert res.returncode == 2 and "OpenVINO, which cannot run here" in res.stderr
        assert "Traceback" not in res.stderr

    # Every sample recipe plans (none needs the runtime); the quick ones run in workers.
    for recipe in SAMPLES:
        res = _studio(env, "run", str(recipe), "--dry-run", cwd=tmp_path)
        assert res.returncode == 0, (recipe.name, res.stdout, res.stderr)
    quick = tmp_path / "recipes"
    quick.mkdir()
    for name in QUICK:
        recipe = _quick_recipe(ROOT / "resources" / "recipes" / f"{name}.yaml", quick)
        res = _studio(env, "run", str(recipe), "--out", str(tmp_path / "runs" / name), cwd=tmp_path)
        assert res.returncode == 0, (name, res.stdout[-2000:], res.stderr[-2000:])
        assert "succeeded" in res.stdout
