"""What a failed torch.export means, from the check that failed (never a guess).

Shared by the passes that export a torch module (torch_export, quantize_static_int8): each
known check of torch.export is recognised by the exception type or the check's own message,
and the text says which check it was and what to change; anything else is reported as
torch.export's own first line, with no cause made up.
"""

from __future__ import annotations

import re
import traceback

_STRUCTURE = "Detected mismatch between the structure of `inputs` and `dynamic_shapes`"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def is_data_dependent(exc: BaseException) -> bool:
    """True when torch.export stopped at its guard on a value read from a tensor's data
    (``GuardOnDataDependentSymNode``: a Python branch, size or item() that depends on
    values, which a graph cannot follow)."""
    for e in _chain(exc):
        if "DataDependent" in type(e).__name__:
            return True
        if "Could not guard on data-dependent expression" in str(e):
            return True
    return False


def fixed_dims(exc: BaseException) -> list[str]:
    """Dims torch.export's constraint solver found fixed to a constant by the model
    ("Constraints violated (batch)"), or []."""
    m = re.search(r"Constraints violated \(([^)]*)\)", str(exc))
    return [d.strip() for d in m.group(1).split(",")] if m else []


def user_frame(exc: BaseException) -> str:
    """' at file:line' of the innermost frame outside torch's packages in the model's code
    that the check points at (from the message, else the traceback), or ''."""
    where = re.search(r'File "([^"]+)", line (\d+)', str(exc))
    if where and "site-packages/torch" not in where.group(1):
        return f" at {where.group(1)}:{where.group(2)}"
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "site-packages" not in f.filename and "/accel/" not in f.filename
    ]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def explain_export_failure(exc: BaseException) -> str:
    """One sentence: which torch.export check failed and what to change."""
    name = type(exc).__name__
    dims = fixed_dims(exc)
    if dims:
        return (
            f"torch.export's dynamic-shape check failed: the model fixes dim(s) {', '.join(dims)} "
            f"to a constant while tracing, so they cannot be dynamic ({first_line(exc)})"
        )
    if is_data_dependent(exc):
        return (
            f"torch.export stopped at its data-dependent guard{user_frame(exc)}: the forward "
            "branches on, or sizes by, values inside a tensor, which one graph cannot follow. "
            f"Rewrite it with torch.cond / torch.where ({name}: {first_line(exc)})"
        )
    if _STRUCTURE in str(exc):
        return (
            "torch.export's check that dynamic_shapes mirrors the forward's arguments failed "
            f"({first_line(exc)}); report this: the studio builds dynamic_shapes from the "
            "forward's signature"
        )
    return f"torch.export failed ({name}: {first_line(exc)})"
