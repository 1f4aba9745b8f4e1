"""Run search trials as Ray tasks on a cluster (the ``cluster`` extra: ``pip install ray``).

Addresses: ``HOST:PORT`` (a cluster's GCS address, what ``ray start --head`` prints),
``ray://HOST:PORT`` (Ray Client) or ``auto`` (the cluster this machine belongs to). A trial
is a task with a resource request (``num_gpus=1`` for CUDA trials, ``num_cpus`` = its
threads); it returns its result and the runner events it emitted, and whoever runs the
search records them (the studio stays the only writer of its database). Artifacts stay in
the trial's run folder on the node that ran it: give a folder every node shares (``out``,
``artifacts``) to have them all in one place.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from accel.search.space import SearchError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 8.0
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _host_port(address: str) -> tuple[str, int] | None:
    addr = address.removeprefix("ray://")
    if addr == "auto":
        return None
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise SearchError(
            f"cluster address {address!r} is not HOST:PORT, ray://HOST:PORT or auto "
            "(e.g. 10.0.0.5:6379, the address `ray start --head` prints)"
        )
    return host.strip("[]"), int(port)


def resolve_auto(address: str) -> str:
    """``auto`` as the address it stands for: ``$RAY_ADDRESS``, else the address in Ray's
    ``ray_current_cluster`` file, which is trusted only when this user owns it and its folder
    and nobody else may write them (any local user can create ``/tmp/ray`` first and plant
    one that sends trials, models and all, to their own cluster). Other addresses: as given."""
    if address != "auto":
        return address
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env and env != "auto":
        _host_port(env)
        return env
    folder = Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray"
    path = folder / "ray_current_cluster"
    for item in (folder, path):
        try:
            st = item.lstat()
        except FileNotFoundError:
            raise SearchError(
                f"--cluster auto: no running Ray cluster on this machine ({path} is missing); "
                "give the address (HOST:PORT) or start one with `ray start --head`"
            ) from None
        if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
            raise SearchError(
                f"--cluster auto: {item} belongs to another user or others may write it, so "
                "the cluster address in it cannot be trusted; give the address (HOST:PORT)"
            )
    resolved = path.read_text(encoding="utf-8", errors="replace").strip()
    _host_port(resolved)
    return resolved


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast (within ``timeout_s``) when nothing listens at the address."""
    hp = _host_port(address)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=timeout_s):
            pass
    except OSError as exc:
        raise SearchError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with "
            f"`ray start --head --port {hp[1]}` on {hp[0]}, or check the address and firewall"
        ) from None


def _trial_task(spec: dict[str, Any]) -> dict[str, Any]:
    """Body of the Ray task: run the trial, collect its events (third-party telemetry off in
    the Ray worker, as in the studio's own workers)."""
    from accel.privacy import disable_telemetry
    from accel.search.job import run_search_job

    disable_telemetry()

    events: list[dict[str, Any]] = []
    try:
        result = run_search_job(spec, events.append, lambda: False)
    except Exception as exc:  # noqa: BLE001 - the search records the failure
        return {
            "status": "failed",
            "result": {},
            "error": f"{type(exc).__name__}: {exc}",
            "events": events,
            "node": socket.gethostname(),
        }
    return {
        "status": result.get("status", "failed"),
        "result": result,
        "error": result.get("error", ""),
        "events": events,
        "node": socket.gethostname(),
    }


