"""The box of a job: what a job reads and writes, computed from its JobSpec and the
folders its declaration names (``accel.job_registry.JobFolders``), for
``studio.workers.confine`` to apply in the job's own process."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import accel.jobs  # noqa: F401 - declares the engine's jobs
from accel.job_registry import PLUGIN_FOLDERS, JobFolders, find_declaration
from accel.models.corpus import CORPUS_PREFIXES
from accel.sandbox import Box
from studio.workers.protocol import JobSpec

_BUILT_IN = ("zoo:", "synthetic", *CORPUS_PREFIXES)  # built from code, no file to read


def _resolve(path: str | Path, cwd: Path) -> Path:
    p = Path(os.path.expanduser(str(path)))
    return (p if p.is_absolute() else cwd / p).resolve()


def source_paths(source: Any, cwd: Path) -> list[Path]:
    """Folders a model or data source reads: a file's folder, a ``file.py:fn``'s folder, an
    importable ``pkg.mod:fn``'s package (found without importing it), ``@weights``' folder."""
    if not isinstance(source, str) or not source.strip():
        return []
    text = source.strip()
    if text.startswith("synthetic-labelled:"):
        text = text.partition(":")[2]
    head, _, weights = text.partition("@")
    out = _source_paths(weights.strip(), cwd) if weights.strip() else []
    return out + _source_paths(head.split("(", 1)[0].strip(), cwd)


def _source_paths(target: str, cwd: Path) -> list[Path]:
    if not target or target.startswith(_BUILT_IN):
        return []
    mod, sep, _ = target.rpartition(":")
    if sep and mod and not (len(mod) == 1 and mod.isalpha()):
        if mod.endswith(".py") or "/" in mod or os.sep in mod:
            return [_resolve(mod, cwd).parent]
        return _package_paths(mod.split(".", 1)[0], cwd)
    path = _resolve(target, cwd)
    return [path if path.is_dir() else path.parent]


def _package_paths(top: str, cwd: Path) -> list[Path]:
    """Where the top-level package ``top`` lives (``find_spec`` of a top-level name runs no
    code of it). The caller's folder is on the worker's path, as ``python -m`` puts it."""
    added = str(cwd) not in sys.path
    if added:
        sys.path.insert(0, str(cwd))
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(str(cwd))
    if spec is None:
        return []
    places = list(spec.submodule_search_locations or [])  # a package: its folder(s)
    if not places and spec.origin and spec.origin not in ("built-in", "frozen"):
        places.append(spec.origin)  # a single module: that file
    return [Path(p).resolve() for p in places]


def _recipe_sources(recipe: Any, cwd: Path) -> tuple[list[str], list[Path]]:
    """(sources the recipe names, files/folders of the recipe itself)."""
    files: list[Path] = []
    if isinstance(recipe, str):
        path = _resolve(recipe, cwd)
        files.append(path.parent)
        try:
            from accel.recipe import load_recipe

            recipe = load_recipe(path).to_dict()
        except Exception:  # noqa: BLE001 - the job reports a bad recipe itself
            return [], files
    if not isinstance(recipe, Mapping):
        return [], files
    model = recipe.get("model")
    sources = [model.get("source") if isinstance(model, Mapping) else model]
    data = recipe.get("data") if isinstance(recipe.get("data"), Mapping) else {}
    sources += [data.get(k) for k in ("calibration", "train", "eval", "metric")]
    return [s for s in sources if isinstance(s, str)], files


def job_box(spec: JobSpec, cwd: Path, tmp: Path) -> Box:
    """The box of ``spec``: what its kind reads and writes (see the module docstring).
    May set ``spec.params["port"]`` (a serve test binds only ports chosen before the box)."""
    params = spec.params
    decl = find_declaration(spec.kind)
    folders = decl.folders if decl is not None else PLUGIN_FOLDERS
    read, write, sources = _declared_paths(folders, params, cwd)
    write.insert(0, tmp)
    for source in sources:
        read += source_paths(source, cwd)
    read += _plugin_paths(spec.plugins, cwd)
    ports: tuple[int, ...] = ()
    families: tuple[int, ...] = ()
    if folders.network:
        ports = _serve_ports(params)
        families = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)
        read += [Path("/etc/hosts"), Path("/etc/host.conf"), Path("/etc/gai.conf")]
        # PyTriton starts the server on a pty; Triton makes its temp folders in /tmp,
        # whatever TMPDIR says (its path is compiled in).
        write += [Path("/dev/ptmx"), Path("/dev/pts"), Path("/tmp")]
    gpu = str(spec.device or "").startswith("cuda")
    return Box(tuple(read), tuple(write), ports, families, gpu)


def _declared_paths(
    folders: JobFolders, params: dict[str, Any], cwd: Path
) -> tuple[list[Path], list[Path], list[Any]]:
    """(read, write, model/data sources) of a job whose declaration names ``folders``."""
    read: list[Path] = []
    write: list[Path] = []
    model = params.get("model")
    if isinstance(model, Mapping):  # a search trial's ModelRef
        model = model.get("source")
    sources: list[Any] = [model, params.get("model_b")]
    data = params.get("data")
    if isinstance(data, Mapping):  # a recipe's data section
        sources += [data.get(k) for k in ("calibration", "train", "eval", "metric")]
    else:
        sources.append(data)
    if folders.recipe:
        names, files = _recipe_sources(params.get("recipe") or {}, cwd)
        sources += names
        read += files
        cache = params.get("cache")
        if isinstance(cache, Mapping) and isinstance(cache.get("dir"), str):
            write.append(_made(_resolve(cache["dir"], cwd)))
        out = params.get("out")
        write.append(_made(_resolve(out, cwd) if isinstance(out, str) else cwd / "runs"))
    for key in folders.reads:
        if isinstance(params.get(key), str) and params[key]:
            path = _resolve(params[key], cwd)
            read.append(path if path.is_dir() else path.parent)
    for key in folders.writes:
        if isinstance(params.get(key), str) and params[key]:
            write.append(_made(_resolve(params[key], cwd)))
    for key in folders.writes_beside:
        if isinstance(params.get(key), str) and params[key]:
            write.append(_made(_resolve(params[key], cwd).parent))
    for key in folders.touches:
        if isinstance(params.get(key), str) and params[key]:
            write.append(_touched(_resolve(params[key], cwd)))
    return read, write, sources


def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _touched(path: Path) -> Path:
    """A file the job writes: created now, so the box can name the file, not its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=True)
    return path


def _plugin_paths(plugins: Iterable[str], cwd: Path) -> list[Path]:
    out: list[Path] = []
    for name in plugins:
        if name.endswith(".py") or os.sep in name:
            out.append(_resolve(name, cwd).parent)
        else:
            out += _package_paths(name.split(".", 1)[0], cwd)
    return out


def _serve_ports(params: dict[str, Any]) -> tuple[int, ...]:
    """HTTP, gRPC and metrics ports of a serve test: the given base port, else three
    consecutive free loopback ports picked now (the box allows no other)."""
    base = params.get("port")
    if not isinstance(base, int):
        base = _free_port_run(3)
        params["port"] = base
    return (base, base + 1, base + 2)


def _free_port_run(count: int) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + count > 65535:
            continue
        free = True
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    free = False
                    break
        if free:
            return base
    raise OSError("no three consecutive free ports on 127.0.0.1")
