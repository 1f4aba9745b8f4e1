"""Optimization passes: one module per pass family, found by scanning this package
(``accel.passes.registry``)."""

from accel.passes.base import (
    CATEGORIES,
    Pass,
    PassConfig,
    PassContext,
    Requirements,
    ScriptStep,
    register_pass,
)
from accel.passes.registry import get_pass, list_passes, pass_names

__all__ = [
    "CATEGORIES",
    "Pass",
    "PassConfig",
    "PassContext",
    "Requirements",
    "ScriptStep",
    "get_pass",
    "list_passes",
    "pass_names",
    "register_pass",
]
