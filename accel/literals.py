"""Values from a recipe or a model file as text inside generated code (script export, data
helpers): escaped so that nothing can close a string or start a line of code."""

from __future__ import annotations


def doc_text(value: object) -> str:
    """``value`` as text that is safe inside a triple-quoted (non-raw) docstring or a comment:
    the repr's escapes (newlines, quotes, control characters) and escaped double quotes, so
    nothing from a recipe or a model file can close the string or start a line of code."""
    return repr(str(value)).replace('"', '\\"')
