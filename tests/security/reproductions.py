"""Issue 29's attack routes as reproductions: each builds its hostile input in a folder, tries
it, and says whether the route is open (a canary file appeared, a secret was read, a
command was accepted). Used by tests/security/test_routes.py (each must be closed) and by
bench/bench_security.py (the tally).

Each reproduction tries the route at its cause, in this process and without the box (the
loader, the trust rule, the size check must refuse on their own), and, where a command is
the route, through the command as a person types it (which runs the model in a confined
worker).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Finding:
    route: str
    open: bool
    detail: str


class _Canary:
    """Unpickled, it writes ``path`` and returns ``value`` (an expression)."""

    def __init__(self, path: Path, value: str = "{}") -> None:
        self.path, self.value = str(path), value

    def __reduce__(self):
        return (eval, (f"(open({self.path!r}, 'w').write('x'), {self.value})[1]",))


def _payload(canary: Path, value: str = "{}") -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(_Canary(canary, value), buf)
    return buf.getvalue()


def _clean_pt2(path: Path) -> Path:
    import torch

    ep = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))
    torch.export.save(ep, str(path))
    return path


def _rewrite(src: Path, dst: Path, add: dict[str, bytes], change=None) -> Path:
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        root = z.namelist()[0].split("/", 1)[0]
        for info in z.infolist():
            data = z.read(info.filename)
            if change is not None:
                data = change(info.filename[len(root) + 1 :], data)
            out.writestr(info, data)
        for name, data in add.items():
            out.writestr(f"{root}/{name}", data)
    return dst


def _load(source: str, spec: str | None = None, **kw) -> str:
    """Load in this process, unconfined: '' if it loaded, else the error."""
    from accel.models import load_model

    try:
        load_model(source, spec, **kw)
    except Exception as exc:  # noqa: BLE001 - the refusal is what is measured
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    return ""


def _studio(*argv: str, cwd: Path | None = None, env: dict | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "studio", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, (proc.stdout + proc.stderr)[-400:]


def _file_route(name: str, build: Callable[[Path, Path], Path], tmp: Path, **kw) -> Finding:
    canary = tmp / "CANARY"
    path = build(tmp, canary)
    error = _load(str(path), kw.pop("spec", None), **kw)
    return Finding(name, canary.exists() or not error, error or "loaded")


def live(key: str, tmp: Path) -> bool | None:
    """Is file reproduction ``key`` a live attack? Loaded with trust_pickle (the checks it
    must pass are then skipped), in this process: True if its canary appeared. None for
    routes that are not files."""
    builders = {
        "1": _legacy("data/weights/model.pt"),
        "2": _legacy("data/constants/model.pt"),
        "3": _second_model,
        "3c": _sympy_shape,
        "7": _ts_write,
    }
    if key not in builders:
        return None
    tmp.mkdir(parents=True, exist_ok=True)
    canary = tmp / "CANARY"
    path = builders[key](tmp, canary)
    _load(str(path), "x:float32[1,4]" if key == "7" else None, trust_pickle=True)
    return canary.exists()


# -- routes 1-3: .pt2 archives ------------------------------------------------------------


def _legacy(member: str) -> Callable[[Path, Path], Path]:
    def build(tmp: Path, canary: Path) -> Path:
        clean = _clean_pt2(tmp / "clean.pt2")
        return _rewrite(clean, tmp / "evil.pt2", {member: _payload(canary)})

    return build


def _second_model(tmp: Path, canary: Path) -> Path:
    clean = _clean_pt2(tmp / "clean.pt2")
    with zipfile.ZipFile(clean) as z:
        root = z.namelist()[0].split("/", 1)[0]
        program = z.read(f"{root}/models/model.json")
        sample = z.read(f"{root}/data/sample_inputs/model.pt")
        config = json.loads(z.read(f"{root}/data/weights/model_weights_config.json"))
    for k, meta in enumerate(config["config"].values()):
        meta.update(use_pickle=True, path_name=f"evil_{k}")
    add = {
        "models/evil.json": program,
        "data/weights/evil_weights_config.json": json.dumps(config).encode(),
        "data/sample_inputs/evil.pt": sample,
        "data/constants/evil_constants_config.json": b'{"config": {}}',
    }
    add.update({f"data/weights/evil_{k}": _payload(canary) for k in range(2)})
    return _rewrite(clean, tmp / "evil.pt2", add)


def _aoti_member(tmp: Path, canary: Path) -> Path:
    clean = _clean_pt2(tmp / "clean.pt2")
    return _rewrite(clean, tmp / "evil.pt2", {"data/aotinductor/model/model.so": b"\x7fELF"})


def _sympy_shape(tmp: Path, canary: Path) -> Path:
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return x * 2

    dim = {"x": {0: torch.export.Dim("b", min=2, max=64)}}
    ep = torch.export.export(Model(), (torch.randn(4, 3),), dynamic_shapes=dim)
    clean = tmp / "dyn.pt2"
    torch.export.save(ep, str(clean))
    code = f"__import__('builtins').open({str(canary)!r}, 'w').write('x') and 0 or s77"

    def change(rel: str, data: bytes) -> bytes:
        if rel == "models/model.json":
            text = data.decode()
            text = text.replace("Symbol('s77', positive=True, integer=True)", code, 1)
            return text.encode()
        return data

    return _rewrite(clean, tmp / "evil.pt2", {}, change)


# -- routes 7-8: TorchScript file ops -------------------------------------------------------


def _script(tmp: Path, forward_src: str, name: str) -> Path:
    import torch

    mod = tmp / f"{name}_def.py"
    mod.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        f"        {forward_src}\n"
    )
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_ts_{name}", mod)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp / f"{name}.pt"
    torch.jit.script(module.M()).save(str(path))
    return path


def _ts_write(tmp: Path, canary: Path) -> Path:
    src = (
        f"y = torch.from_file({str(canary)!r}, shared=True, size=16, dtype=torch.uint8)"
        ".fill_(65)\n        return x + y.float().sum()"
    )
    return _script(tmp, src, "ts_write")


def _ts_read(tmp: Path, canary: Path) -> Path:
    secret = tmp / "secret.txt"
    secret.write_text("SECRET" * 4)
    src = (
        f"y = torch.from_file({str(secret)!r}, shared=False, size=16, dtype=torch.uint8)\n"
        "        return x + y.float().sum()"
    )
    return _script(tmp, src, "ts_read")


# -- routes 4-6: trust ----------------------------------------------------------------------


def _evil_factory(tmp: Path, canary: Path) -> Path:
    f = tmp / "evil_model.py"
    f.write_text(
        f"open({str(canary)!r}, 'w').write('x')\n"
        "import torch\n"
        "def build():\n"
        "    return torch.nn.Linear(4, 2)\n"
    )
    return f


def route_bisect(tmp: Path) -> Finding:
    """4: a run folder whose recipe.json names a factory; bisect without an opt-in."""
    from accel.graph.layer_parity import bisect_run

    canary = tmp / "CANARY"
    f = _evil_factory(tmp, canary)
    run = tmp / "run"
    (run / "step_00_bf16").mkdir(parents=True)
    recipe = {"model": {"source": f"{f}:build", "input_spec": "x:float32[1,4]"}, "steps": []}
    (run / "recipe.json").write_text(json.dumps(recipe))
    try:
        bisect_run(run)
        error = ""
    except Exception as exc:  # noqa: BLE001
        error = f"{type(exc).__name__}: {str(exc)[:120]}"
    rc, out = _studio("bisect", str(run), cwd=tmp)
    detail = f"{error or 'ran'}; studio bisect rc {rc}"
    return Finding("4 bisect RUN_FOLDER", canary.exists() or not error or rc == 0, detail)


def route_rerun(tmp: Path) -> Finding:
    """5: a stored run whose job params name a factory as --model; `studio rerun` it."""
    from studio.store import Repository

    canary = tmp / "CANARY"
    f = _evil_factory(tmp, canary)
    db = tmp / "studio.db"
    repo = Repository.open(str(db))
    recipe = {
        "name": "r",
        "model": {"source": "zoo:mlp", "input_spec": "x:float32[1,4]"},
        "steps": [{"pass": "bf16"}],
    }
    run = repo.create_run(
        model_source="zoo:mlp",
        recipe=recipe,
        job_params={"kind": "run_recipe", "params": {"recipe": recipe, "model": f"{f}:build"}},
        device="cpu",
        status="succeeded",
    )
    repo.close()
    rc, out = _studio("--db", str(db), "rerun", run.id, "--out", str(tmp / "again"), cwd=tmp)
    told = "zoo:mlp" not in out.split("re-running", 1)[-1][:200]
    refused = rc == 1 and "--trust-recipe-code" in out
    return Finding(
        "5 rerun of a stored run",
        canary.exists() or not refused or not told,
        f"rc {rc}, asks for --trust-recipe-code: {refused}; names the real source: {told}",
    )


def route_factory_guard(tmp: Path) -> Finding:
    """6: a library function annotated -> nn.Module that execs its argument."""
    canary = tmp / "CANARY"
    block = f"open({str(canary)!r}, 'w').write('x')"
    source = f"torch.fx.graph_module:reduce_graph_module(body={{}}, import_block={block!r})"
    error = _load(source, "x:float32[1,4]")
    rc, _ = _studio("profile", source, "--input", "x:float32[1,4]", "--iters", "1", cwd=tmp)
    return Finding("6 factory guard", canary.exists() or not error or rc == 0, error or "ran")


# -- route 11: memory -----------------------------------------------------------------------


def route_input_size(tmp: Path) -> Finding:
    """11a: the size check counts what sampling holds (bool drawn as int64...)."""
    from accel.models.inputs import InputSpec

    spec = InputSpec.parse("x:bool[1000,95000]")
    counted = spec.peak_bytes()
    ok = counted >= 9 * 1000 * 95000
    return Finding("11a input-size check", not ok, f"counts {counted / 1e6:.0f} MB")


def route_export_script(tmp: Path) -> Finding:
    """11b: export-script builds no model in the CLI process; absurd sizes are an error."""
    recipe = tmp / "r.yaml"
    recipe.write_text("name: r\nmodel: {source: 'zoo:mlp(hidden=12000)'}\nsteps: [{pass: bf16}]\n")
    # The command runs with the model builders and loaders replaced by recorders.
    code = (
        "import resource, accel.models as m, accel.models.sources as s, accel.models.zoo as z\n"
        "calls = []\n"
        "def record(*a, **k):\n    calls.append(a)\n    raise RuntimeError('built')\n"
        "m.load_model = s.load_model = z.build_zoo_model = record\n"
        "from studio.cli import main\n"
        f"rc = main(['export-script', {str(recipe)!r}, '-o', {str(tmp / 's.py')!r}])\n"
        "print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rc, len(calls))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    fields = out.stdout.split("PEAK", 1)[1].split() if "PEAK" in out.stdout else ["0", "1", "1"]
    peak_kb, wrote, built = int(fields[0]), fields[1] == "0", int(fields[2]) > 0
    recipe.write_text("name: r\nmodel: {source: 'zoo:mlp(hidden=10**12)'}\nsteps: [{pass: bf16}]\n")
    rc, text = _studio("export-script", str(recipe), "-o", str(tmp / "t.py"), cwd=tmp)
    return Finding(
        "11b export-script builds no model",
        built or not wrote or rc != 2 or "Traceback" in text,
        f"built a model: {built}, peak {peak_kb / 1024:.0f} MiB; hidden=10**12: rc {rc}",
    )


# -- low severity ---------------------------------------------------------------------------


def route_deploy_name(tmp: Path) -> Finding:
    rc, text = _studio("deploy", "nothing", "--triton", str(tmp / "repo"), "--name", "../escape")
    rc2, _ = _studio("deploy", "nothing", "--triton", str(tmp / "repo"), "--name", "a\nb")
    accepted = "--name" not in text or rc != 2 or rc2 != 2
    return Finding("low: deploy --name", accepted, f"rc {rc}, {rc2}")


def route_cluster_auto(tmp: Path) -> Finding:
    from accel.search.ray_cluster import SearchError, resolve_auto

    folder = tmp / "ray"
    folder.mkdir()
    planted = folder / "ray_current_cluster"
    planted.write_text("203.0.113.7:6379")
    os.chmod(folder, 0o777)  # as if another user made /tmp/ray for everyone
    old = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(tmp)
    env_addr = os.environ.pop("RAY_ADDRESS", None)
    try:
        resolve_auto("auto")
        followed = True
    except SearchError:
        followed = False
    finally:
        os.chmod(folder, 0o755)
        if old is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = old
        if env_addr is not None:
            os.environ["RAY_ADDRESS"] = env_addr
    return Finding(
        "low: --cluster auto", followed, "planted file followed" if followed else "refused"
    )


def route_readonly_message(tmp: Path) -> Finding:
    from studio.store import Repository
    from studio.store.repo import Repository as Repo

    db = tmp / "ro" / "studio.db"
    db.parent.mkdir()
    Repository.open(str(db)).close()
    repo = Repo._open_read_only(db)
    try:
        repo.check_writable()
        message = ""
    except Exception as exc:  # noqa: BLE001
        message = str(exc)
    finally:
        repo.close()
    mangled = "file%3A" in message or "immutable" in message or str(db) not in message
    return Finding("low: read-only database message", mangled, message[:100])


ROUTES: dict[str, Callable[[Path], Finding]] = {
    "1": lambda t: _file_route("1 .pt2 legacy weights", _legacy("data/weights/model.pt"), t),
    "2": lambda t: _file_route("2 .pt2 legacy constants", _legacy("data/constants/model.pt"), t),
    "3": lambda t: _file_route("3 .pt2 second model", _second_model, t),
    "3b": lambda t: _file_route(".pt2 AOTInductor library", _aoti_member, t),
    "3c": lambda t: _file_route(".pt2 shape expression (sympify)", _sympy_shape, t),
    "4": route_bisect,
    "5": route_rerun,
    "6": route_factory_guard,
    "7": lambda t: _file_route("7 TorchScript file write", _ts_write, t, spec="x:float32[1,4]"),
    "8": lambda t: _file_route("8 TorchScript file read", _ts_read, t, spec="x:float32[1,4]"),
    "11a": route_input_size,
    "11b": route_export_script,
    "low-name": route_deploy_name,
    "low-cluster": route_cluster_auto,
    "low-db": route_readonly_message,
}


def run_route(key: str, tmp: Path) -> Finding:
    """Run reproduction ``key`` in ``tmp``; a reproduction that breaks counts as open."""
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        return ROUTES[key](tmp)
    except Exception as exc:  # noqa: BLE001 - reported, never hidden
        return Finding(key, True, f"the reproduction failed: {type(exc).__name__}: {exc}")
