"""A seccomp filter that leaves a process only the sockets its job needs.

Landlock's network rules cover TCP ports only; UDP, raw and netlink sockets (and UNIX sockets
to a path such as a D-Bus or Docker socket, which Landlock cannot stop before ABI 8) need
another gate. This is the gate: a classic-BPF program on ``socket(2)`` that returns EACCES
for every address family the box does not allow, and, for the IP families, for every type
but a TCP stream (so no UDP). ``socketpair(2)`` (connected pairs only) stays allowed; so do
all other calls. ``io_uring_setup`` is refused (its rings can create sockets without
``socket(2)``), and so is any call made through a foreign ABI (i386 or x32 on x86_64).

Hand-written rather than through libseccomp: the program is a dozen instructions, and a
missing shared library must not leave a worker unconfined.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import struct
from collections.abc import Iterable

from accel.sandbox.landlock import set_no_new_privs

# linux/audit.h, linux/seccomp.h, linux/filter.h
_ARCH = {
    "x86_64": {"audit": 0xC000003E, "socket": 41, "io_uring_setup": 425, "seccomp": 317},
    "aarch64": {"audit": 0xC00000B7, "socket": 198, "io_uring_setup": 425, "seccomp": 277},
}
_X32_BIT = 0x40000000
_LD_W_ABS, _JEQ_K, _JGE_K, _AND_K, _RET_K = 0x20, 0x15, 0x35, 0x54, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_OFF_NR, _OFF_ARCH, _OFF_ARG0, _OFF_ARG1 = 0, 4, 16, 24
_SOCK_TYPE_MASK = 0xF

IP_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class SeccompError(OSError):
    """The filter could not be installed (unsupported machine or kernel)."""


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in _ARCH


def _stmt(code: int, k: int) -> tuple[int, int, int, int]:
    return (code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def socket_filter(families: Iterable[int], machine: str | None = None) -> bytes:
    """The BPF program (``struct sock_filter[]`` bytes) allowing ``socket(2)`` for
    ``families`` only (IP families: TCP streams only)."""
    machine = machine or platform.machine()
    arch = _ARCH[machine]
    deny = _RET_ERRNO | errno.EACCES
    # After loading the family: one test per allowed family, each followed by its own block
    # that ends in a return (so a failed test skips exactly that block); then deny.
    tail: list[tuple[int, int, int, int]] = [_stmt(_LD_W_ABS, _OFF_ARG0)]
    for fam in sorted(set(families)):
        if fam in IP_FAMILIES:  # TCP streams only: no UDP, no raw
            block = [
                _stmt(_LD_W_ABS, _OFF_ARG1),
                _stmt(_AND_K, _SOCK_TYPE_MASK),
                _jump(_JEQ_K, socket.SOCK_STREAM, 0, 1),
                _stmt(_RET_K, _RET_ALLOW),
                _stmt(_RET_K, deny),
            ]
        else:
            block = [_stmt(_RET_K, _RET_ALLOW)]
        tail += [_jump(_JEQ_K, fam, 0, len(block)), *block]
    tail.append(_stmt(_RET_K, deny))
    head = [
        _stmt(_LD_W_ABS, _OFF_ARCH),
        _jump(_JEQ_K, arch["audit"], 1, 0),
        _stmt(_RET_K, deny),  # a foreign ABI (int 0x80 on x86_64)
        _stmt(_LD_W_ABS, _OFF_NR),
    ]
    if machine == "x86_64":
        head += [_jump(_JGE_K, _X32_BIT, 0, 1), _stmt(_RET_K, deny)]
    head += [
        _jump(_JEQ_K, arch["io_uring_setup"], 0, 1),
        _stmt(_RET_K, _RET_ERRNO | errno.ENOSYS),
        _jump(_JEQ_K, arch["socket"], 1, 0),
        _stmt(_RET_K, _RET_ALLOW),
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in [*head, *tail])


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def restrict_sockets(families: Iterable[int] = ()) -> None:
    """Install the filter on this process (all its threads) and everything it starts."""
    if not supported():
        raise SeccompError(errno.EOPNOTSUPP, f"no seccomp filter for {platform.machine()}")
    program = socket_filter(families)
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    set_no_new_privs()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    number = _ARCH[platform.machine()]["seccomp"]
    rc = libc.syscall(
        ctypes.c_long(number),
        ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(prog),
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, f"seccomp(SET_MODE_FILTER): {os.strerror(err)}")
