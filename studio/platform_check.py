"""Before Qt starts: is there a display, and are the system libraries of Qt's xcb plugin there?

Without this, a machine with no display (or without ``libxcb-cursor0`` and friends) ends in
Qt's own abort ("could not load the Qt platform plugin ... Reinstalling the application may
fix this problem"), which names neither the cause nor the fix. ``check_platform()`` returns
one message that says what is missing and what to run instead; ``studio`` (the GUI) prints
it and exits with code 2, and ``make run`` runs ``python -m studio.platform_check`` first.

No Qt import here: the check must work exactly when Qt would not.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

EXIT_NO_PLATFORM = 2

HEADLESS_COMMANDS = (
    "studio run RECIPE",
    "studio profile MODEL",
    "studio optimize MODEL",
    "studio analyze MODEL",
    "studio history",
    "studio graph MODEL",
)


@dataclass(frozen=True)
class SystemLib:
    """One shared library the Qt xcb platform plugin loads, and the package that has it."""

    name: str  # as ctypes.util.find_library takes it: "xcb-cursor" for libxcb-cursor.so.0
    soname: str
    apt: str
    dnf: str
    pacman: str


# What libqxcb.so and libQt6XcbQpa.so.6 of PySide6 6.5+ link against beyond glibc (ldd).
XCB_LIBS: tuple[SystemLib, ...] = (
    SystemLib("xcb", "libxcb.so.1", "libxcb1", "libxcb", "libxcb"),
    SystemLib("X11-xcb", "libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb", "libx11"),
    SystemLib(
        "xcb-cursor", "libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"
    ),
    SystemLib("xcb-icccm", "libxcb-icccm.so.4", "libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    SystemLib(
        "xcb-keysyms",
        "libxcb-keysyms.so.1",
        "libxcb-keysyms1",
        "xcb-util-keysyms",
        "xcb-util-keysyms",
    ),
    SystemLib(
        "xcb-image", "libxcb-image.so.0", "libxcb-image0", "xcb-util-image", "xcb-util-image"
    ),
    SystemLib(
        "xcb-render-util",
        "libxcb-render-util.so.0",
        "libxcb-render-util0",
        "xcb-util-renderutil",
        "xcb-util-renderutil",
    ),
    SystemLib("xcb-util", "libxcb-util.so.1", "libxcb-util1", "xcb-util", "xcb-util"),
    SystemLib("xcb-randr", "libxcb-randr.so.0", "libxcb-randr0", "libxcb", "libxcb"),
    SystemLib("xcb-shape", "libxcb-shape.so.0", "libxcb-shape0", "libxcb", "libxcb"),
    SystemLib("xcb-xkb", "libxcb-xkb.so.1", "libxcb-xkb1", "libxcb", "libxcb"),
    SystemLib("xkbcommon", "libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon", "libxkbcommon"),
    SystemLib(
        "xkbcommon-x11",
        "libxkbcommon-x11.so.0",
        "libxkbcommon-x11-0",
        "libxkbcommon-x11",
        "libxkbcommon-x11",
    ),
    SystemLib("EGL", "libEGL.so.1", "libegl1", "libglvnd-egl", "libglvnd"),
    SystemLib("GL", "libGL.so.1", "libgl1", "libglvnd-glx", "libglvnd"),
    SystemLib("fontconfig", "libfontconfig.so.1", "libfontconfig1", "fontconfig", "fontconfig"),
    SystemLib("dbus-1", "libdbus-1.so.3", "libdbus-1-3", "dbus-libs", "dbus"),
    SystemLib("glib-2.0", "libglib-2.0.so.0", "libglib2.0-0", "glib2", "glib2"),
)

INSTALL = {
    "apt": "sudo apt-get install -y {}",
    "dnf": "sudo dnf install -y {}",
    "pacman": "sudo pacman -S --needed {}",
}


def ldconfig_sonames() -> set[str] | None:
    """The sonames the dynamic loader knows (``ldconfig -p``); None where there is no ldconfig."""
    exe = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None
    )
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = set()
    for line in out.splitlines()[1:]:
        name = line.strip().split(" ", 1)[0]
        if name:
            names.add(name)
    return names


def default_lookup() -> Callable[[SystemLib], bool]:
    """``lookup(lib) -> found``: the ``ldconfig -p`` cache (one call), else ``find_library``."""
    known = ldconfig_sonames()
    if known:
        extra = _ld_library_path_names()
        return lambda lib: lib.soname in known or lib.soname in extra
    return lambda lib: ctypes.util.find_library(lib.name) is not None


def _ld_library_path_names() -> set[str]:
    names: set[str] = set()
    for d in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)):
        try:
            names.update(p.name for p in Path(d).iterdir())
        except OSError:
            continue
    return names


def missing_libs(
    libs: Iterable[SystemLib] = XCB_LIBS, lookup: Callable[[SystemLib], bool] | None = None
) -> list[SystemLib]:
    """The libraries of ``libs`` that ``lookup`` cannot find."""
    lookup = lookup or default_lookup()
    return [lib for lib in libs if not lookup(lib)]


def distro_family(os_release: str | None = None) -> str | None:
    """ "apt", "dnf" or "pacman" from /etc/os-release (ID and ID_LIKE); None if unknown."""
    if os_release is None:
        try:
            os_release = Path("/etc/os-release").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    ids: list[str] = []
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            ids += value.strip().strip('"').lower().split()
    for family, members in (
        ("apt", {"debian", "ubuntu", "linuxmint", "pop", "raspbian"}),
        ("dnf", {"fedora", "rhel", "centos", "rocky", "almalinux"}),
        ("pacman", {"arch", "manjaro", "endeavouros"}),
    ):
        if members.intersection(ids):
            return family
    return None


def install_commands(missing: Iterable[SystemLib], family: str | None) -> list[str]:
    """The command(s) that install ``missing``: one for ``family``, else one per family."""
    missing = list(missing)
    families = [family] if family in INSTALL else list(INSTALL)
    cmds = []
    for fam in families:
        pkgs = list(dict.fromkeys(getattr(lib, fam) for lib in missing))
        cmds.append(INSTALL[fam].format(" ".join(pkgs)))
    return cmds


def _headless_hint() -> str:
    cmds = "\n".join(f"    {c}" for c in HEADLESS_COMMANDS)
    return (
        "Every feature of the studio is also a command that needs no display:\n"
        f"{cmds}\n"
        "(`studio --help` lists them all). For scripted use of the window without a display,\n"
        "set QT_QPA_PLATFORM=offscreen."
    )


def check_platform(
    env: Mapping[str, str] | None = None,
    platform: str | None = None,
    lookup: Callable[[SystemLib], bool] | None = None,
    os_release: str | None = None,
) -> str | None:
    """None when Qt can start a window here; else the message for the user."""
    env = os.environ if env is None else env
    platform = platform or sys.platform
    if not platform.startswith("linux"):
        return None  # macOS and Windows: Qt's own platform plugins need no system packages
    qpa = env.get("QT_QPA_PLATFORM", "").strip()
    if qpa and not qpa.startswith("xcb"):
        return None  # the user chose a platform (offscreen, wayland, vnc, ...)
    has_x = bool(env.get("DISPLAY"))
    if not has_x and not env.get("WAYLAND_DISPLAY"):
        return (
            "No display: neither DISPLAY nor WAYLAND_DISPLAY is set, so the studio window "
            "cannot open.\nRun it in a desktop session, or over SSH with X forwarding "
            "(ssh -X).\n" + _headless_hint()
        )
    if not has_x and not qpa:
        return None  # Wayland session without XWayland: Qt uses its wayland plugin
    missing = missing_libs(lookup=lookup)
    if not missing:
        return None
    names = ", ".join(lib.soname for lib in missing)
    family = distro_family(os_release)
    cmds = "\n".join(f"    {c}" for c in install_commands(missing, family))
    intro = "Install them with:" if family else "Install them with the command of your system:"
    return (
        f"Qt's X11 (xcb) platform plugin needs system libraries that are missing: {names}.\n"
        f"{intro}\n{cmds}\n"
        "then start the studio again (see README.md, 'System packages').\n" + _headless_hint()
    )


def main() -> int:
    msg = check_platform()
    if msg:
        print(f"studio: {msg}", file=sys.stderr)
        return EXIT_NO_PLATFORM
    return 0


if __name__ == "__main__":
    sys.exit(main())
