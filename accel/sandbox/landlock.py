"""Linux Landlock through its three system calls (ctypes; no library of ours in between).

Landlock (Linux >= 5.13) lets an unprivileged process drop, for itself and every process it
starts later, the right to open files outside the folders it lists, and (ABI >= 4) to bind or
connect TCP ports it does not list. Once ``restrict_self`` ran, nothing relaxes the rules.

The PyPI ``landlock`` binding was looked at and not used: it is an alpha release without the
network rules (ABI 4) and the scopes (ABI 6) this box needs. The kernel's documentation is
the reference: Documentation/userspace-api/landlock.rst.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from collections.abc import Iterable
from pathlib import Path

# System call numbers: the same on every architecture that has Landlock (asm-generic).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38

# File-system rights (include/uapi/linux/landlock.h) and the ABI that brought each.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
_FS_ABI1 = (1 << 13) - 1
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # valid on a file

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

READ = READ_FILE | READ_DIR | EXECUTE
READ_WRITE = (1 << 16) - 1


class LandlockError(OSError):
    """A Landlock call failed (the message names the call and the path or port)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args: object) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    if platform.system() != "Linux":
        return 0
    try:
        return _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
            return 0
        raise


def fs_rights(abi: int) -> int:
    """Every file-system right the kernel of ``abi`` knows (so every one is handled)."""
    rights = _FS_ABI1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def set_no_new_privs() -> None:
    """No set-uid gain from here on: the kernel's condition for an unprivileged sandbox."""
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")


def restrict(
    read: Iterable[Path],
    write: Iterable[Path],
    *,
    tcp_ports: Iterable[int] = (),
    abi: int | None = None,
) -> int:
    """Confine this process (and all it starts) to reading ``read``, reading and writing
    ``write``, and (ABI >= 4) binding/connecting TCP only on ``tcp_ports``; on ABI >= 6 also
    no abstract UNIX sockets or signals outside the box. Paths that do not exist are left
    out. Returns the ABI used; raises LandlockError (nothing applied) where the kernel lacks
    Landlock or a rule cannot be added."""
    abi = abi_version() if abi is None else abi
    if abi < 1:
        raise LandlockError(errno.EOPNOTSUPP, "this kernel has no Landlock")
    handled = fs_rights(abi)
    attr = _RulesetAttr(handled, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0, 0)
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    try:
        ruleset = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    except OSError as exc:
        raise LandlockError(exc.errno, f"landlock_create_ruleset: {exc.strerror}") from None
    try:
        for path in read:
            _add_path(ruleset, Path(path), READ & handled)
        for path in write:
            _add_path(ruleset, Path(path), READ_WRITE & handled)
        if abi >= 4:
            for port in sorted(set(tcp_ports)):
                _add_port(ruleset, int(port))
        set_no_new_privs()
        try:
            _syscall(_RESTRICT_SELF, ruleset, 0)
        except OSError as exc:
            raise LandlockError(exc.errno, f"landlock_restrict_self: {exc.strerror}") from None
    finally:
        os.close(ruleset)
    return abi


def _add_path(ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # nothing there to allow
    except OSError as exc:
        raise LandlockError(exc.errno, f"landlock: cannot open {path}: {exc.strerror}") from None
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_RIGHTS  # a file takes file rights only (else EINVAL)
        rule = _PathBeneathAttr(rights, fd)
        _syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    except OSError as exc:
        raise LandlockError(exc.errno, f"landlock: rule for {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _add_port(ruleset: int, port: int) -> None:
    rule = _NetPortAttr(NET_BIND_TCP | NET_CONNECT_TCP, port)
    try:
        _syscall(_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(rule), 0)
    except OSError as exc:
        raise LandlockError(
            exc.errno, f"landlock: rule for TCP port {port}: {exc.strerror}"
        ) from None
