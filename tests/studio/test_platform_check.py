"""First start without a display or without Qt's xcb system libraries: one clear message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from studio import platform_check as pc

ROOT = Path(__file__).resolve().parents[2]
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12"\nID=debian\n'
FEDORA = 'NAME="Fedora Linux"\nID=fedora\n'


def test_studio_without_display_exits_2_with_the_message():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", "studio"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert "No display" in proc.stderr
    assert "studio profile" in proc.stderr and "QT_QPA_PLATFORM=offscreen" in proc.stderr
    assert "Aborted" not in proc.stderr and "Reinstalling" not in proc.stderr


def test_no_display_message_and_chosen_platform():
    msg = pc.check_platform(env={}, platform="linux")
    assert msg and "DISPLAY" in msg and "studio run" in msg
    assert pc.check_platform(env={"QT_QPA_PLATFORM": "offscreen"}, platform="linux") is None
    assert pc.check_platform(env={}, platform="darwin") is None
    assert pc.check_platform(env={}, platform="win32") is None
    # A Wayland session without X: Qt uses its wayland plugin, the xcb libraries do not matter.
    assert pc.check_platform(env={"WAYLAND_DISPLAY": "wayland-0"}, platform="linux") is None


def test_a_library_that_cannot_be_found_is_named_with_its_install_command():
    fake = pc.SystemLib("no-such-lib", "libno-such-lib.so.9", "libnosuch9", "nosuch-libs", "nosuch")
    # The real lookup (ldconfig -p, or find_library) cannot find a name that does not exist.
    assert pc.missing_libs([fake], lookup=pc.default_lookup()) == [fake]

    def lookup(lib):
        return lib.name not in ("xcb-cursor", "xcb-icccm")

    msg = pc.check_platform(
        env={"DISPLAY": ":0"}, platform="linux", lookup=lookup, os_release=DEBIAN
    )
    assert "libxcb-cursor.so.0, libxcb-icccm.so.4" in msg
    assert "sudo apt-get install -y libxcb-cursor0 libxcb-icccm4" in msg
    assert "dnf" not in msg
    msg = pc.check_platform(
        env={"DISPLAY": ":0"}, platform="linux", lookup=lookup, os_release=FEDORA
    )
    assert "sudo dnf install -y xcb-util-cursor xcb-util-wm" in msg
    # An unknown distribution gets the command of each family.
    msg = pc.check_platform(env={"DISPLAY": ":0"}, platform="linux", lookup=lookup, os_release="")
    assert "apt-get" in msg and "dnf" in msg and "pacman -S --needed" in msg
    assert (
        pc.check_platform(env={"DISPLAY": ":0"}, platform="linux", lookup=lambda lib: True) is None
    )


def test_distro_family_from_os_release():
    assert pc.distro_family(DEBIAN) == "apt"
    assert pc.distro_family("ID=ubuntu\nID_LIKE=debian\n") == "apt"
    assert pc.distro_family('ID="rocky"\nID_LIKE="rhel centos fedora"\n') == "dnf"
    assert pc.distro_family("ID=manjaro\nID_LIKE=arch\n") == "pacman"
    assert pc.distro_family("ID=plan9\n") is None
