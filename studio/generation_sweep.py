"""Generation figures against prompt length (no Qt): the points History's and Compare's
generation charts draw, from stored runs.

A generation run (a recipe with ``benchmark.workload: generate``) stores its prompt length in
its recipe, the original's tokens/s and TTFT in its baseline and each step's in the step's
metrics, each with a 95% interval. Runs of the same recipe on the same model at several prompt
lengths (``studio run --prompt-tokens 32,128,512``) make one series per model form: the
original, and the recipe's last step that succeeded (the optimized model). Each point is one
stored figure, as the run's tables show it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from studio.generation_columns import has_generation, sweep_settings

# (metric key, axis title) of the two charts
CHARTS = (("tokens_per_s", "tokens/s"), ("ttft_ms", "time to first token (ms)"))


@dataclass(frozen=True)
class SweepPoint:
    prompt_tokens: int
    run_id: str
    values: Mapping[str, Any]  # the figures with their _low / _high

    def value(self, key: str) -> float | None:
        v = self.values.get(key)
        return None if v is None else float(v)

    def interval(self, key: str) -> tuple[float, float] | None:
        low, high = self.values.get(key + "_low"), self.values.get(key + "_high")
        return None if low is None or high is None else (float(low), float(high))


@dataclass
class SweepSeries:
    label: str  # "llama-gen · hf:llama_small · original"
    points: list[SweepPoint] = field(default_factory=list)

    def xs(self) -> list[int]:
        return [p.prompt_tokens for p in self.points]

    def ys(self, key: str) -> list[float | None]:
        return [p.value(key) for p in self.points]


def _final_step(detail: Any) -> Any:
    done = [s for s in detail.steps if s.index >= 0 and s.status == "succeeded"]
    done = [s for s in done if has_generation(s.metrics)]
    return max(done, key=lambda s: s.index) if done else None


def _forms(detail: Any) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """(which model, its figures): the original, then the recipe's last succeeded step."""
    if has_generation(detail.baseline):
        yield "original", detail.baseline
    step = _final_step(detail)
    if step is not None:
        yield f"{step.index + 1} {step.pass_name}", step.metrics


def sweep_series(details: Iterable[Any]) -> list[SweepSeries]:
    """The series of generation runs among ``details`` (RunDetail), one per recipe, model,
    new tokens and model form, points by prompt length; the newest run of a length wins (a
    run listed first is taken as the newest, as the store lists them)."""
    series: dict[tuple, SweepSeries] = {}
    for d in details:
        settings = sweep_settings(d.recipe)
        if settings is None or d.status != "succeeded":
            continue
        prompt, new = settings
        recipe = d.run.recipe_name or d.run.name or "recipe"
        for form, figures in _forms(d):
            key = (recipe, d.run.model_source, new, form)
            label = f"{recipe} · {d.run.model_source} · {new} new · {form}"
            s = series.setdefault(key, SweepSeries(label))
            if prompt not in s.xs():
                s.points.append(SweepPoint(prompt, d.run.id, dict(figures)))
    out = list(series.values())
    for s in out:
        s.points.sort(key=lambda p: p.prompt_tokens)
    return out


def short_labels(series: list[SweepSeries]) -> tuple[list[str], str]:
    """Each series' label without the parts all of them share (those come back as one line:
    "hf:llama_small · 16 new"); the model form (last part) always stays."""
    parts = [s.label.split(" · ") for s in series]
    if not parts:
        return [], ""
    width = min(len(p) for p in parts)
    shared = {i for i in range(width - 1) if len({p[i] for p in parts}) == 1}
    labels = [" · ".join(x for i, x in enumerate(p) if i not in shared) for p in parts]
    return labels, " · ".join(parts[0][i] for i in sorted(shared))
