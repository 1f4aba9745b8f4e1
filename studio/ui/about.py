"""The About box's text: versions of the libraries the studio uses."""

from __future__ import annotations


def library_versions() -> dict[str, str]:
    """Versions of the libraries the studio uses (without importing heavy ones)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for dist in (
        "accel-studio",
        "torch",
        "onnx",
        "onnxruntime",
        "onnxruntime-gpu",
        "torchao",
        "torch-pruning",
        "PySide6",
        "pyqtgraph",
        "SQLAlchemy",
        "netron",
    ):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    import platform

    out["Python"] = platform.python_version()
    return out


def about_html() -> str:
    rows = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in library_versions().items())
    return (
        "<h3>Accel Studio</h3><p>Profile, optimize and verify PyTorch and ONNX models. "
        "Every run is benchmarked, checked against the original and stored.</p>"
        f"<table cellspacing=4>{rows}</table>"
    )
