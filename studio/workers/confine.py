"""Each job runs in a box: a child forked from its worker, confined to that job's folders.

A worker (one-shot or warm) imports what it needs once; for every job it forks a child that
computes the job's :class:`accel.sandbox.Box` from its JobSpec (:func:`job_box`), makes a
private temp folder its ``TMPDIR`` and ``HOME``, confines itself (``accel.sandbox.confine``:
Landlock + a socket filter) and only then loads the model and runs the job. Landlock rules
cannot be relaxed, so the box is per job; the fork after the imports (a zygote) keeps the
start cheap. The worker itself stays unconfined: it reads the pool's messages, forwards a
``cancel`` to the child (SIGUSR1) and, when the child dies without finishing, dies the same
way, so the pool sees a crash exactly as it did when jobs ran in the worker itself.

What a job may read: its model's folder (a factory's file or package), its recipe and data
files, a run folder it inspects, plugin files, the Python environment and system libraries.
What it may write: its run or output folder, its private temp folder, ``/dev/shm``. No
sockets, except TCP on the loopback ports a serve test was given. ``ACCEL_STUDIO_UNCONFINED=1``
(set by the person, never by a file) turns the box off, loudly.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib.util
import logging
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from accel.sandbox import Box, confine
from studio.workers.protocol import Done, JobSpec, MessageWriter

log = logging.getLogger(__name__)

UNCONFINED_ENV = "ACCEL_STUDIO_UNCONFINED"
_PR_SET_PDEATHSIG = 1
_BUILT_IN = ("zoo:", "hf:", "tv:", "synthetic")
# Jobs that read a run folder without writing to it.
RUN_READERS = frozenset({"graph_diff", "bisect"})


_WORKER_PID: int | None = None  # in a job's child: the worker it was forked from


def worker_pid() -> int:
    """The worker process's pid (the one the pool started), also inside a job's child."""
    return _WORKER_PID or os.getpid()


def confinement_note() -> str:
    """What a person must know about the box on this machine: '' when every job is fully
    confined, else one sentence (no Landlock, an old ABI, the box turned off)."""
    from accel.sandbox import availability

    if confinement_off():
        return (
            f"{UNCONFINED_ENV} is set: models run without the box (they can read and write "
            "anything you can, and use the network)"
        )
    return availability()


def confinement_off() -> bool:
    return os.environ.get(UNCONFINED_ENV, "").strip().lower() in ("1", "true", "yes")


# -- what a job touches -----------------------------------------------------------------


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
    read, write, sources = _kind_paths(spec.kind, params, cwd)
    write.insert(0, tmp)
    if isinstance(params.get("trace_path"), str):
        write.append(_touched(_resolve(params["trace_path"], cwd)))
    for source in sources:
        read += source_paths(source, cwd)
    read += _plugin_paths(spec.plugins, cwd)
    ports: tuple[int, ...] = ()
    families: tuple[int, ...] = ()
    if spec.kind == "serve_test":
        ports = _serve_ports(params)
        families = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)
        read += [Path("/etc/hosts"), Path("/etc/host.conf"), Path("/etc/gai.conf")]
        # PyTriton starts the server on a pty; Triton makes its temp folders in /tmp,
        # whatever TMPDIR says (its path is compiled in).
        write += [Path("/dev/ptmx"), Path("/dev/pts"), Path("/tmp")]
    gpu = str(spec.device or "").startswith("cuda")
    return Box(tuple(read), tuple(write), ports, families, gpu)


def _kind_paths(
    kind: str, params: dict[str, Any], cwd: Path
) -> tuple[list[Path], list[Path], list[Any]]:
    """(read, write, model/data sources) of a job of ``kind`` with ``params``."""
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
    if kind in ("run_recipe", "search_trial"):
        names, files = _recipe_sources(params.get("recipe") or {}, cwd)
        sources += names
        read += files
        cache = params.get("cache")
        if isinstance(cache, Mapping) and isinstance(cache.get("dir"), str):
            write.append(_made(_resolve(cache["dir"], cwd)))
        out = params.get("out")
        write.append(_made(_resolve(out, cwd) if isinstance(out, str) else cwd / "runs"))
    elif kind == "export_onnx" and isinstance(params.get("out"), str):
        write.append(_made(_resolve(params["out"], cwd).parent))
    elif kind in RUN_READERS and isinstance(params.get("run_dir"), str):
        read.append(_resolve(params["run_dir"], cwd))
    elif kind == "deploy" and isinstance(params.get("artifact_path"), str):
        artifact = _resolve(params["artifact_path"], cwd)
        read.append(artifact if artifact.is_dir() else artifact.parent)
        if isinstance(params.get("out"), str):
            write.append(_made(_resolve(params["out"], cwd)))
    elif kind == "serve_test" and isinstance(params.get("artifact_path"), str):
        artifact = _resolve(params["artifact_path"], cwd)
        read.append(artifact if artifact.is_dir() else artifact.parent)
    elif isinstance(params.get("run_dir"), str) and params["run_dir"]:
        write.append(_made(_resolve(params["run_dir"], cwd)))  # plugin jobs: their run folder
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


# -- the fork --------------------------------------------------------------------------


RunJob = Callable[[Any, JobSpec, threading.Event], None]


def run_confined(run_job: RunJob, proto: Any, spec: JobSpec, cancelled: threading.Event) -> None:
    """Run ``run_job(proto, spec, event)`` in a confined child of this worker and wait for it.
    ``cancelled`` (set by this worker's stdin reader) is forwarded to the child as SIGUSR1.
    A child that dies without finishing takes this worker down the same way (the pool then
    records the crash as before)."""
    if confinement_off():
        log.warning("%s is set: this job runs unconfined", UNCONFINED_ENV)
        run_job(proto, spec, cancelled)
        return
    proto.flush()
    sys.stderr.flush()
    gc.freeze()  # the child's collector then leaves the worker's objects (and pages) alone
    tmp = Path(tempfile.mkdtemp(prefix="accel-job-"))
    # A SIGTERM to the worker's group reaches the child too: the worker outlives it and then
    # ends as the child did (a child that ignores SIGTERM is killed, and so reported).
    term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        signal.signal(signal.SIGTERM, term)
        _child(run_job, proto, spec, tmp)
    try:
        status = _wait(pid, cancelled)
    finally:
        signal.signal(signal.SIGTERM, term)
        shutil.rmtree(tmp, ignore_errors=True)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        sys.stderr.write(f"worker: the job's process died of signal {sig}\n")
        sys.stderr.flush()
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.flush()
        os._exit(code)


def warm_zygote() -> None:
    """Pay once, in a warm worker, the first-use costs a job's child would pay every time
    (lazy imports, kernel dispatch tables, allocator pools): build and run a zoo model on
    one thread (no OpenMP team is started, so forking stays safe). The studio's own model,
    not a user's: nothing here needs the box."""
    try:
        import torch

        from accel.models import load_model

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            model = load_model("zoo:mlp(in_features=8, hidden=8)", "x:float32[2,8]")
            model.forward(model.example_inputs())
        finally:
            torch.set_num_threads(threads)
    except Exception as exc:  # noqa: BLE001 - a cold start is slower, not wrong
        log.debug("warm-up skipped: %s", exc)


def _wait(pid: int, cancelled: threading.Event) -> int:
    """Wait for the child; forward a cancel once. Returns its wait status."""
    forwarded = False
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = -1
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if cancelled.is_set() and not forwarded:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGUSR1)
                forwarded = True
            if fd >= 0:
                select.select([fd], [], [], 0.1)
            else:
                cancelled.wait(0.05)
    finally:
        if fd >= 0:
            os.close(fd)


def _child(run_job: RunJob, proto: Any, spec: JobSpec, tmp: Path) -> None:
    global _WORKER_PID
    _WORKER_PID = os.getppid()
    code = 0
    try:
        _die_with_parent()
        cancelled = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: cancelled.set())
        try:
            box = job_box(spec, Path.cwd(), tmp)
            _private_env(tmp)
            confine(box)
        except OSError as exc:
            _refuse(proto, spec, f"could not confine the job's process: {exc}")
        else:
            run_job(proto, spec, cancelled)
        proto.flush()
    except BaseException:  # noqa: BLE001 - reported on stderr; the exit code says it
        import traceback

        traceback.print_exc()
        code = 70
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _private_env(tmp: Path) -> None:
    """Temp files, caches and the home folder of the job: its private folder."""
    for key in ("TMPDIR", "TEMP", "TMP", "HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        os.environ[key] = str(tmp)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "torchinductor")
    os.environ["TRITON_CACHE_DIR"] = str(tmp / "triton")
    tempfile.tempdir = str(tmp)


def _refuse(proto: Any, spec: JobSpec, error: str) -> None:
    writer = MessageWriter(proto, spec.job_id)
    writer.send(Done, status="failed", result={}, error=error, error_type="ConfinementError")