class _RayHandle:
    def __init__(self, ray: Any, ref: Any, timeout_s: float | None) -> None:
        self._ray = ray
        self._ref = ref
        self._timeout_s = timeout_s
        self._waited = 0.0
        self._cancelled = False

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        ray = self._ray
        ready, _ = ray.wait([self._ref], timeout=timeout)
        if not ready:
            if timeout is not None:
                self._waited += timeout
            if self._timeout_s is not None and self._waited > self._timeout_s:
                ray.cancel(self._ref, force=True)
                return {
                    "status": "timed_out",
                    "result": {},
                    "error": f"the trial ran past its timeout of {self._timeout_s:g} s",
                    "run_id": None,
                }
            raise TimeoutError
        try:
            out = ray.get(self._ref)
        except Exception as exc:  # noqa: BLE001 - task cancelled, worker died, ...
            cancelled = self._cancelled or type(exc).__name__ == "TaskCancelledError"
            return {
                "status": "cancelled" if cancelled else "crashed",
                "result": {},
                "error": "cancelled" if cancelled else f"{type(exc).__name__}: {exc}",
                "run_id": None,
            }
        out.setdefault("run_id", None)
        return out

    def cancel(self) -> None:
        self._cancelled = True
        self._ray.cancel(self._ref, force=True)


def _connect(ray: Any, address: str, connect_timeout_s: float) -> None:
    """``ray.init`` this driver to the cluster at ``address`` (no telemetry, the project on
    the workers' PYTHONPATH) in a thread, so a host that is no Ray head fails after
    ``connect_timeout_s`` (plus a margin) instead of hanging; SearchError when it fails."""
    from accel.privacy import TELEMETRY_ENV

    env = {
        **TELEMETRY_ENV,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])
        ),
    }
    errors: list[BaseException] = []
    hp = _host_port(address)
    loopback = hp is not None and hp[0] in ("127.0.0.1", "localhost", "::1")

    def connect() -> None:
        try:
            ray.init(
                address=address,
                # A cluster on loopback: the driver must not announce the LAN address.
                _node_ip_address="127.0.0.1" if loopback else None,
                runtime_env={"env_vars": env},
                ignore_reinit_error=True,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=connect, name="ray-connect", daemon=True)
    t.start()
    t.join(connect_timeout_s + 2.0)
    if t.is_alive():
        raise SearchError(
            f"the Ray cluster at {address} did not accept a connection within "
            f"{connect_timeout_s + 2.0:g} s; is it a Ray head (GCS port, default 6379)?"
        )
    if errors:
        raise SearchError(f"could not connect to the Ray cluster at {address}: {errors[0]}")


class RayExecutor:
    """Submits trials to a Ray cluster (see module docstring). ``slots``: trials in flight
    (default: the cluster's GPUs for CUDA trials, else its CPUs / ``num_cpus``)."""

    def __init__(
        self,
        address: str,
        *,
        device: str = "cpu",
        num_cpus: int = 1,
        slots: int | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise SearchError(
                "--cluster needs Ray: pip install 'accel-studio[cluster]' (or pip install ray)"
            ) from None
        address = resolve_auto(address)
        check_reachable(address, connect_timeout_s)
        self._ray = ray
        _connect(ray, address, connect_timeout_s)
        self.device = device
        self.cuda = str(device).startswith("cuda")
        self.num_cpus = max(1, int(num_cpus))
        res = ray.cluster_resources()
        if slots is None:
            if self.cuda:
                slots = int(res.get("GPU", 0))
                if slots < 1:
                    ray.shutdown()
                    raise SearchError(f"the Ray cluster at {address} has no GPUs for cuda trials")
            else:
                slots = max(1, int(res.get("CPU", 1)) // self.num_cpus)
        self.slots = int(slots)
        self.address = address
        self.resources = {k: v for k, v in res.items() if k in ("CPU", "GPU")}
        self.nodes = len([n for n in ray.nodes() if n.get("Alive")])
        self._remote = ray.remote(_trial_task)

    def submit(self, number: int, spec: dict[str, Any]) -> _RayHandle:
        spec = dict(spec)
        if self.cuda:
            spec["device"] = "cuda:0"  # Ray sets CUDA_VISIBLE_DEVICES to the task's GPU
        opts: dict[str, Any] = {"num_cpus": self.num_cpus, "max_retries": 0}
        if self.cuda:
            opts["num_gpus"] = 1
        ref = self._remote.options(**opts).remote(spec)
        return _RayHandle(self._ray, ref, spec.get("timeout_s"))

    def close(self) -> None:
        self._ray.shutdown()
