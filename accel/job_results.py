"""The typed results of the engine's jobs (``accel.jobs``) and their JSON forms.

A job's use case returns one of these; the worker sends its ``to_dict()``; the job's
declaration (``accel.job_registry``) names the ``from_dict`` that rebuilds it where the
result lands (the CLI's ``run_boxed``, the GUI's controllers). ``model_facts`` and
``model_info`` are what a result says about the model it ran on. Heavy modules (the
profiler, the graph, sensitivity) are imported inside ``from_dict``: declaring the jobs
stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


def lazy_result(module: str, name: str) -> Callable[[Mapping[str, Any]], Any]:
    """``module.name`` (a ``from_dict``), imported when a result is converted: declaring
    the jobs stays cheap (the pool and the GUI import this module)."""

    def convert(data: Mapping[str, Any]) -> Any:
        import importlib

        target: Any = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
        return target(data)

    return convert


def inputs_text(inputs: Mapping[str, Any]) -> str:
    """``x:float32[8,1024]; ...`` of the example inputs actually fed."""
    parts = []
    for name, x in inputs.items():
        shape = ",".join(str(d) for d in getattr(x, "shape", ()))
        dtype = str(getattr(x, "dtype", type(x).__name__)).removeprefix("torch.")
        parts.append(f"{name}:{dtype}[{shape}]")
    return "; ".join(parts)


def model_facts(model: Any) -> dict[str, Any]:
    """What a stored profile names the model by (the store's model row) and the CLI prints."""
    return {
        "source": model.source,
        "kind": model.kind,
        "content_hash": model.content_hash,
        "input_spec": str(model.input_spec),
        "num_params": int(model.num_params),
        "size_bytes": int(model.size_bytes),
        "device": model.device,
    }


@dataclass
class ProfileResult:
    """What ``profile`` measured: the model's facts, the inputs fed, the benchmark and the
    per-layer profile (each None when the job did not ask for it)."""

    model: dict[str, Any]
    inputs: str
    benchmark: Any = None  # accel.timing.single.BenchResult
    profile: Any = None  # accel.profile.ModelProfile

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "inputs": self.inputs,
            "benchmark": self.benchmark.to_dict() if self.benchmark is not None else None,
            "profile": self.profile.to_dict() if self.profile is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProfileResult:
        from accel.profile import ModelProfile
        from accel.timing.single import BenchResult

        bench, prof = d.get("benchmark"), d.get("profile")
        return cls(
            model=dict(d.get("model") or {}),
            inputs=str(d.get("inputs") or ""),
            benchmark=BenchResult.from_dict(bench) if bench else None,
            profile=ModelProfile.from_dict(prof) if prof else None,
        )


@dataclass
class AnalyzeResult:
    """The sensitivity report and, when the job had a gate, the layers to keep in float."""

    report: Any  # accel.sensitivity.SensitivityReport
    auto: Any = None  # accel.sensitivity.AutoExcludeResult

    def to_dict(self) -> dict[str, Any]:
        out = self.report.to_dict()
        if self.auto is not None:
            out["auto_exclude"] = self.auto.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AnalyzeResult:
        from accel.sensitivity import AutoExcludeResult, SensitivityReport

        d = dict(d)
        auto = d.pop("auto_exclude", None)
        return cls(SensitivityReport.from_dict(d), AutoExcludeResult(**auto) if auto else None)


def model_info(model: Any) -> dict[str, Any]:
    """JSON facts about a ``LoadedModel`` for people (the studio's Model panel)."""
    info: dict[str, Any] = {
        "source": model.source,
        "kind": model.kind,
        "format": model.format,
        "input_spec": str(model.input_spec),
        "inputs": [
            {"name": t.name, "shape": list(t.shape), "dtype": t.dtype}
            for t in model.input_spec.inputs
        ],
        "num_params": int(model.num_params),
        "size_bytes": int(model.size_bytes),
        "content_hash": model.content_hash,
        "device": model.device,
        "onnx_path": str(model.onnx_path) if model.onnx_path else None,
        "class_name": "",
    }
    # What the model's runtime says about it and what the GUI can show for its kind.
    runtime = model.runtime
    netron = runtime.netron_file(model)
    info.update(runtime.info(model))
    info.update(
        {
            "runtime": runtime.label,
            "capabilities": sorted(runtime.capabilities),
            "profile_rows": runtime.profile_rows,
            "netron_file": str(netron) if netron else None,
        }
    )
    from accel.generate.profiling import layer_split_problem

    # None: a decoder LM whose generation the Profile panel can split per layer.
    info["generation_split"] = layer_split_problem(model)
    return info


@dataclass
class InspectResult:
    """An opened model: the LoadedModel, its facts for people, its graph (or why none)."""

    model: Any  # accel.models.LoadedModel (not sent: to_dict leaves it out)
    info: dict[str, Any]
    graph: Any = None  # accel.graph.Graph
    graph_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        graph = self.graph.to_dict() if self.graph is not None else None
        return {"info": self.info, "graph": graph, "graph_error": self.graph_error}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InspectResult:
        """What a worker sent back: the facts and the graph (the model stays there)."""
        from accel.graph import Graph

        graph = d.get("graph")
        return cls(
            None,
            dict(d.get("info") or {}),
            Graph.from_dict(graph) if graph else None,
            d.get("graph_error"),
        )


def layer_parity_report(data: Mapping[str, Any]) -> Any:
    from accel.graph.layer_parity import LayerParityReport

    return LayerParityReport.from_dict(data)


@dataclass
class BisectResult:
    """Every step of a run folder against its original (``BisectStep``s)."""

    steps: list[Any]  # accel.graph.layer_parity.BisectStep

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": [
                {
                    "step": s.step,
                    "artifact": s.artifact,
                    "report": s.report.to_dict() if s.report is not None else None,
                    "error": s.error,
                }
                for s in self.steps
            ]
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BisectResult:
        from accel.graph.layer_parity import BisectStep, LayerParityReport

        return cls(
            [
                BisectStep(
                    s["step"],
                    s.get("artifact"),
                    LayerParityReport.from_dict(s["report"]) if s.get("report") else None,
                    s.get("error"),
                )
                for s in d.get("steps", [])
            ]
        )
