"""Render resources/icons/accel-studio.svg to the PNG sizes desktops and bundles use.

    .venv/bin/python packaging/make_icons.py

Writes resources/icons/accel-studio-{16,24,32,48,64,128,256,512}.png with Qt's SVG renderer
(offscreen, no display needed). Run it again after editing the SVG and commit the PNGs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parents[1] / "resources" / "icons"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841
    renderer = QSvgRenderer(str(ICONS / "accel-studio.svg"))
    if not renderer.isValid():
        print("accel-studio.svg is not a valid SVG", file=sys.stderr)
        return 1
    for size in SIZES:
        img = QImage(size, size, QImage.Format.Format_ARGB32)
        img.fill(Qt.GlobalColor.transparent)
        painter = QPainter(img)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        out = ICONS / f"accel-studio-{size}.png"
        if not img.save(str(out)):
            print(f"could not write {out}", file=sys.stderr)
            return 1
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
