"""Issue 15, reproduction 4: recipe values enter exported scripts only as literals.

A corpus of hostile recipes: each is either refused with a clear error or exported; every
exported script parses (ast), and running all of them never creates the side-effect file."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from accel.codegen import recipe_to_script
from accel.errors import AccelError

FAST = {"warmup": 0, "iters": 1}


def _pwn(marker: Path) -> str:
    # Relative (no slash, so it also fits in a file name): the scripts run in tmp_path.
    return f"open({marker.name!r}, 'w').write('pwned')"


def _corpus(tmp_path: Path, marker: Path) -> dict[str, dict]:
    import torch

    pwn = _pwn(marker)
    base = {"model": {"source": "zoo:mlp"}, "benchmark": FAST, "steps": [{"pass": "bf16"}]}
    # File names cannot hold the parentheses of a call (the source syntax uses them), so the
    # injected line there would stop the script: its results.json must still appear.
    stop = "\nraise SystemExit\n#"
    weird_pt2 = tmp_path / f'm"""{stop}.pt2'
    ep = torch.export.export(torch.nn.Linear(8, 2), (torch.randn(1, 8),))
    torch.export.save(ep, str(weird_pt2))
    weird_py = tmp_path / f"f{stop}'.py"
    weird_py.write_text("import torch\ndef build():\n    return torch.nn.Linear(8, 2)\n")
    return {
        "clean": base,
        "step name with a newline": {**base, "steps": [{"pass": "bf16", "name": f"x\n{pwn}"}]},
        "step name with CR and line separators": {
            **base,
            "steps": [{"pass": "bf16", "name": f"x\r{pwn}\u2028{pwn}\x0c"}],
        },
        "recipe name closing the docstring": {**base, "name": f'a"""\n{pwn}\n"""'},
        "recipe name with backslashes": {**base, "name": 'a\\"""\\'},
        "factory kwargs as code": {
            **base,
            "model": {
                "source": f"zoo:mlp(in_features=__import__('os').system('touch {marker.name}') or 16)"
            },
        },
        "factory kwargs as code, spec given": {
            **base,
            "model": {
                "source": "zoo:mlp(in_features=__import__('os').getcwd() and 16)",
                "input_spec": "x:float32[batch,16]",
            },
        },
        "calibration spec closing a docstring": {
            **base,
            "data": {"calibration": f'synthetic(batches=2):x"""+{pwn}+"""'},
        },
        "train function name as code": {
            **base,
            "data": {"train": f"json:loads;{pwn}"},
        },
        "pt2 file name with quotes and newlines": {
            **base,
            "model": {"source": str(weird_pt2), "input_spec": "x:float32[batch,8]"},
        },
        "factory file name with a newline": {
            **base,
            "model": {"source": f"{weird_py}:build", "input_spec": "x:float32[batch,8]"},
        },
        "module name as code": {
            **base,
            "model": {"source": f"os;{pwn}:build", "input_spec": "x:float32[batch,8]"},
        },
    }


def test_hostile_recipes_export_only_literals(tmp_path, marker):
    scripts: dict[str, Path] = {}
    refused: dict[str, str] = {}
    for i, (what, recipe) in enumerate(_corpus(tmp_path, marker).items()):
        try:
            text = recipe_to_script(recipe)
        except AccelError as exc:
            refused[what] = str(exc)
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:  # pragma: no cover - the failure this test exists for
            pytest.fail(f"{what}: exported script does not parse: {exc}")
        # No call anywhere in the script opens the marker (as a string literal it may appear).
        opens = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "open"
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and n.args[0].value == marker.name
        ]
        assert not opens, what
        scripts[what] = tmp_path / f"script_{i}.py"
        scripts[what].write_text(text)
    expected_refusals = {
        "factory kwargs as code",
        "factory kwargs as code, spec given",
        "train function name as code",
        "module name as code",
    }
    assert expected_refusals == set(refused), refused
    assert "clean" in scripts and len(scripts) >= 7
    assert not marker.exists()

    # Run every exported script in one interpreter (one torch import); a failing script
    # (e.g. a model file that is not there) is fine, an injected line that runs is not.
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import runpy, sys, traceback\n"
        f"scripts = {[str(p) for p in scripts.values()]!r}\n"
        "for i, s in enumerate(scripts):\n"
        "    sys.argv = [s, '--out', s + '.out']\n"
        "    try:\n"
        "        runpy.run_path(s, run_name='__main__')\n"
        "        print('OK', i)\n"
        "    except BaseException as exc:\n"
        "        print('ERR', i, type(exc).__name__, exc)\n"
    )
    p = subprocess.run(
        [sys.executable, str(driver)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "OK 0" in p.stdout, p.stdout  # the clean script really ran
    for what in (
        "clean",
        "pt2 file name with quotes and newlines",
        "factory file name with a newline",
    ):
        assert (Path(str(scripts[what]) + ".out") / "results.json").is_file(), (what, p.stdout)
    assert not marker.exists(), p.stdout


def test_doc_text_cannot_close_a_docstring():
    from accel.codegen import doc_text

    for value in ['"""', 'a"""b', "\\", '\\"""', "x\ny", "\u2028", "'\"", "\x00"]:
        src = f'"""{doc_text(value)}"""\n# {doc_text(value)}\n'
        tree = ast.parse(src)
        assert len(tree.body) == 1
        assert "\n" not in doc_text(value)
