"""Test-only worker plugin: records every attempt of the worker (and of the processes it
forks) to reach anything but loopback, through Python's audit hooks, into the file named by
``$ACCEL_TEST_NET_LOG``. Also registers ``try_connect``, a job that connects where it is
told (the check's own control)."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from typing import Any

from accel.jobs import register_job

LOG = os.environ.get("ACCEL_TEST_NET_LOG", "")
# Record the creation of any internet socket too (a recipe run has no reason for one).
SOCKETS_TOO = os.environ.get("ACCEL_TEST_NET_SOCKETS") == "1"
LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}


def _is_local(host: Any) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    host = str(host).strip("[]")
    if host.lower() in LOCAL_NAMES:
        return True
    try:
        addr = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False  # a name that would need a lookup
    return addr.is_loopback or addr.is_unspecified


def _address_host(address: Any) -> Any:
    if isinstance(address, tuple) and address:
        return address[0]
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return "localhost"
    return address


def _record(what: str, target: Any) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {what} {target!r}\n")


INET = {int(socket.AF_INET), int(getattr(socket, "AF_INET6", socket.AF_INET))}


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.__new__" and len(args) > 1 and args[1] in INET and SOCKETS_TOO:
        _record(event, args[1])  # an internet socket at all (a job with no reason for one)
    elif event == "socket.connect" or event == "socket.sendto":
        sock, address = args[0], args[1]
        family = getattr(sock, "family", None)
        if family == getattr(socket, "AF_UNIX", None):
            return
        if not _is_local(_address_host(address)):
            _record(event, address)
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"):
        if not _is_local(args[0]):
            _record(event, args[0])
    elif event == "urllib.Request":
        _record(event, args[0])


sys.addaudithook(_hook)


def try_connect(params: dict[str, Any], emit: Any, cancel: Any) -> dict[str, Any]:
    try:
        socket.create_connection((params["host"], int(params.get("port", 9))), timeout=0.2)
    except OSError as exc:
        return {"connected": False, "error": str(exc)}
    return {"connected": True}


def import_telemetry(params: dict[str, Any], emit: Any, cancel: Any) -> dict[str, Any]:
    try:
        import openvino_telemetry  # noqa: F401
    except ImportError as exc:
        return {"imported": False, "error": str(exc)}
    return {"imported": True}


register_job("try_connect", try_connect)
register_job("import_telemetry", import_telemetry)
