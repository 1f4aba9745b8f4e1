"""Optimization passes: one module per pass family, found by scanning this package."""

from accel.passes.base import (
    CATEGORIES,
    Pass,
    PassConfig,
    PassContext,
    Requirements,
    ScriptStep,
    get_pass,
    list_passes,
    pass_names,
    register_pass,
)

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
