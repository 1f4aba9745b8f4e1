"""Test-only passes that break the worker, loaded into workers as a plugin (by file path).

``test_fault`` with ``fault``: "" (does nothing), "slow" (a minute, checking for
cancellation), "segfault", "exit", "kill", "hang", "raise" (see fault_jobs.inject).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

from pydantic import Field

from accel.passes import Pass, PassConfig, ScriptStep, register_pass


def _inject(fault: str) -> None:
    # fault_jobs is loaded by path too: tests/ is not a package.
    name = "_studio_test_fault_jobs"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("fault_jobs.py")
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    mod.inject(fault)


class FaultConfig(PassConfig):
    fault: str = Field("", description="segfault, exit, kill, hang, raise or empty for none")


@register_pass
class FaultPass(Pass):
    name = "test_fault"
    summary = "test-only: crash, hang or exit the worker on purpose"
    category = "test"
    Config = FaultConfig

    def apply(self, model, config, ctx):
        ctx.check_cancelled()
        if config.fault == "slow":  # cooperative: stops at the next check once cancelled
            for i in range(6000):
                ctx.check_cancelled()
                ctx.progress(i / 6000, "slow test step")
                time.sleep(0.01)
        elif config.fault:
            _inject(config.fault)
        return model

    def to_script(self, config):
        return ScriptStep(code="pass")
