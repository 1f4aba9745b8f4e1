"""How a model is timed: one settings model for the runner, the search, the corpus check,
the exported script and the recipe's ``benchmark`` section (accel.recipe.BenchSettings
adds only the benchmark's symbolic dims to it)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from accel.errors import AccelError

# A recipe from someone else must not ask for 1e18 iterations.
MAX_ITERS = 1_000_000
FIELDS = ("rounds", "iters", "warmup", "threads", "min_time_s")


class MeasureError(AccelError, ValueError):
    """Timing could not give a trustworthy number; the message says which setting to change."""


def physical_cores() -> int:
    """Physical cores of this machine (logical ones when that is all we can find)."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001 - psutil missing or the platform hides it
        n = None
    return max(1, int(n or os.cpu_count() or 1))


class TimingSettings(BaseModel):
    """How a comparison is timed.

    ``rounds``: A/B rounds (at least, but never more than ``iters``: a round takes at least
    one sample of each model); ``iters``: timed samples per model, spread over the rounds
    (``per_round`` = iters / rounds, rounded up); ``warmup``: untimed calls of each model
    before the first round; ``threads``: intra-op threads for torch and every runtime (None:
    the physical cores); ``min_time_s``: add rounds until both models together were timed
    this long (0: exactly ``rounds``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    rounds: int = Field(
        12,
        ge=1,
        le=MAX_ITERS,
        description="alternating rounds original/step (at most iters; more: see min_time_s)",
    )
    warmup: int = Field(
        3, ge=0, le=MAX_ITERS, description="untimed calls of each model before the rounds"
    )
    iters: int = Field(
        48, ge=1, le=MAX_ITERS, description="timed calls of each model, spread over the rounds"
    )
    threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="intra-op threads of torch and every runtime (default: physical cores)",
    )
    min_time_s: float = Field(
        0.5,
        ge=0,
        le=3600,
        allow_inf_nan=False,
        description="add rounds until both models were timed this long (seconds)",
    )

    def __init__(self, **data: Any) -> None:
        # Built in code (not read from a recipe): a bad value names the setting in a
        # MeasureError, before pydantic's generic message.
        defaults = type(self).model_fields
        check_settings(**{k: data.get(k, defaults[k].default) for k in FIELDS})
        super().__init__(**data)

    @property
    def base_rounds(self) -> int:
        return min(self.rounds, self.iters)

    @property
    def per_round(self) -> int:
        return max(1, math.ceil(self.iters / self.base_rounds))

    @property
    def resolved_threads(self) -> int:
        return self.threads or physical_cores()

    def timing_only(self) -> TimingSettings:
        """These settings as a plain TimingSettings (without a recipe's extra fields)."""
        if type(self) is TimingSettings:
            return self
        return TimingSettings(**{k: getattr(self, k) for k in FIELDS})

    def with_threads(self, threads: int | None) -> TimingSettings:
        return TimingSettings(**{**{k: getattr(self, k) for k in FIELDS}, "threads": threads})

    @classmethod
    def from_any(cls, obj: Any) -> TimingSettings:
        """From a recipe's BenchSettings, a mapping (missing or None: the default) or a
        TimingSettings."""
        if isinstance(obj, TimingSettings):
            return obj.timing_only()
        if obj is None:
            return TimingSettings()
        get = obj.get if isinstance(obj, Mapping) else lambda k, d=None: getattr(obj, k, d)
        kwargs = {k: v for k in FIELDS if (v := get(k, None)) is not None}
        return TimingSettings(**kwargs)


def check_settings(*, rounds: Any, iters: Any, warmup: Any, threads: Any, min_time_s: Any) -> None:
    """Raise MeasureError naming the first bad benchmark setting."""

    def whole(name: str, value: Any, low: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MeasureError(f"benchmark.{name} must be a whole number, got {value!r}")
        if value < low:
            raise MeasureError(f"benchmark.{name} must be >= {low}, got {value}")

    whole("rounds", rounds, 1)
    whole("iters", iters, 1)
    whole("warmup", warmup, 0)
    if threads is not None:
        whole("threads", threads, 1)
    if isinstance(min_time_s, bool) or not isinstance(min_time_s, int | float):
        raise MeasureError(f"benchmark.min_time_s must be a number of seconds, got {min_time_s!r}")
    if not math.isfinite(min_time_s) or min_time_s < 0:
        raise MeasureError(f"benchmark.min_time_s must be >= 0 seconds, got {min_time_s}")
